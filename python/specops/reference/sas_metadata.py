"""Reference for sas_metadata: the AI-CPU kernel's schedule, its cost table in torch.

The schedule has two steps (docs/sas_metadata.md):
1. Cost table. Each batch's query rows (token-major: row = token * G + head) are cut into M tiles;
   an M tile sees a KV range (the union of its tokens' masks), cut into S2 tiles. A block of m
   rows and s KV tokens costs 6 * ceil(m / 16) + 10 * ceil(s / 64); an M tile costs its window
   blocks plus its compressed-KV blocks.
2. Greedy pass. Core i gets the limit max(unassigned cost / (cores - i), most costly M tile). It
   takes whole batches while they fit, then whole M tiles; "fit" allows half of the last block of
   the batch or tile over the limit. The core's FA entry is the (batch, M tile) cursor before and
   after it.

Values a device kernel cannot reject (negative lengths, more than 2^31 - 1 query rows, a total
cost past 2^56) give 1024 zero words, as on the device paths.
"""

from __future__ import annotations

import dataclasses

import torch

from specops.sas_family_layout import Variant
from specops.sas_layout import (
    ENTRY_WORDS,
    INT32_MAX,
    INT32_MIN,
    MASK_BAND,
    MASK_CAUSAL,
    MASK_NONE,
    MAX_TOTAL_COST,
    NUM_WORDS,
    SOURCE_CONSTANT,
    SOURCE_CUMULATIVE,
    LengthSource,
    kv_lengths,
    num_batches,
    query_lengths,
    tile_sizes,
)


class InvalidValues(ValueError):
    """Lengths the schedule cannot be computed for; the device paths write 1024 zeros."""


def batch_lengths(source: LengthSource, batches: int) -> torch.Tensor:
    """int64 [B] lengths, read as the kernel reads them; InvalidValues for a value outside int32."""
    if source.kind == SOURCE_CONSTANT:
        return torch.full((batches,), source.constant, dtype=torch.int64)
    # No batch reads no entry, not even a cumulative source's leading one (as the kernels read).
    count = batches + 1 if source.kind == SOURCE_CUMULATIVE and batches else batches
    values = source.tensor[:count].cpu().long()
    if values.numel() and (values.min() < INT32_MIN or values.max() > INT32_MAX):
        raise InvalidValues(f"{source.name} holds a value outside int32")
    return values[1:] - values[:-1] if source.kind == SOURCE_CUMULATIVE else values


def ceil_div(a: torch.Tensor | int, b: int) -> torch.Tensor:
    return (a + b - 1) // b


