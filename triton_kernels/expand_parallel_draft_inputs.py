"""Triton kernel for expand_parallel_draft_inputs: the parallel-drafting first pass.

A persistent grid: each program takes requests r = pid, pid + programs, ... and walks that
request's output tokens in tiles (only the j whose output lands inside [0, T'), so a corrupt
query layout neither stores out of bounds nor loops past the buffers), writing ids, positions,
masks, sample indices, the hidden-state mapping and every group's slot from registers; then
every program fills its share of the padding tiles. The groups are advance_draft_step's
flattened arguments (no tuple arguments: triton-ascend 3.2 has none), up to MAX_GROUPS per
launch; more groups launch the extra ones first, slots only (WRITE_TOKENS False). Every masked
lane reads and writes offset 0 of its tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._step_layout import buffer_end, group_layouts, parallel_draft_tokens
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels.advance_draft_step import (
    _group_arguments,
    _group_slots,
    draft_group_arguments,
    launch_chunks,
)

BLOCK = 128


@triton.jit
def _pad(ptr, value, index, end, start):
    at = (index >= start) & (index < end)
    tl.store(ptr + tl.where(at, index, 0), value, mask=at)


@triton.jit
def _expand_parallel_draft_inputs_kernel(
    target_ids_ptr, target_positions_ptr, next_ptr, qsl_ptr, rejected_ptr, seq_lens_ptr, idx_ptr,
    ids_ptr, positions_ptr, rejected_mask_ptr, masked_mask_ptr, indices_ptr, hidden_ptr, out_qsl_ptr, out_seq_ptr,
    num_reqs, num_tokens, num_out, slots, new_tokens, max_model_len, draft_token, padding_token,
    ids_end, positions_end, rejected_end, masked_end, indices_end, hidden_end, qsl_end, seq_end, pad_end,
    t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
    t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
    t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
    t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
    NUM_GROUPS: tl.constexpr, SHIFT: tl.constexpr, HAS_REJECTED: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr,
    HAS_HIDDEN: tl.constexpr, HAS_SEQ_LENS: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr,
    WRITE_TOKENS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    for r in range(pid, num_reqs, num_progs):
        q0 = tl.load(qsl_ptr + r).to(tl.int64)
        q = tl.load(qsl_ptr + r + 1).to(tl.int64) - q0
        nv = q - SHIFT
        if HAS_REJECTED:
            nv = nv - tl.load(rejected_ptr + r).to(tl.int64)
        out0 = q0 + r * new_tokens
        first_ok = (q0 >= 0) & (q0 < num_tokens)
        start = tl.load(target_positions_ptr + tl.where(first_ok, q0, 0), mask=first_ok, other=0).to(tl.int64)
        row = tl.zeros([BLOCK], dtype=tl.int64) + r
        if HAS_IDX_MAPPING:
            row = row * 0 + tl.load(idx_ptr + r).to(tl.int64)
        next_token = tl.load(next_ptr + r).to(tl.int64)
        # Only the j whose output lies in [0, T').
        lo = tl.maximum(-out0, 0)
        hi = tl.minimum(q + new_tokens, num_out - out0)
        # The walk is counted from lo (an int64 that may be past 2^31 on a corrupt layout): the
        # count is below T' < 2^31, so the lane index never wraps.
        count = tl.maximum(hi - lo, 0).to(tl.int32)
        for t in range(0, count, BLOCK):
            j = lo + (t + lanes).to(tl.int64)
            lane = j < hi
            o = out0 + j
            safe_o = tl.where(lane, o, 0)
            is_rejected = j >= nv + slots
            is_masked = (j > nv) & (is_rejected == 0)
            source = q0 + j + SHIFT
            # A mask of more than two comparisons makes triton-ascend's adapter read freed memory: each
            # mask below is one comparison of an offset that is -1 where the lane is off.
            copy_at = tl.where(lane & (j < nv) & (source >= 0) & (source < num_tokens), source, -1)
            ids = tl.load(target_ids_ptr + tl.maximum(copy_at, 0), mask=copy_at >= 0, other=0).to(tl.int64)
            ids = tl.where(j < nv, ids, tl.where(j == nv, next_token,
                                                 tl.where(is_masked, draft_token, padding_token)))
            position = tl.where(is_rejected, 0, start + j)
            if WRITE_TOKENS:
                tl.store(ids_ptr + safe_o, ids.to(ids_ptr.dtype.element_ty), mask=lane)
                tl.store(positions_ptr + safe_o, position.to(positions_ptr.dtype.element_ty), mask=lane)
                tl.store(rejected_mask_ptr + safe_o, is_rejected, mask=lane)
                tl.store(masked_mask_ptr + safe_o, is_masked, mask=lane)
                new_at = tl.where(lane & (j >= nv) & (is_rejected == 0), r * slots + j - nv, -1)
                tl.store(indices_ptr + tl.maximum(new_at, 0), o.to(tl.int32), mask=new_at >= 0)
                if HAS_HIDDEN:
                    hidden_at = tl.where(lane & (j < q) & (q0 + j >= 0) & (q0 + j < num_tokens), q0 + j, -1)
                    tl.store(hidden_ptr + tl.maximum(hidden_at, 0), o.to(tl.int32), mask=hidden_at >= 0)
            mapped = lane & (is_rejected == 0) & (position < max_model_len)
            # Masked lanes index past every slot mapping's end (se >= T'): _store_group_slots masks them.
            _group_slots(t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
                         t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
                         t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
                         t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
                         tl.where(lane, o, pad_end), row, position, mapped, NUM_GROUPS, HAS_NUM_BLOCKS)
        if WRITE_TOKENS:
            tl.store(out_qsl_ptr + r, out0.to(tl.int32))
            if HAS_SEQ_LENS:
                tl.store(out_seq_ptr + r, (tl.load(seq_lens_ptr + r) + new_tokens).to(tl.int32))
    # Padding: per-token outputs in [T', end), the per-request ones past R.
    for tile in range(pid, tl.cdiv(pad_end - num_out, BLOCK), num_progs):
        i = num_out + tile * BLOCK + lanes
        zero = tl.zeros([BLOCK], dtype=tl.int64)
        if WRITE_TOKENS:
            _pad(ids_ptr, zero.to(ids_ptr.dtype.element_ty), i, ids_end, num_out)
            _pad(positions_ptr, zero.to(positions_ptr.dtype.element_ty), i, positions_end, num_out)
            _pad(rejected_mask_ptr, zero != 0, i, rejected_end, num_out)
            _pad(masked_mask_ptr, zero != 0, i, masked_end, num_out)
        _group_slots(t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
                     t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
                     t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
                     t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
                     i, zero, zero, zero != 0, NUM_GROUPS, HAS_NUM_BLOCKS)
    if WRITE_TOKENS:
        first_index = num_reqs * slots
        for tile in range(pid, tl.cdiv(indices_end - first_index, BLOCK), num_progs):
            i = first_index + tile * BLOCK + lanes
            _pad(indices_ptr, tl.zeros([BLOCK], dtype=tl.int32), i, indices_end, first_index)
        if HAS_HIDDEN:
            for tile in range(pid, tl.cdiv(hidden_end - num_tokens, BLOCK), num_progs):
                i = num_tokens + tile * BLOCK + lanes
                _pad(hidden_ptr, tl.zeros([BLOCK], dtype=tl.int32), i, hidden_end, num_tokens)
        for tile in range(pid, tl.cdiv(qsl_end - num_reqs, BLOCK), num_progs):
            i = num_reqs + tile * BLOCK + lanes
            _pad(out_qsl_ptr, tl.zeros([BLOCK], dtype=tl.int32) + num_out, i, qsl_end, num_reqs)
        if HAS_SEQ_LENS:
            for tile in range(pid, tl.cdiv(seq_end - num_reqs, BLOCK), num_progs):
                i = num_reqs + tile * BLOCK + lanes
                _pad(out_seq_ptr, tl.zeros([BLOCK], dtype=tl.int32), i, seq_end, num_reqs)


def expand_parallel_draft_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    slots, shift = a.slots_per_request, int(a.shift_input_ids)
    draft_token, padding_token = a.parallel_drafting_token_id, a.padding_token_id
    num_reqs, num_tokens = a.next_token_ids.numel(), a.target_token_ids.numel()
    new_tokens = slots - shift
    num_out = parallel_draft_tokens(num_tokens, num_reqs, slots, a.shift_input_ids)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled, a.cp_world_size,
                            a.cp_rank, a.cp_interleave)
    groups = draft_group_arguments(a.block_tables, a.slot_mappings, a.num_blocks, layouts, num_out, a.num_tokens_padded)
    ends = dict(ids_end=buffer_end(a.input_ids, a.num_tokens_padded),
                positions_end=buffer_end(a.positions, a.num_tokens_padded),
                rejected_end=buffer_end(a.is_rejected_token_mask, a.num_tokens_padded),
                masked_end=buffer_end(a.is_masked_token_mask, a.num_tokens_padded),
                indices_end=a.num_reqs_padded * slots if a.num_reqs_padded >= 0 else a.token_indices_to_sample.numel(),
                hidden_end=a.hidden_state_mapping.numel() if a.hidden_state_mapping is not None else 0,
                qsl_end=a.num_reqs_padded + 1 if a.num_reqs_padded >= 0 else a.out_query_start_loc.numel(),
                seq_end=buffer_end(a.out_seq_lens, a.num_reqs_padded) if a.out_seq_lens is not None else 0)
    token_end = max(num_out, ends["ids_end"], ends["positions_end"], ends["rejected_end"], ends["masked_end"])
    common = dict(SHIFT=shift, HAS_REJECTED=a.num_rejected_tokens is not None, HAS_IDX_MAPPING=a.idx_mapping is not None,
                  HAS_HIDDEN=a.hidden_state_mapping is not None, HAS_SEQ_LENS=a.out_seq_lens is not None,
                  HAS_NUM_BLOCKS=bool(a.num_blocks), BLOCK=BLOCK)
    def stand_in() -> list:  # no group at all: a view of query_start_loc as the never-read table
        return _group_arguments(a.query_start_loc.unsqueeze(0), a.out_query_start_loc, a.query_start_loc,
                                (1, 1, 1, 0, 1, 0), 0)

    for chunk, num_groups, write_tokens, flat in launch_chunks(groups, stand_in):
        pad_end = max([token_end if write_tokens else num_out] + [group[-1] for group in chunk])
        tasks = max(num_reqs, triton.cdiv(pad_end - num_out, BLOCK),
                    triton.cdiv(max(ends["indices_end"] - num_reqs * slots, ends["hidden_end"] - num_tokens,
                                    ends["qsl_end"], 0), BLOCK))
        if tasks == 0:
            continue
        grid = (num_programs(a.target_token_ids.device, tasks),)
        _expand_parallel_draft_inputs_kernel[grid](
            nonempty(a.target_token_ids), nonempty(a.target_positions), nonempty(a.next_token_ids), a.query_start_loc,
            a.num_rejected_tokens if a.num_rejected_tokens is not None else a.query_start_loc,
            a.seq_lens if a.seq_lens is not None else a.query_start_loc, a.idx_mapping if a.idx_mapping is not None else a.query_start_loc,
            a.input_ids, a.positions, a.is_rejected_token_mask, a.is_masked_token_mask, a.token_indices_to_sample,
            a.hidden_state_mapping if a.hidden_state_mapping is not None else a.token_indices_to_sample,
            a.out_query_start_loc, a.out_seq_lens if a.out_seq_lens is not None else a.out_query_start_loc,
            num_reqs, num_tokens, num_out, slots, new_tokens, a.max_model_len, draft_token, padding_token,
            *ends.values(), pad_end, *flat, NUM_GROUPS=num_groups, WRITE_TOKENS=write_tokens, **common,
        )
