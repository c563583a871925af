"""sas_metadata's schedule restated tile by tile in plain Python: a second reference.

Written apart from the torch reference (sas_metadata.py, which costs every tile with torch ops):
lists and ints only, one M tile at a time, no argument checks. The tests compare every backend
and the golden vectors with it, and `specops-bench --op sas_metadata` times it as what a runner
would otherwise run on the host.
"""

from __future__ import annotations

import torch

from specops.sas_layout import ASCEND950, NUM_WORDS


def python_sas_metadata(num_heads_q: int, num_heads_kv: int, head_dim: int, *, cu_seqlens_q=None,
                        cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None, seqused_kv=None,
                        batch_size: int = 0, max_seqlen_q: int = 0, max_seqlen_kv: int = 0, ori_topk: int = 0,
                        cmp_topk: int = 0, cmp_ratio: int = 4, ori_mask_mode: int = 4, cmp_mask_mode: int = 3,
                        ori_win_left: int = 128, ori_win_right: int = 0, layout_q: str = "BSND",
                        layout_kv: str = "PA_ND", has_ori_kv: bool = True, has_cmp_kv: bool = True,
                        num_cube_cores: int = 24, num_vector_cores: int = 48,
                        soc_version: str = "Ascend910B1") -> list[int]:
    """The AI-CPU kernel's schedule restated tile by tile in plain Python, for a call the kernel
    accepts (no argument checks): the 1024 words, unwritten ones 0."""

    def given(t):
        return t is not None and len(t) > 0

    def values(t):
        return t.tolist() if isinstance(t, torch.Tensor) else t

    cu_q, cu_kv, used_q, used_kv = values(cu_seqlens_q), values(cu_seqlens_ori_kv), values(seqused_q), values(seqused_kv)
    group = num_heads_q // num_heads_kv
    m_tile, s2_tile = (64, 128) if ASCEND950 in soc_version else (group, 512)
    if given(used_q):
        batches = len(used_q)
    elif layout_q == "TND" and given(cu_q):
        batches = len(cu_q) - 1
    else:
        batches = batch_size

    def s1_of(b):
        if given(used_q):
            return used_q[b]
        if layout_q == "TND" and given(cu_q):
            return cu_q[b + 1] - cu_q[b]
        return max_seqlen_q

    def s2_of(b):
        if given(used_kv):
            return used_kv[b]
        if layout_kv == "TND" and given(cu_kv):
            return cu_kv[b + 1] - cu_kv[b]
        return max_seqlen_kv

    def tiles_of(b):
        return -(-s1_of(b) * group // m_tile)

    def block_cost(rows, tokens):
        return 6 * -(-rows // 16) + 10 * -(-tokens // 64)

    def range_cost(rows, length):
        """Cost and last-block cost of `length` KV tokens cut into S2 tiles."""
        full, tail = divmod(length, s2_tile)
        cost = full * block_cost(rows, s2_tile) + (block_cost(rows, tail) if tail else 0)
        return cost, block_cost(rows, tail if tail else s2_tile)

    def tile(b, m):
        """(cost, last-block cost, sees KV) of M tile m of batch b."""
        s1, s2 = s1_of(b), s2_of(b)
        first_row, last_row = m * m_tile, min((m + 1) * m_tile, s1 * group) - 1
        first_position = s2 - s1 + first_row // group
        last_position = s2 - s1 + last_row // group
        if ori_mask_mode == 0:
            lo, hi = 0, s2 - 1
        elif ori_mask_mode == 3:
            lo, hi = 0, last_position
        else:
            lo, hi = first_position - ori_win_left, last_position + ori_win_right
        if s2 == 0 or lo >= s2 or hi < 0 or hi < lo:
            return 0, 0, False
        lo, hi = max(lo, 0), min(hi, s2 - 1)
        leftover = (s1 * group) % m_tile
        rows = leftover if m == tiles_of(b) - 1 and leftover else m_tile
        cost, last_cost = range_cost(rows, hi - lo + 1)
        compressed = (hi + 1) // cmp_ratio if has_cmp_kv else 0
        if has_cmp_kv and cmp_topk:
            compressed = min(compressed, cmp_topk)
        if compressed:
            compressed_cost, last_cost = range_cost(rows, compressed)
            cost += compressed_cost
        return cost, last_cost, True

    words = [0] * NUM_WORDS
    if not any(tiles_of(b) and s2_of(b) for b in range(batches)):
        words[:8] = [1, 0, 0, 0, batches, 0, 0, 0]
        return words
    batch_cost, batch_last = [0] * batches, [0] * batches
    max_tile = 0
    for b in range(batches):
        if s2_of(b) == 0:
            continue
        for m in range(tiles_of(b)):
            cost, last_cost, sees = tile(b, m)
            batch_cost[b] += cost
            max_tile = max(max_tile, cost)
            if sees:
                batch_last[b] = last_cost
    unassigned = sum(batch_cost)
    b, m, remaining = 0, 0, batch_cost[0]
    start = (0, 0)
    for core in range(num_cube_cores):
        if b == batches or unassigned <= 0:
            break
        limit = max(unassigned // (num_cube_cores - core), max_tile)
        load = 0
        while remaining == 0 or load + remaining <= limit + batch_last[b] // 2:
            load += remaining
            b, m = b + 1, 0
            if b == batches:
                break
            remaining = batch_cost[b]
        if b < batches:
            cost, last_cost, _ = tile(b, m)
            while load + cost <= limit + last_cost // 2:
                load += cost
                remaining -= cost
                m += 1
                cost, last_cost, sees = tile(b, m)
                while not sees and m < tiles_of(b) - 1:
                    m += 1
                    cost, last_cost, sees = tile(b, m)
        words[8 * core: 8 * core + 8] = [1, start[0], start[1], 0, b, m, 0, 0]
        start = (b, m)
        unassigned -= load
    return words