def block_cost(rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The cost of a block of `rows` query rows and `tokens` KV tokens."""
    return 6 * ceil_div(rows, 16) + 10 * ceil_div(tokens, 64)


@dataclasses.dataclass
class CostTable:
    """Per batch: cost and last-block cost; per M tile (row of the table, batch by batch): cost,
    last-block cost and whether it sees any KV."""

    batch_cost: list[int]
    batch_last_block_cost: list[int]
    first_tile: list[int]  # index of the batch's first M tile in the per-tile lists
    tile_cost: list[int]
    tile_last_block_cost: list[int]
    tile_empty: list[bool]
    max_tile_cost: int
    total_cost: int
    tile_blocks: list[int]  # S2 blocks of each M tile (window and compressed)


def cost_table(s1: torch.Tensor, s2: torch.Tensor, group: int, m_tile: int, s2_tile: int, mask_mode: int,
               win_left: int, win_right: int, has_cmp_kv: bool, cmp_ratio: int, cmp_topk: int) -> CostTable:
    query_rows = s1 * group
    tiles = ceil_div(query_rows, m_tile)
    batch = torch.repeat_interleave(torch.arange(s1.numel()), tiles)
    first_tile = torch.cumsum(tiles, 0) - tiles
    m = torch.arange(batch.numel()) - first_tile[batch]
    tile_s1, tile_s2, tile_rows = s1[batch], s2[batch], query_rows[batch]

    # The tokens of M tile m, and the window of KV positions they see (token t sits at position
    # s2 - s1 + t): [t_first - win_left, t_last + win_right] in band mode, up to t_last when causal.
    first_row = m * m_tile
    last_row = torch.minimum(first_row + m_tile, tile_rows) - 1
    position_offset = tile_s2 - tile_s1
    if mask_mode == MASK_NONE:
        lo, hi = torch.zeros_like(m), tile_s2 - 1
    elif mask_mode == MASK_CAUSAL:
        lo, hi = torch.zeros_like(m), last_row // group + position_offset
    else:
        assert mask_mode == MASK_BAND
        lo = first_row // group + position_offset - win_left
        hi = last_row // group + position_offset + win_right
    empty = (tile_s2 == 0) | (lo >= tile_s2) | (hi < 0) | (hi < lo)
    lo, hi = lo.clamp(min=0), torch.minimum(hi, tile_s2 - 1)
    window = torch.where(empty, 0, hi - lo + 1)
    compressed = torch.zeros_like(window)
    if has_cmp_kv:
        compressed = torch.where(empty, 0, (hi + 1) // cmp_ratio)
        if cmp_topk > 0:
            compressed = compressed.clamp(max=cmp_topk)

    # The last tile of a batch holds the rows left over, if m_tile does not divide them.
    leftover = query_rows % m_tile
    tile_m = torch.where((m == tiles[batch] - 1) & (leftover[batch] > 0), leftover[batch], m_tile)
    # Every block costs 6 * ceil(m / 16) for its rows; as the S2 tile is a multiple of 64, the
    # 10 * ceil(tokens / 64) of the blocks of a range add up to 10 * ceil(range / 64).
    blocks = ceil_div(window, s2_tile) + ceil_div(compressed, s2_tile)
    cost = 6 * ceil_div(tile_m, 16) * blocks + 10 * (ceil_div(window, 64) + ceil_div(compressed, 64))
    return summarize_tiles(s1, batch, first_tile, cost, last_block_cost_of(tile_m, window, compressed, s2_tile, empty),
                           empty, blocks)


def last_block_cost_of(tile_m: torch.Tensor, window: torch.Tensor, compressed: torch.Tensor, s2_tile: int,
                       empty: torch.Tensor) -> torch.Tensor:
    # The last block: of the compressed KV when there is any, else of the window; full or the tail.
    last_part = torch.where(compressed > 0, compressed, window)
    last_block = last_part - (ceil_div(last_part, s2_tile) - 1) * s2_tile
    return torch.where(empty, 0, block_cost(tile_m, last_block))


def summarize_tiles(s1: torch.Tensor, batch: torch.Tensor, first_tile: torch.Tensor, cost: torch.Tensor,
                    last_block_cost: torch.Tensor, empty: torch.Tensor, blocks: torch.Tensor) -> CostTable:
    """The cost table of per-tile costs (any variant's tile rule): batch sums, the most costly
    tile, the total (InvalidValues past 2^56) and each batch's last-block cost."""
    num_tiles = cost.numel()
    max_tile_cost = int(cost.max()) if num_tiles else 0
    # int64 sums cannot overflow when every tile could cost the most; otherwise sum exactly.
    if max_tile_cost * num_tiles <= MAX_TOTAL_COST:
        total_cost = int(cost.sum()) if num_tiles else 0
    else:
        total_cost = sum(cost.tolist())
    if total_cost > MAX_TOTAL_COST:
        raise InvalidValues("total cost past 2^56")
    batch_cost = torch.zeros_like(s1).index_add_(0, batch, cost)
    # A batch's last-block cost is that of its last M tile that sees KV.
    last_seen = torch.full_like(s1, -1).scatter_reduce_(0, batch[~empty], torch.nonzero(~empty).flatten(), "amax")
    batch_last_block_cost = torch.where(last_seen >= 0, last_block_cost[last_seen.clamp(min=0)], 0)
    return CostTable(batch_cost.tolist(), batch_last_block_cost.tolist(), first_tile.tolist(), cost.tolist(),
                     last_block_cost.tolist(), empty.tolist(), max_tile_cost, total_cost,
                     torch.where(empty, 0, blocks).tolist())


def greedy_core_ends(table: CostTable, tiles: list[int], num_cube_cores: int) -> list[tuple[int, int]]:
    """The (batch, M tile) cursor after each used core."""
    batches = len(table.batch_cost)
    unassigned = table.total_cost
    b, m = 0, 0
    remaining = table.batch_cost[0]  # of batch b, from tile m on
    ends: list[tuple[int, int]] = []
    for core in range(num_cube_cores):
        if b == batches or unassigned <= 0:
            break
        limit = max(unassigned // (num_cube_cores - core), table.max_tile_cost)
        load = 0
        # Whole batches (a batch without cost always).
        while remaining == 0 or load + remaining <= limit + table.batch_last_block_cost[b] // 2:
            load += remaining
            b, m = b + 1, 0
            if b == batches:
                break
            remaining = table.batch_cost[b]
        if b < batches:
            # Whole M tiles. After a tile is taken the cursor skips those that see no KV; the
            # batch's last tile sees KV and fails the test the whole batch failed, so the
            # cursor never leaves the batch here.
            tile = table.first_tile[b] + m
            while load + table.tile_cost[tile] <= limit + table.tile_last_block_cost[tile] // 2:
                load += table.tile_cost[tile]
                remaining -= table.tile_cost[tile]
                m, tile = m + 1, tile + 1
                while m < tiles[b] and table.tile_empty[tile]:
                    m, tile = m + 1, tile + 1
                assert m < tiles[b], "the cursor left the batch"
        ends.append((b, m))
        unassigned -= load
    return ends


def schedule_words(
    num_heads_q: int, cu_seqlens_q: torch.Tensor | None, cu_seqlens_ori_kv: torch.Tensor | None,
    seqused_q: torch.Tensor | None, seqused_kv: torch.Tensor | None, batch_size: int, max_seqlen_q: int,
    max_seqlen_kv: int, cmp_topk: int, cmp_ratio: int, ori_mask_mode: int, ori_win_left: int, ori_win_right: int,
    layout_q: int, layout_kv: int, has_cmp_kv: bool, num_cube_cores: int, ascend950: bool,
    variant: Variant | None = None,
) -> list[int]:
    """The 1024 words of a call that passed the op's checks; InvalidValues for invalid values.
    `variant`: the member's tiles and layout (sas_metadata's own without one)."""
    batches = num_batches(layout_q, cu_seqlens_q, seqused_q, batch_size)
    query = query_lengths(layout_q, cu_seqlens_q, seqused_q, max_seqlen_q)
    kv = kv_lengths(layout_kv, cu_seqlens_ori_kv, seqused_kv, max_seqlen_kv)
    if variant is None:
        m_tile, s2_tile = tile_sizes(num_heads_q, ascend950)
        variant = Variant(m_tile, s2_tile, planned_cores=num_cube_cores)
    if query.kind == SOURCE_CONSTANT and kv.kind == SOURCE_CONSTANT and batches > 1:
        # Equal batches: one decides whether any has work, so a large batch_size without work
        # costs nothing (with work, the tiles are counted one by one anyway).
        s1, s2 = batch_lengths(query, 1), batch_lengths(kv, 1)
        tiles = ceil_div(s1 * num_heads_q, variant.m_tile_rows)
        valid = int(s1) >= 0 and int(s2) >= 0 and int(s1) * num_heads_q <= INT32_MAX
        if valid and int(tiles) * batches <= INT32_MAX and not (int(tiles) > 0 and int(s2) > 0):
            return layout_words(None, [], batches, variant)
    s1 = batch_lengths(query, batches)
    s2 = batch_lengths(kv, batches)
    group = num_heads_q  # num_heads_kv is 1
    tiles = checked_tiles(s1, s2, group, variant.m_tile_rows)

    def costs() -> CostTable:
        return cost_table(s1, s2, group, variant.m_tile_rows, variant.s2_tile, ori_mask_mode, ori_win_left,
                          ori_win_right, has_cmp_kv, cmp_ratio, cmp_topk)

    work = bool(((tiles > 0) & (s2 > 0)).any())
    return layout_words(costs() if work else None, tiles.tolist(), batches, variant)


def checked_tiles(s1: torch.Tensor, s2: torch.Tensor, group: int, m_tile: int) -> torch.Tensor:
    """Each batch's M tiles; InvalidValues for lengths no schedule is computed for."""
    if (s1 < 0).any() or (s2 < 0).any() or (s1 * group > INT32_MAX).any():
        raise InvalidValues("a negative length, or more than 2^31 - 1 query rows in a batch")
    tiles = ceil_div(s1 * group, m_tile)
    if int(tiles.sum()) > INT32_MAX:
        raise InvalidValues("more than 2^31 - 1 M tiles in all")
    return tiles


def layout_words(table: CostTable | None, tiles: list[int], batches: int, variant: Variant) -> list[int]:
    """The words of the greedy pass over `table` (None, or a total of 0: no batch has work, and
    core 0 covers every batch at once), in the variant's layout."""
    words = [0] * NUM_WORDS
    if table is None or table.total_cost == 0:
        entries, core_blocks = [[1, 0, 0, 0, batches, 0, 0, 0]], [0]
    else:
        entries, core_blocks, start = [], [], (0, 0)
        for end in greedy_core_ends(table, tiles, variant.planned_cores):
            # enable, bn2/m/s2 start, bn2/m/s2 end, first FD workspace index (no KV range is split)
            entries.append([1, start[0], start[1], 0, end[0], end[1], 0, 0])
            core_blocks.append(blocks_between(table, tiles, start, end))
            start = end
    step = variant.entry_words * (2 if variant.paired else 1)
    for core, entry in enumerate(entries):
        words[step * core: step * core + ENTRY_WORDS] = entry
    if variant.paired:
        most = max(core_blocks)
        for core in range(variant.planned_cores):
            first = words[step * core: step * core + ENTRY_WORDS] + [most]
            words[step * core: step * core + step] = first + first
    return words


def blocks_between(table: CostTable, tiles: list[int], start: tuple[int, int], end: tuple[int, int]) -> int:
    """The S2 blocks of the M tiles from cursor `start` up to cursor `end`."""
    def index(cursor: tuple[int, int]) -> int:
        b, m = cursor
        return table.first_tile[b] + m if b < len(tiles) else len(table.tile_cost)
    return sum(table.tile_blocks[index(start): index(end)])


def sas_metadata(a) -> None:
    # head_dim, ori_topk, cmp_mask_mode, has_ori_kv and cu_seqlens_cmp_kv do not change the
    # schedule; the vector cores get no FD work (no KV range is split).
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    try:
        words = schedule_words(a.num_heads_q, a.cu_seqlens_q, a.cu_seqlens_ori_kv, a.seqused_q, a.seqused_kv, a.batch_size,
                               a.max_seqlen_q, a.max_seqlen_kv, a.cmp_topk, a.cmp_ratio, a.ori_mask_mode, a.ori_win_left,
                               a.ori_win_right, a.layout_q, a.layout_kv, a.has_cmp_kv, a.num_cube_cores, a.ascend950)
    except InvalidValues:
        words = [0] * NUM_WORDS
    a.out.copy_(torch.tensor(words, dtype=torch.int32))
