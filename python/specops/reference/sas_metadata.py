"""Reference for sas_metadata (docs/sas_metadata.md): the schedule, item by item, in plain Python."""

from __future__ import annotations

import dataclasses

import torch

from specops.sas_layout import (
    ENTRY_WORDS,
    FIXED_COST,
    INT32_MAX,
    LAYOUT_VERSION,
    M_TILE,
    NUM_WORDS,
    fa_offset,
    fd_offset,
    kv_tile_for,
)


@dataclasses.dataclass(frozen=True)
class WorkItem:
    """Query tile m of (request, KV head) bn2 and the KV range [lo, hi) its rows see."""

    bn2: int
    m: int
    lo: int
    hi: int
    rows: int
    chunks: int

    @property
    def cost(self) -> int:
        return self.chunks + FIXED_COST


class InvalidBatch(ValueError):
    """Values that a device kernel cannot schedule: it writes the all-zero buffer instead."""


def work_items(cu_seqlens_q: torch.Tensor, seqused_kv: torch.Tensor, num_heads_q: int, num_heads_kv: int,
               head_dim: int, window_left: int, window_right: int) -> list[WorkItem]:
    """Every item with a non-empty KV range, in (bn2, m) order; InvalidBatch for bad values."""
    group = num_heads_q // num_heads_kv
    kv_tile = kv_tile_for(head_dim)
    cu = cu_seqlens_q.tolist()
    kv_lens = seqused_kv.tolist()
    items = []
    for b, kv_len in enumerate(kv_lens):
        q_len = cu[b + 1] - cu[b]
        rows = q_len * group
        if q_len < 0 or kv_len < 0 or rows > INT32_MAX:
            raise InvalidBatch(f"request {b}: query length {q_len}, KV length {kv_len}, {rows} rows")
        for n2 in range(num_heads_kv):
            for m in range(-(-rows // M_TILE)):
                row_begin, row_end = m * M_TILE, min(rows, (m + 1) * M_TILE)
                # Rows are token-major (row = token * group + head); token i sits at position
                # kv_len - q_len + i. Window edges only move forward with the position, so the
                # tile sees from its first token's lower edge to its last token's upper edge.
                first_position = kv_len - q_len + row_begin // group
                last_position = kv_len - q_len + (row_end - 1) // group
                lo = 0 if window_left == -1 else max(0, first_position - window_left)
                hi = kv_len if window_right == -1 else min(kv_len, last_position + window_right + 1)
                if hi > lo:
                    chunks = -(-(hi - lo) // kv_tile)
                    items.append(WorkItem(b * num_heads_kv + n2, m, lo, hi, row_end - row_begin, chunks))
    return items


@dataclasses.dataclass
class _Plan:
    fa: list[list[int]]  # per cube core: enable, bn2_start, m_start, kv_start, bn2_end, m_end, kv_end, ws_start
    splits: list[list[int]]  # per split item: bn2, m, ws_start, ws_num, rows
    slots: int = 0
    total_cost: int = 0


def _schedule(items: list[WorkItem], cap: int, num_cores: int, kv_tile: int) -> _Plan | None:
    """Greedy fill of the cores up to `cap`; None if they run out."""
    plan = _Plan(fa=[[0] * ENTRY_WORDS for _ in range(num_cores)], splits=[])
    core, load = 0, 0
    for item in items:
        done = 0
        while done < item.chunks:
            if load + 1 + FIXED_COST > cap:  # not even one chunk fits: next core
                core, load = core + 1, 0
            if core == num_cores:
                return None
            take = min(item.chunks - done, cap - load - FIXED_COST)
            split = done > 0 or take < item.chunks
            if done == 0 and split:
                plan.splits.append([item.bn2, item.m, plan.slots, 0, item.rows])
            entry = plan.fa[core]
            if load == 0:
                entry[:4] = [1, item.bn2, item.m, item.lo + done * kv_tile]
                entry[7] = -1
            entry[4:7] = [item.bn2, item.m, min(item.hi, item.lo + (done + take) * kv_tile)]
            if split:
                if entry[7] == -1:
                    entry[7] = plan.slots
                plan.slots += 1
                plan.splits[-1][3] += 1
            load += take + FIXED_COST
            plan.total_cost += take + FIXED_COST
            done += take
    return plan


def _merge_entries(splits: list[list[int]], num_vector_cores: int) -> list[list[int]]:
    """FD entries: split item k gets floor or ceil of V / S (the first V % S the ceil), at most
    its row count, and its rows dealt out as evenly as possible."""
    entries = []
    for k, (bn2, m, ws_start, ws_num, rows) in enumerate(splits):
        wanted = num_vector_cores // len(splits) + (1 if k < num_vector_cores % len(splits) else 0)
        count = min(rows, wanted)
        row = 0
        for e in range(count):
            row_num = rows // count + (1 if e < rows % count else 0)
            entries.append([1, bn2, m, ws_start, ws_num, row, row_num, 0])
            row += row_num
    return entries


def sas_metadata(
    cu_seqlens_q: torch.Tensor,
    seqused_kv: torch.Tensor,
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    window_left: int,
    window_right: int,
    num_cube_cores: int,
    num_vector_cores: int,
    out: torch.Tensor,
) -> None:
    kv_tile = kv_tile_for(head_dim)
    words = [0] * NUM_WORDS
    try:
        items = work_items(cu_seqlens_q, seqused_kv, num_heads_q, num_heads_kv, head_dim, window_left, window_right)
        base = sum(item.cost for item in items)
        if base > INT32_MAX:
            raise InvalidBatch(f"total cost {base}")
    except InvalidBatch:
        out.copy_(torch.tensor(words, dtype=torch.int32))
        return

    plan = _Plan(fa=[[0] * ENTRY_WORDS for _ in range(num_cube_cores)], splits=[])
    if items:
        # No core can cost less than the mean; the greedy fill at mean + 1 always fits.
        lower_bound = -(-base // num_cube_cores)
        tight = _schedule(items, lower_bound, num_cube_cores, kv_tile) if lower_bound >= 1 + FIXED_COST else None
        plan = tight if tight is not None else _schedule(items, lower_bound + 1, num_cube_cores, kv_tile)
    if plan.total_cost > INT32_MAX:
        out.copy_(torch.tensor(words, dtype=torch.int32))
        return

    words[:8] = [LAYOUT_VERSION, num_cube_cores, num_vector_cores, M_TILE, kv_tile,
                 plan.total_cost, len(plan.splits), plan.slots]
    for core, entry in enumerate(plan.fa):
        words[fa_offset(core): fa_offset(core) + ENTRY_WORDS] = entry
    for v, entry in enumerate(_merge_entries(plan.splits, num_vector_cores)):
        words[fd_offset(num_cube_cores, v): fd_offset(num_cube_cores, v) + ENTRY_WORDS] = entry
    out.copy_(torch.tensor(words, dtype=torch.int32))
