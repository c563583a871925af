"""Triton kernel for post_update_after_sampling: request state after the step.

Persistent grid over the batch rows; a row reads its state (total_len, num_computed_tokens)
before it writes it. The kept tokens and the drafts are stored in lane tiles; the penalty bins
are counted one kept token at a time (two kept tokens may be equal). Rows outside [0, rows) are
skipped; every masked lane reads and writes offset 0 of its tensor.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 64


@triton.jit
def post_update_row(
    r, idx_mapping_ptr, num_computed_tokens_ptr, query_start_loc_ptr, sampled_ptr, sampled_stride, sampled_cols,
    num_sampled_ptr, num_rejected_ptr, last_ptr, last_stride, all_token_ids_ptr, token_stride, token_cols,
    total_len_ptr, bins_ptr, bins_stride, vocab_size, draft_ptr, draft_stride, draft_out_ptr, draft_out_stride,
    draft_cols, num_rows, has_query_start_loc,
    SAMPLING: tl.constexpr, HAS_BINS: tl.constexpr, HAS_DRAFTS: tl.constexpr, BLOCK: tl.constexpr,
):
    """Batch row r's update; returns (whether it stored last_sampled_tokens, the token stored) for a
    caller that reads the row's last token next (prepare_draft_prefill_inputs' post-update part)."""
    lanes = tl.arange(0, BLOCK)
    mapped = tl.load(idx_mapping_ptr + r).to(tl.int64)
    has_row = (mapped >= 0) & (mapped < num_rows)
    row = tl.where(has_row, mapped, 0)
    with_offsets = has_query_start_loc != 0
    q0 = tl.load(query_start_loc_ptr + r, mask=with_offsets, other=0).to(tl.int64)
    q1 = tl.load(query_start_loc_ptr + r + 1, mask=with_offsets, other=0).to(tl.int64)
    computed = tl.load(num_computed_tokens_ptr + row, mask=has_row, other=0).to(tl.int64)
    ns = tl.zeros([], tl.int64)
    last = tl.zeros([], tl.int64)
    if SAMPLING:
        if HAS_DRAFTS:
            for start in range(0, draft_cols, BLOCK):
                k = start + lanes
                # One comparison per mask, of an offset that is -1 where the lane is off: a mask
                # of more than two makes triton-ascend's adapter read freed memory.
                k_at = tl.where(has_row & (k < draft_cols), k, -1)
                safe_k = tl.maximum(k_at, 0)
                draft = tl.load(draft_ptr + r * draft_stride + safe_k, mask=k_at >= 0, other=0)
                tl.store(draft_out_ptr + row * draft_out_stride + safe_k, draft, mask=k_at >= 0)
        ns = tl.minimum(tl.maximum(tl.load(num_sampled_ptr + r).to(tl.int64), 0), sampled_cols)
        ns = tl.where(has_row, ns, 0)
        n0 = tl.load(total_len_ptr + row, mask=has_row, other=0).to(tl.int64)
        last = tl.load(sampled_ptr + r * sampled_stride + tl.maximum(ns - 1, 0), mask=ns > 0, other=0).to(tl.int64)
        tl.store(last_ptr + row * last_stride, last.to(last_ptr.dtype.element_ty), mask=ns > 0)
        tl.store(total_len_ptr + row, (n0 + ns).to(tl.int32), mask=ns > 0)
        for start in range(0, ns, BLOCK):
            i = start + lanes
            kept = i < ns
            token = tl.load(sampled_ptr + r * sampled_stride + tl.where(kept, i, 0), mask=kept, other=0)
            column = n0 + i
            column_at = tl.where(kept & (column >= 0) & (column < token_cols), column, -1)
            tl.store(all_token_ids_ptr + row * token_stride + tl.maximum(column_at, 0), token.to(tl.int32),
                     mask=column_at >= 0)
        if HAS_BINS:
            for i in range(0, ns):
                token = tl.load(sampled_ptr + r * sampled_stride + i).to(tl.int64)
                counted = (token >= 0) & (token < vocab_size)
                bin_ptr = bins_ptr + row * bins_stride + tl.where(counted, token, 0)
                count = tl.load(bin_ptr, mask=counted, other=0)
                tl.store(bin_ptr, count + 1, mask=counted)
        rejected = tl.load(num_rejected_ptr + r).to(tl.int64)
        computed = computed + (q1 - q0) - rejected
    else:
        computed = computed + (q1 - q0)
    tl.store(num_computed_tokens_ptr + row, computed.to(tl.int32), mask=has_row)
    return ns > 0, last


@triton.jit
def _post_update_kernel(
    idx_mapping_ptr, num_computed_tokens_ptr, query_start_loc_ptr, sampled_ptr, sampled_stride, sampled_cols,
    num_sampled_ptr, num_rejected_ptr, last_ptr, last_stride, all_token_ids_ptr, token_stride, token_cols,
    total_len_ptr, bins_ptr, bins_stride, vocab_size, draft_ptr, draft_stride, draft_out_ptr, draft_out_stride,
    draft_cols, num_reqs, num_rows, has_query_start_loc,
    SAMPLING: tl.constexpr, HAS_BINS: tl.constexpr, HAS_DRAFTS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    for r in range(pid, num_reqs, num_progs):
        post_update_row(r, idx_mapping_ptr, num_computed_tokens_ptr, query_start_loc_ptr, sampled_ptr,
                        sampled_stride, sampled_cols, num_sampled_ptr, num_rejected_ptr, last_ptr, last_stride,
                        all_token_ids_ptr, token_stride, token_cols, total_len_ptr, bins_ptr, bins_stride, vocab_size,
                        draft_ptr, draft_stride, draft_out_ptr, draft_out_stride, draft_cols, num_rows,
                        has_query_start_loc, SAMPLING, HAS_BINS, HAS_DRAFTS, BLOCK)


def post_update_arguments(a, draft_tokens=None, draft_tokens_out=None) -> tuple[tuple, tuple, bool, bool, bool]:
    """From a checked record with the op's names (this op's, or prepare_draft_prefill_inputs'
    post-update part, which has no drafts): post_update_row's pointer and size arguments after r,
    then (num_rows, has_query_start_loc), SAMPLING, HAS_BINS, HAS_DRAFTS."""
    sampling = a.sampled_tokens is not None
    num_rows = a.num_computed_tokens.numel()
    stand_in = a.num_computed_tokens  # for the pointers a call leaves out (never read)
    if sampling:
        num_rows = min(num_rows, a.last_sampled_tokens.size(0), a.all_token_ids.size(0), a.total_len.numel())
        if a.output_bin_counts is not None:
            num_rows = min(num_rows, a.output_bin_counts.size(0))
    if draft_tokens is not None:
        num_rows = min(num_rows, draft_tokens_out.size(0))
    has_bins = a.output_bin_counts is not None
    has_drafts = draft_tokens is not None
    arguments = (
        a.idx_mapping, a.num_computed_tokens, a.query_start_loc if a.query_start_loc is not None else stand_in,
        a.sampled_tokens if sampling else stand_in, a.sampled_tokens.stride(0) if sampling else 0,
        a.sampled_tokens.size(1) if sampling else 0,
        a.num_sampled if sampling else stand_in, a.num_rejected if sampling else stand_in,
        a.last_sampled_tokens if sampling else stand_in, a.last_sampled_tokens.stride(0) if sampling else 0,
        a.all_token_ids if sampling else stand_in, a.all_token_ids.stride(0) if sampling else 0,
        a.all_token_ids.size(1) if sampling else 0, a.total_len if sampling else stand_in,
        a.output_bin_counts if has_bins else stand_in, a.output_bin_counts.stride(0) if has_bins else 0,
        a.output_bin_counts.size(1) if has_bins else 0,
        draft_tokens if has_drafts else stand_in, draft_tokens.stride(0) if has_drafts else 0,
        draft_tokens_out if has_drafts else stand_in, draft_tokens_out.stride(0) if has_drafts else 0,
        draft_tokens.size(1) if has_drafts else 0)
    return arguments, (num_rows, int(a.query_start_loc is not None)), sampling, has_bins, has_drafts


def post_update_after_sampling(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_reqs = a.idx_mapping.numel()
    if num_reqs == 0:
        return
    arguments, (num_rows, has_qsl), sampling, has_bins, has_drafts = post_update_arguments(a, a.draft_tokens,
                                                                                          a.draft_tokens_out)
    grid = (num_programs(a.idx_mapping.device, num_reqs),)
    _post_update_kernel[grid](*arguments, num_reqs, num_rows, has_qsl, SAMPLING=sampling, HAS_BINS=has_bins,
                              HAS_DRAFTS=has_drafts, BLOCK=BLOCK)
