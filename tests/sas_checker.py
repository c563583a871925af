"""Invariant checker for sas_metadata words (SPEC 3.5).

Written from the SPEC text alone: it decodes the raw 1024 words itself (not through
specops.decode_sas_metadata) and enumerates the work items token by token, taking the union of
every token's KV range, instead of reusing any implementation's tile arithmetic.
"""

from __future__ import annotations

import dataclasses

VERSION = 0x5A5
M_TILE = 128
FIXED_COST = 1
WORDS = 1024


def kv_tile(head_dim: int) -> int:
    return max(64, 32768 // head_dim)


@dataclasses.dataclass(frozen=True)
class Item:
    bn2: int
    m: int
    lo: int
    hi: int
    rows: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.bn2, self.m)


def spec_items(query_lens: list[int], kv_lens: list[int], num_heads_q: int, num_heads_kv: int,
               window_left: int, window_right: int) -> list[Item]:
    """Every item with a non-empty KV range, in (bn2, m) order, token by token."""
    group = num_heads_q // num_heads_kv
    items = []
    for b, (q_len, kv_len) in enumerate(zip(query_lens, kv_lens)):
        rows = q_len * group
        for n2 in range(num_heads_kv):
            for m in range(-(-rows // M_TILE)):
                row_range = range(m * M_TILE, min(rows, (m + 1) * M_TILE))
                ranges = []
                for token in sorted({row // group for row in row_range}):
                    position = kv_len - q_len + token
                    lo = 0 if window_left == -1 else max(0, position - window_left)
                    hi = kv_len if window_right == -1 else min(kv_len, position + window_right + 1)
                    if hi > lo:
                        ranges.append((lo, hi))
                if not ranges:
                    continue
                ranges.sort()
                lo, hi = ranges[0]
                for a, z in ranges[1:]:
                    assert a <= hi, f"tile ({b * num_heads_kv + n2}, {m}): its tokens' KV ranges leave a gap"
                    hi = max(hi, z)
                items.append(Item(b * num_heads_kv + n2, m, lo, hi, len(row_range)))
    return items


def _chunks(lo: int, start: int, end: int, tile: int) -> int:
    """Chunks of the KV_TILE grid from `lo` that the piece [start, end) holds."""
    return -(-(end - lo) // tile) - (start - lo) // tile


@dataclasses.dataclass
class CheckedSchedule:
    """What the checker found, for properties a test wants to look at further."""

    core_costs: list[int]
    total_cost: int
    split_items: list[tuple[int, int]]
    pieces: list[tuple[int, int]]  # (core, item index) in schedule order


def check_schedule(words: list[int], *, query_lens: list[int], kv_lens: list[int], num_heads_q: int,
                   num_heads_kv: int, head_dim: int, window_left: int, window_right: int,
                   num_cube_cores: int, num_vector_cores: int) -> CheckedSchedule:
    """Asserts every invariant of SPEC 3.5 (and the documented design choices) on raw words."""
    assert len(words) == WORDS
    cores, vectors, tile = num_cube_cores, num_vector_cores, kv_tile(head_dim)
    items = spec_items(query_lens, kv_lens, num_heads_q, num_heads_kv, window_left, window_right)
    index_of = {item.key: i for i, item in enumerate(items)}

    assert words[:5] == [VERSION, cores, vectors, M_TILE, tile], f"header {words[:8]}"
    assert words[8:16] == [0] * 8, "header words 8..15 must be 0"

    # FA entries: enabled cores first (design), disabled ones all zero.
    fa = [words[16 + 8 * c: 24 + 8 * c] for c in range(cores)]
    enabled = [entry[0] == 1 for entry in fa]
    for c, entry in enumerate(fa):
        assert entry[0] in (0, 1), f"FA {c}: enable word {entry[0]}"
        if not entry[0]:
            assert entry == [0] * 8, f"disabled FA {c} is not all zero: {entry}"
    assert enabled == sorted(enabled, reverse=True), f"idle cores between busy ones: {enabled}"

    # Walk the enabled cores: each continues exactly where the previous one stopped, so every
    # item's KV range is covered exactly once, in (bn2, m) order, on the KV_TILE grid.
    pieces: list[tuple[int, int, int, int]] = []  # (core, item index, start, end)
    cursor_item, cursor_kv = 0, items[0].lo if items else 0
    core_costs = [0] * cores
    for c, entry in enumerate(fa):
        if not entry[0]:
            continue
        _, bn2_start, m_start, kv_start, bn2_end, m_end, kv_end, _ = entry
        assert cursor_item < len(items), f"FA {c} has work after every item was covered"
        assert (bn2_start, m_start) == items[cursor_item].key and kv_start == cursor_kv, (
            f"FA {c} starts at ({bn2_start}, {m_start}) kv {kv_start}, expected {items[cursor_item].key} kv {cursor_kv}")
        assert (bn2_end, m_end) in index_of, f"FA {c} ends on ({bn2_end}, {m_end}), not a scheduled item"
        while True:
            item = items[cursor_item]
            last = item.key == (bn2_end, m_end)
            end = kv_end if last else item.hi
            assert cursor_kv < end <= item.hi, f"FA {c}: piece [{cursor_kv}, {end}) of {item}"
            assert end == item.hi or (end - item.lo) % tile == 0, f"FA {c}: piece end {end} is off the KV_TILE grid"
            assert (cursor_kv - item.lo) % tile == 0, f"FA {c}: piece start {cursor_kv} is off the KV_TILE grid"
            pieces.append((c, cursor_item, cursor_kv, end))
            core_costs[c] += _chunks(item.lo, cursor_kv, end, tile) + FIXED_COST
            if end == item.hi:
                cursor_item += 1
                cursor_kv = items[cursor_item].lo if cursor_item < len(items) else 0
            else:
                cursor_kv = end
            if last:
                break
            assert cursor_item < len(items), f"FA {c}: end item ({bn2_end}, {m_end}) is before its start"
    assert cursor_item == len(items), f"items from {cursor_item} of {len(items)} are not scheduled"

    # Costs: the header total and the balance bound.
    total = sum(core_costs)
    assert words[5] == total, f"header total cost {words[5]}, pieces cost {total}"
    bound = -(-total // cores) + FIXED_COST + 1
    assert max(core_costs, default=0) <= bound, f"core costs {core_costs} exceed the bound {bound}"
    base = sum(-(-(item.hi - item.lo) // tile) + FIXED_COST for item in items)
    assert max(core_costs, default=0) <= -(-base // cores) + 1, "design: the greedy cap is at most mean + 1"

    # Workspace slots: one per piece of a split item, numbered in order of appearance.
    piece_count = {}
    for _, i, _, _ in pieces:
        piece_count[i] = piece_count.get(i, 0) + 1
    split = [i for i in sorted(piece_count) if piece_count[i] >= 2]
    slot_of_piece = []
    next_slot = 0
    first_slot = {}
    for c, i, _, _ in pieces:
        if piece_count[i] >= 2:
            first_slot.setdefault(i, next_slot)
            slot_of_piece.append((c, next_slot))
            next_slot += 1
    assert words[6] == len(split), f"header split items {words[6]}, schedule has {len(split)}"
    assert words[7] == next_slot, f"header workspace slots {words[7]}, schedule has {next_slot}"
    for c, entry in enumerate(fa):
        if not entry[0]:
            continue
        own = [slot for core, slot in slot_of_piece if core == c]
        assert len(own) <= 2, f"FA {c} holds {len(own)} split pieces"
        assert entry[7] == (own[0] if own else -1), f"FA {c}: ws_start {entry[7]}, expected {own[:1] or -1}"
    assert len(split) < vectors

    # FD entries: each split item's rows, once, over floor or ceil of V / S entries.
    fd_base = 16 + 8 * cores
    fd = [words[fd_base + 8 * v: fd_base + 8 * v + 8] for v in range(vectors)]
    fd_enabled = [entry[0] == 1 for entry in fd]
    assert fd_enabled == sorted(fd_enabled, reverse=True), f"idle vector cores between busy ones: {fd_enabled}"
    by_item: dict[int, list[tuple[int, int]]] = {}
    for v, entry in enumerate(fd):
        assert entry[0] in (0, 1), f"FD {v}: enable word {entry[0]}"
        if not entry[0]:
            assert entry == [0] * 8, f"disabled FD {v} is not all zero: {entry}"
            continue
        _, bn2, m, ws_start, ws_num, row_start, row_num, zero = entry
        assert zero == 0, f"FD {v}: word 7 is {zero}"
        i = index_of.get((bn2, m))
        assert i in split, f"FD {v} merges ({bn2}, {m}), which is not a split item"
        assert (ws_start, ws_num) == (first_slot[i], piece_count[i]), f"FD {v}: slots ({ws_start}, {ws_num})"
        by_item.setdefault(i, []).append((row_start, row_num))
    if split:
        low, high = vectors // len(split), -(-vectors // len(split))
        for i in split:
            rows = items[i].rows
            parts = sorted(by_item.get(i, []))
            assert len(parts) in (min(rows, low), min(rows, high)), (
                f"split item {items[i].key}: {len(parts)} FD entries, expected {min(rows, low)} or {min(rows, high)}")
            assert [start for start, _ in parts] == [sum(n for _, n in parts[:k]) for k in range(len(parts))]
            assert sum(n for _, n in parts) == rows, f"split item {items[i].key}: rows {parts} do not cover {rows}"
            counts = [n for _, n in parts]
            assert max(counts) - min(counts) <= 1 and min(counts) >= 1, f"uneven rows {counts}"
        order = [index_of[(e[1], e[2])] for e in fd if e[0]]
        assert order == sorted(order), "design: FD entries are grouped item after item"
    assert sum(fd_enabled) <= vectors
    assert words[fd_base + 8 * vectors:] == [0] * (WORDS - fd_base - 8 * vectors), "words past the FD entries"

    return CheckedSchedule(core_costs, total, [items[i].key for i in split], [(c, i) for c, i, _, _ in pieces])
