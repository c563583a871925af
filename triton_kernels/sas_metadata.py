"""Triton kernel for sas_metadata: the AI-CPU kernel's schedule without a host sync.

One program runs the two passes of csrc/kernels/sas_metadata.h. Batches are costed REQS at a
time: a batch of up to TILES M tiles takes one row of a [REQS, TILES] block, a longer one is
costed alone, LANES tiles at a time. The greedy pass keeps the costs of the current REQS
batches, takes whole batches with one prefix sum, then the M tiles of the batch a core stops in,
LANES at a time. Every FA entry is stored once when its core is done, the other words once at
the end, so the program never reads back what it wrote; invalid values leave all 1024 words 0.

On an Ascend NPU the launcher does not launch this kernel: triton-ascend's pointer analysis
cannot trace loads whose offsets are carried through the greedy pass's data-dependent loop and
branch structure (triton-adapter-opt stops in --triton-to-linalg, "AddPtrOp produced by
unsupported operation"), and the pass is sequential by nature. The NPU route is the C++ host op
and one asynchronous copy of the 1024 words, for all three members of the family
(`_sas_family.npu_host_routed`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.sas_family_layout import Variant
from specops.sas_layout import (
    ENTRY_WORDS,
    INT32_MAX,
    INT32_MIN,
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
from specops.triton_kernels._sas_family import COST_SAS, _batches, _finish_pairs_kernel, _tile_cost, npu_host_routed
# Here too: a kernel whose module has host_route takes the host route on the NPU (tests/ascend).
from specops.triton_kernels._sas_family import host_route  # noqa: F401

# Batches costed side by side. At 32, ptxas keeps some source combinations (a constant KV length)
# to 128 registers with a 4-byte spill on sm_90; at 16 every combination compiles without one.
REQS = 16
TILES = 8  # M tiles per batch in the [REQS, TILES] block: a decode of up to 8 tokens
LANES = REQS * TILES  # M tiles per step of a longer batch
NUM_WARPS = 4  # sm_90 and sm_80 compile without a spill at 4 warps (at 8, ptxas caps at 128 registers)


@triton.jit
def _chunk(query_ptr, kv_ptr, b0, num_batches, query_constant, kv_constant, group, m_tile, s2_tile, mask_mode,
           win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk, max_total,
           QUERY_SOURCE: tl.constexpr, KV_SOURCE: tl.constexpr, REQS: tl.constexpr, TILES: tl.constexpr,
           COST: tl.constexpr):
    """Batches [b0, b0 + REQS) with valid values, one per lane: M tiles, cost and last-block cost
    (int32: a block costs below 2^31), 0 past the end and without work; the [REQS, TILES] costs,
    last-block costs and KV flags of the tiles of the batches of at most TILES tiles; the most
    costly tile; and whether some batch alone costs more than max_total (its cost is then only
    known to be above it)."""
    LANES: tl.constexpr = REQS * TILES
    req = tl.arange(0, REQS)
    s1, s2, tiles, leftover, _ = _batches(query_ptr, kv_ptr, b0, num_batches, query_constant, kv_constant, group,
                                          m_tile, QUERY_SOURCE, KV_SOURCE, REQS)
    work = (tiles > 0) & (s2 > 0)

    # Batches of at most TILES tiles: one row each of the block.
    m = tl.arange(0, TILES)[None, :]
    in_block = (work & (tiles <= TILES))[:, None] & (m < tiles[:, None])
    tile_cost, tile_last, tile_sees, _tile_blocks = _tile_cost(
        m, s1[:, None], s2[:, None], tiles[:, None], leftover[:, None], group, m_tile, s2_tile, mask_mode, win_left,
        win_right, has_cmp_kv, cmp_ratio, cmp_topk, COST)
    tile_cost = tl.where(in_block, tile_cost, 0)
    tile_sees = in_block & tile_sees
    batch_cost = tl.sum(tile_cost, axis=1)
    max_tile = tl.max(tl.max(tile_cost, axis=1), axis=0)
    last_seen = tl.max(tl.where(tile_sees, m, -1), axis=1)
    batch_last = tl.sum(tl.where(m == last_seen[:, None], tile_last, 0), axis=1)
    too_costly = tl.zeros([], tl.int32) != 0

    # Longer batches, one at a time, LANES tiles per step.
    lane = tl.arange(0, LANES)
    long = work & (tiles > TILES)
    k = tl.min(tl.where(long, req, REQS))
    while k < REQS:
        k_s1 = tl.sum(tl.where(req == k, s1, 0))
        k_s2 = tl.sum(tl.where(req == k, s2, 0))
        k_tiles = tl.sum(tl.where(req == k, tiles, 0))
        k_leftover = tl.sum(tl.where(req == k, leftover, 0))
        k_cost = tl.zeros([], tl.int64)
        k_last = tl.zeros([], tl.int64)
        m0 = tl.zeros([], tl.int64)
        while (m0 < k_tiles) & (k_cost <= max_total):
            t = m0 + lane
            inside = t < k_tiles
            cost, last_cost, sees, _blocks = _tile_cost(t, k_s1, k_s2, k_tiles, k_leftover, group, m_tile, s2_tile,
                                                        mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio,
                                                        cmp_topk, COST)
            cost = tl.where(inside, cost, 0)
            k_cost += tl.sum(cost)
            max_tile = tl.maximum(max_tile, tl.max(cost))
            last = tl.max(tl.where(inside & sees, lane, -1))
            if last >= 0:
                k_last = tl.sum(tl.where(lane == last, last_cost, 0))
            m0 += LANES
        batch_cost = tl.where(req == k, k_cost, batch_cost)
        batch_last = tl.where(req == k, k_last, batch_last)
        too_costly = too_costly | (k_cost > max_total)
        k = tl.min(tl.where(long & (req > k), req, REQS))
    return tiles, batch_cost, batch_last.to(tl.int32), tile_cost, tile_last.to(tl.int32), tile_sees, max_tile, too_costly


@triton.jit
def _prefix_sums(tiles, batch_cost, tile_cost, tile_last, tile_sees, TILES: tl.constexpr):
    """What the greedy pass keeps of a chunk: the cost of its batches before / up to and including
    each batch, and of its tiles up to and including each tile of the [REQS, TILES] block; the
    last-block cost of each tile, -1 for a tile that sees no KV; the chunk's total; and whether
    every batch fits the block."""
    batch_end = tl.cumsum(batch_cost, 0)
    batch_start = batch_end - batch_cost
    tile_end = batch_start[:, None] + tl.cumsum(tile_cost, 1)
    return (batch_start, batch_end, tile_end, tl.where(tile_sees, tile_last, -1), tl.sum(batch_cost),
            tl.max(tiles) <= TILES)


@triton.jit
def _sas_metadata_kernel(
    query_ptr, kv_ptr, out_ptr,
    num_batches, query_constant, kv_constant, group, m_tile, s2_tile, mask_mode, win_left, win_right, has_cmp_kv,
    cmp_ratio, cmp_topk, num_cube_cores, max_total,
    QUERY_SOURCE: tl.constexpr, KV_SOURCE: tl.constexpr, NUM_WORDS: tl.constexpr, ENTRY_WORDS: tl.constexpr,
    REQS: tl.constexpr, TILES: tl.constexpr, COST: tl.constexpr, ENTRY_STRIDE: tl.constexpr,
    ENTRY_WIDTH: tl.constexpr,
):
    """ENTRY_WORDS fields per FA entry; ENTRY_WIDTH words per entry (9: s2_max_num at word 8);
    ENTRY_STRIDE words from a planned core's entry to the next (twice the width for core pairs,
    finished by _finish_pairs_kernel)."""
    LANES: tl.constexpr = REQS * TILES
    req = tl.arange(0, REQS)
    lane = tl.arange(0, LANES)
    field = tl.arange(0, ENTRY_WORDS)

    # Pass 0: every batch's values, before anything is costed.
    valid = tl.zeros([], tl.int32) == 0
    all_tiles = tl.zeros([], tl.int64)
    b0 = tl.zeros([], tl.int32)
    while valid & (b0 < num_batches):
        _, _, tiles, _, lane_valid = _batches(query_ptr, kv_ptr, b0, num_batches, query_constant, kv_constant, group,
                                              m_tile, QUERY_SOURCE, KV_SOURCE, REQS)
        all_tiles += tl.sum(tiles)
        valid = (tl.min(lane_valid.to(tl.int32)) != 0) & (all_tiles <= 2147483647)
        b0 += REQS

    # Pass 1: the total cost and the most costly M tile. The first REQS batches stay in
    # registers for pass 2.
    tiles = tl.zeros([REQS], tl.int64)
    batch_cost = tl.zeros([REQS], tl.int64)
    batch_last = tl.zeros([REQS], tl.int32)
    tile_cost = tl.zeros([REQS, TILES], tl.int64)
    tile_last = tl.zeros([REQS, TILES], tl.int32)
    tile_sees = tl.zeros([REQS, TILES], tl.int32) != 0
    max_tile = tl.zeros([], tl.int64)
    too_costly = tl.zeros([], tl.int32) != 0
    if valid:
        tiles, batch_cost, batch_last, tile_cost, tile_last, tile_sees, max_tile, too_costly = _chunk(
            query_ptr, kv_ptr, 0, num_batches, query_constant, kv_constant, group, m_tile, s2_tile, mask_mode,
            win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk, max_total, QUERY_SOURCE, KV_SOURCE, REQS, TILES, COST)
    # Every batch costs at most max_total unless too_costly, so no sum can overflow. A batch has
    # work (query rows and KV) exactly when it costs something.
    total = tl.sum(batch_cost)
    any_work = total > 0
    valid = valid & (too_costly == 0) & (total <= max_total)
    b0 = tl.zeros([], tl.int32) + REQS
    while valid & (b0 < num_batches):
        _, more_cost, _, _, _, _, more_max, too_costly = _chunk(
            query_ptr, kv_ptr, b0, num_batches, query_constant, kv_constant, group, m_tile, s2_tile, mask_mode,
            win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk, max_total, QUERY_SOURCE, KV_SOURCE, REQS, TILES, COST)
        total += tl.sum(more_cost)
        any_work = total > 0
        max_tile = tl.maximum(max_tile, more_max)
        valid = (too_costly == 0) & (total <= max_total)
        b0 += REQS

    # Pass 2: the greedy pass, an FA entry per core.
    used = tl.where(valid, 1, 0)
    if valid & (any_work == 0):
        # No batch has work: core 0 covers every batch at once.
        entry = tl.where(field == 0, 1, tl.where(field == 4, num_batches, 0))
        tl.store(out_ptr + field, entry.to(tl.int32))
    if valid & any_work:
        # The REQS batches from cached_b0, as prefix sums (_prefix_sums). `consumed` is the cost
        # of the chunk's tiles before the cursor (b, m): taking the chunk's work up to some point
        # costs its prefix sum there minus consumed.
        cached_b0 = tl.zeros([], tl.int32)
        if num_batches > REQS:
            tiles, batch_cost, batch_last, tile_cost, tile_last, tile_sees, _, _ = _chunk(
                query_ptr, kv_ptr, cached_b0, num_batches, query_constant, kv_constant, group, m_tile, s2_tile,
                mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk, max_total, QUERY_SOURCE, KV_SOURCE,
                REQS, TILES, COST)
        batch_start, batch_end, tile_end, tile_last, chunk_total, all_short = _prefix_sums(
            tiles, batch_cost, tile_cost, tile_last, tile_sees, TILES)
        tile_index = tl.arange(0, TILES)[None, :]
        unassigned = total
        b = tl.zeros([], tl.int32)
        m = tl.zeros([], tl.int32)
        consumed = tl.zeros([], tl.int64)
        core = tl.zeros([], tl.int32)
        while (core < num_cube_cores) & (b < num_batches) & (unassigned > 0):
            limit = tl.maximum(unassigned // (num_cube_cores - core), max_tile)
            load = tl.zeros([], tl.int64)  # of the chunks this core has left behind
            start_b = b
            start_m = m
            # Whole batches, a batch without cost always, REQS at a time.
            scanning = b < num_batches
            while scanning:
                if b >= cached_b0 + REQS:
                    cached_b0 = b
                    new_tiles, new_cost, batch_last, new_tile_cost, new_tile_last, new_sees, _, _ = _chunk(
                        query_ptr, kv_ptr, cached_b0, num_batches, query_constant, kv_constant, group, m_tile,
                        s2_tile, mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk, max_total,
                        QUERY_SOURCE, KV_SOURCE, REQS, TILES, COST)
                    batch_start, batch_end, tile_end, tile_last, chunk_total, all_short = _prefix_sums(
                        new_tiles, new_cost, new_tile_cost, new_tile_last, new_sees, TILES)
                    consumed = consumed * 0
                first = b - cached_b0
                in_chunk = tl.minimum(num_batches - cached_b0, REQS)
                ahead = (req >= first) & (req < in_chunk)
                fits = (batch_end == batch_start) | (load + batch_end - consumed <= limit + batch_last // 2)
                stop = tl.min(tl.where(ahead & (fits == 0), req, REQS))
                if stop == REQS:
                    load += chunk_total - consumed
                    b = cached_b0 + in_chunk
                    m = m * 0
                    consumed = chunk_total
                    scanning = b < num_batches
                else:
                    if stop > first:
                        b = cached_b0 + stop
                        m = m * 0
                    scanning = stop < 0
            if b < num_batches:
                # Whole M tiles of batch b. The tile the cursor stands on is always tested;
                # after a tile is taken the ones that see no KV are passed over. The batch's last
                # tile sees KV and fails the test the whole batch failed, so the cursor stays
                # inside the batch.
                row = b - cached_b0
                if all_short:
                    on_row = req[:, None] == row
                    tested = on_row & (tile_index >= m) & ((tile_last >= 0) | (tile_index == m))
                    fails = tested & (load + tile_end - consumed > limit + tl.maximum(tile_last, 0) // 2)
                    m = tl.min(tl.where(fails, tile_index, TILES))
                    # The cost up to the new cursor: the prefix sum of the tile before it, or the
                    # batch's start for tile 0 (tile ends are never below it).
                    after = tl.max(tl.where(on_row, tl.where(tile_index < m, tile_end, batch_start[:, None]), 0))
                    load += after - consumed
                    consumed = after
                else:
                    # Batch b alone, read again (lane 0): a long batch is rare, registers are not.
                    s1, s2, b_tiles, leftover, _ = _batches(query_ptr, kv_ptr, b, num_batches, query_constant,
                                                            kv_constant, group, m_tile, QUERY_SOURCE, KV_SOURCE, REQS)
                    b_s1 = tl.sum(tl.where(req == 0, s1, 0))
                    b_s2 = tl.sum(tl.where(req == 0, s2, 0))
                    b_tiles = tl.sum(tl.where(req == 0, b_tiles, 0))
                    b_leftover = tl.sum(tl.where(req == 0, leftover, 0))
                    # The whole batches the scan passed, up to the batch's start (nothing when
                    # the cursor was already inside it).
                    row_start = tl.sum(tl.where(req == row, batch_start, 0))
                    passed = tl.maximum(row_start - consumed, 0)
                    load += passed
                    consumed += passed
                    first_step = b_tiles > 0
                    taking = first_step
                    while taking:
                        t = m + lane
                        inside = t < b_tiles
                        cost, last_cost, sees, _blocks = _tile_cost(
                            t, b_s1, b_s2, b_tiles, b_leftover, group, m_tile, s2_tile, mask_mode, win_left,
                            win_right, has_cmp_kv, cmp_ratio, cmp_topk, COST)
                        cost = tl.where(inside, cost, 0)
                        tested = inside & (sees | ((lane == 0) & first_step))
                        fails = tested & (load + tl.cumsum(cost, 0) > limit + last_cost // 2)
                        stop = tl.min(tl.where(fails, lane, LANES))
                        taken = tl.sum(tl.where(lane < stop, cost, 0))
                        load += taken
                        consumed += taken
                        m = tl.minimum(m + stop, b_tiles).to(tl.int32)
                        first_step = first_step & False
                        taking = (stop == LANES) & (m < b_tiles)
            entry = tl.where(field == 0, 1, tl.where(field == 1, start_b, tl.where(field == 2, start_m, tl.where(
                field == 4, b, tl.where(field == 5, m, 0)))))
            tl.store(out_ptr + core * ENTRY_STRIDE + field, entry.to(tl.int32))
            unassigned -= load
            core += 1
        used = core

    word = tl.arange(0, NUM_WORDS)
    # Zeros in every word the entry stores did not write. A pair's second entry (words 9..17 of
    # its 18) is left to _finish_pairs_kernel, as is its word 8.
    in_entry = word < used * ENTRY_STRIDE
    entry_field = word % ENTRY_WIDTH
    tl.store(out_ptr + word, tl.zeros([NUM_WORDS], tl.int32), mask=(in_entry == 0) | (entry_field >= ENTRY_WORDS))


def launch_schedule(query: LengthSource, kv: LengthSource, out: torch.Tensor, batches: int, group: int,
                    variant: Variant, mask_mode: int, win_left: int, win_right: int, has_cmp_kv: bool, cmp_ratio: int,
                    cmp_topk: int, cost: int = COST_SAS) -> None:
    """The family's one kernel for a member's lengths, tile rule and layout (`variant`)."""
    # A constant source reads no tensor: `out` stands in for the pointer.
    _sas_metadata_kernel[(1,)](
        out if query.kind == SOURCE_CONSTANT else query.tensor, out if kv.kind == SOURCE_CONSTANT else kv.tensor, out,
        batches, query.constant, kv.constant, group, variant.m_tile_rows, variant.s2_tile, mask_mode, win_left,
        win_right, int(has_cmp_kv), cmp_ratio if has_cmp_kv else 1, cmp_topk if has_cmp_kv else 0,
        variant.planned_cores, MAX_TOTAL_COST,
        QUERY_SOURCE=query.kind, KV_SOURCE=kv.kind, NUM_WORDS=NUM_WORDS, ENTRY_WORDS=ENTRY_WORDS,
        REQS=REQS, TILES=TILES, COST=cost, ENTRY_STRIDE=variant.entry_words * (2 if variant.paired else 1),
        ENTRY_WIDTH=variant.entry_words, num_warps=NUM_WARPS,
    )
    if variant.paired:
        _finish_pairs_kernel[(1,)](
            out if query.kind == SOURCE_CONSTANT else query.tensor, out if kv.kind == SOURCE_CONSTANT else kv.tensor,
            out, batches, query.constant, kv.constant, group, variant.m_tile_rows, variant.s2_tile, mask_mode,
            win_left, win_right, int(has_cmp_kv), cmp_ratio if has_cmp_kv else 1, cmp_topk if has_cmp_kv else 0,
            variant.planned_cores, QUERY_SOURCE=query.kind, KV_SOURCE=kv.kind, REQS=REQS, LANES=REQS * TILES,
            COST=cost, ENTRY_WORDS=ENTRY_WORDS, ENTRY_WIDTH=variant.entry_words, num_warps=NUM_WARPS,
        )


@npu_host_routed("sas_metadata")
def sas_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    m_tile, s2_tile = tile_sizes(a.num_heads_q, a.ascend950)
    launch_schedule(query_lengths(a.layout_q, a.cu_seqlens_q, a.seqused_q, a.max_seqlen_q),
                    kv_lengths(a.layout_kv, a.cu_seqlens_ori_kv, a.seqused_kv, a.max_seqlen_kv), a.out,
                    num_batches(a.layout_q, a.cu_seqlens_q, a.seqused_q, a.batch_size), a.num_heads_q,
                    Variant(m_tile, s2_tile, planned_cores=a.num_cube_cores), a.ori_mask_mode, a.ori_win_left, a.ori_win_right,
                    a.has_cmp_kv, a.cmp_ratio, a.cmp_topk)
