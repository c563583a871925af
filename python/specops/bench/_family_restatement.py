"""The greedy pass of the sas family's AI-CPU kernels restated in plain Python (an implementation
apart from specops' C++, Triton and torch ones): for the benchmarks' baselines and the tests'
independent expectations. A tile is (cost, last-block cost, sees KV, S2 blocks)."""

from __future__ import annotations

from collections.abc import Callable

Tile = tuple[int, int, bool, int]


def greedy_words(batches: int, tiles_of: Callable[[int], int], tile: Callable[[int, int], Tile], cores: int,
                 entry_width: int = 8, paired: bool = False) -> list[int]:
    """The 1024 words: each batch's cost, then cores take whole batches, then whole tiles, while
    the load stays within max(unassigned / cores left, most costly tile) plus half the last
    block; every entry is (enable, batch/tile start, 0, batch/tile end, 0, 0). With `paired`
    each planned core writes two entries, word 8 = the most blocks of a core."""
    costs = [[tile(b, m) for m in range(tiles_of(b))] for b in range(batches)]
    batch_cost = [sum(t[0] for t in row) for row in costs]
    batch_blocks = [sum(t[3] for t in row) for row in costs]
    batch_last = [next((t[1] for t in reversed(row) if t[2]), 0) for row in costs]
    max_tile = max((t[0] for row in costs for t in row), default=0)
    entries, core_blocks = [], []
    if sum(batch_cost) == 0:
        entries, core_blocks = [[1, 0, 0, 0, batches, 0, 0, 0]], [0]
    else:
        unassigned = sum(batch_cost)
        b, m, remaining, remaining_blocks = 0, 0, batch_cost[0], batch_blocks[0]
        for core in range(cores):
            if b == batches or unassigned <= 0:
                break
            limit = max(unassigned // (cores - core), max_tile)
            load, blocks, start = 0, 0, (b, m)
            while remaining == 0 or load + remaining <= limit + batch_last[b] // 2:
                load, blocks = load + remaining, blocks + remaining_blocks
                b, m = b + 1, 0
                if b == batches:
                    break
                remaining, remaining_blocks = batch_cost[b], batch_blocks[b]
            if b < batches:
                while load + costs[b][m][0] <= limit + costs[b][m][1] // 2:
                    load, blocks = load + costs[b][m][0], blocks + costs[b][m][3]
                    remaining, remaining_blocks = remaining - costs[b][m][0], remaining_blocks - costs[b][m][3]
                    m += 1
                    while not costs[b][m][2] and m < len(costs[b]) - 1:
                        m += 1
            entries.append([1, start[0], start[1], 0, b, m, 0, 0])
            core_blocks.append(blocks)
            unassigned -= load
    words = [0] * 1024
    step = entry_width * (2 if paired else 1)
    for core, entry in enumerate(entries):
        words[step * core: step * core + 8] = entry
    if paired:
        for core in range(cores):
            pair = words[step * core: step * core + 8] + [max(core_blocks)]
            words[step * core: step * core + step] = pair + pair
    return words


def given(t) -> bool:
    return t is not None and len(t) > 0


def values(t):
    return t.tolist() if hasattr(t, "tolist") else t
