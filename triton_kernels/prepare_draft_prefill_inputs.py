"""Triton kernel for prepare_draft_prefill_inputs: the draft prefill's inputs after a target step.

With the post-update part, each request's update after sampling (post_update_after_sampling's row
work) runs first in the program that prepares its prefill tokens: its next token is the one that
update stores, taken from registers. Nothing else of the launch reads what the update writes.

Persistent grid. The token phase takes one request per program at a time and walks its kept
tokens in tiles, each lane one output token o = s + j: the next target id (the shift by one), or
the next token at j = q - 1, and the target position. The walk is bounded to the tokens inside
some buffer, so an invalid layout costs at most the buffers' length. The request phase writes
the per-request outputs and the padding in request tiles, each store masked by its own buffer's
end. Every masked lane accesses offset 0 (the launcher passes empty tensors as one-element
placeholders); a condition of several comparisons is folded into the offset (-1: off), so that no
mask has more than one comparison (docs/device_readiness.md, the NPU route's rules).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels.post_update_after_sampling import BLOCK as UPDATE_BLOCK
from specops.triton_kernels.post_update_after_sampling import post_update_arguments, post_update_row

BLOCK_T = 256
BLOCK_R = 128


@triton.jit
def _kept_tokens(qsl_ptr, num_rejected_ptr, r):
    """Request r's first token and kept count q = clamp(query length - rejected, 0, query length)."""
    start = tl.load(qsl_ptr + r).to(tl.int64)
    query_len = tl.maximum(tl.load(qsl_ptr + r + 1).to(tl.int64) - start, 0)
    kept = tl.minimum(tl.maximum(query_len - tl.load(num_rejected_ptr + r).to(tl.int64), 0), query_len)
    return start, kept


@triton.jit
def _prepare_draft_prefill_inputs_kernel(
    target_ids_ptr, target_positions_ptr, idx_ptr, qsl_ptr, seq_lens_ptr, num_sampled_ptr, num_rejected_ptr,
    last_sampled_ptr, last_sampled_stride, next_prefill_ptr, ids_ptr, positions_ptr, out_qsl_ptr, out_seq_ptr,
    last_index_ptr, step_ptr, mapping_ptr,
    num_reqs, num_rows, target_ids_end, ids_end, position_end, token_bound, qsl_end, seq_end, index_end,
    mapping_end, request_end,
    up_0, up_1, up_2, up_3, up_4, up_5, up_6, up_7, up_8, up_9, up_10, up_11, up_12, up_13, up_14, up_15, up_16,
    up_17, up_18, up_19, up_20, up_21, up_rows, up_has_qsl,
    HAS_STEP: tl.constexpr, HAS_MAPPING: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_R: tl.constexpr,
    HAS_UPDATE: tl.constexpr, UPDATE_BINS: tl.constexpr, UPDATE_BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK_T)
    for r in range(pid, num_reqs, num_progs):
        # One per-request scalar load at an int64 index (the NPU adapter's --triton-to-unstructure rule).
        start, kept = _kept_tokens(qsl_ptr, num_rejected_ptr, tl.cast(r, tl.int64))
        row = tl.load(idx_ptr + r).to(tl.int64)
        has_row = (row >= 0) & (row < num_rows)
        # Both sources are gathered unmasked at a clamped row and selected after.
        safe_row = tl.where(has_row, row, 0)
        sampled = tl.load(last_sampled_ptr + safe_row * last_sampled_stride).to(tl.int32)
        if HAS_UPDATE:
            # The request's update after sampling first; its last token taken from registers (the
            # load above may come before the store, from another thread of the program).
            stored, last = post_update_row(r, up_0, up_1, up_2, up_3, up_4, up_5, up_6, up_7, up_8, up_9, up_10, up_11,
                                           up_12, up_13, up_14, up_15, up_16, up_17, up_18, up_19, up_20, up_21,
                                           up_rows, up_has_qsl, True, UPDATE_BINS, False, UPDATE_BLOCK)
            sampled = tl.where(stored, last.to(tl.int32), sampled)
        prefill = tl.load(next_prefill_ptr + safe_row)
        next_token = tl.where(tl.load(num_sampled_ptr + r) > 0, sampled, prefill)
        next_token = tl.where(has_row, next_token, -1)
        # Only the j whose token s + j lies in [0, token_bound).
        lo = tl.minimum(tl.maximum(-start, 0), kept)
        hi = tl.maximum(tl.minimum(kept, token_bound - start), lo)
        count = (hi - lo).to(tl.int32)
        for t in range(0, count, BLOCK_T):
            j = lo + (t + lanes).to(tl.int64)
            lane = j < hi
            o = start + j
            is_last = j == kept - 1
            # Output o holds target id o + 1 (the shift), or the next token for the last kept one.
            read_at = tl.where(lane & (is_last == 0) & (o + 1 < target_ids_end), o + 1, -1)
            ids = tl.load(target_ids_ptr + tl.maximum(read_at, 0), mask=read_at >= 0, other=0).to(tl.int64)
            ids = tl.where(is_last, next_token.to(tl.int64), ids)
            write_at = tl.where(lane & (o < ids_end) & (is_last | (read_at >= 0)), o, -1)
            tl.store(ids_ptr + tl.maximum(write_at, 0), ids.to(ids_ptr.dtype.element_ty), mask=write_at >= 0)
            copy_at = tl.where(lane & (o < position_end), o, -1)
            position = tl.load(target_positions_ptr + tl.maximum(copy_at, 0), mask=copy_at >= 0, other=0)
            tl.store(positions_ptr + tl.maximum(copy_at, 0), position.to(positions_ptr.dtype.element_ty),
                     mask=copy_at >= 0)
    # The per-request outputs and their padding past R (names of their own: Triton types a name
    # once per kernel, and the token phase's are scalars).
    request_lanes = tl.arange(0, BLOCK_R)
    total = tl.load(qsl_ptr + num_reqs)
    for tile in range(pid, tl.cdiv(request_end, BLOCK_R), num_progs):
        req = tile * BLOCK_R + request_lanes
        real = req < num_reqs
        safe_req = tl.where(real, req, 0)
        first = tl.load(qsl_ptr + safe_req, mask=real, other=0).to(tl.int64)
        # The end's offset is 0 on an off lane too (not safe_req + 1): the NPU route issues every
        # lane's access, and at R = 0 query_start_loc has one entry.
        end = tl.load(qsl_ptr + tl.where(real, req + 1, 0), mask=real, other=0).to(tl.int64)
        req_len = tl.maximum(end - first, 0)
        rejected = tl.load(num_rejected_ptr + safe_req, mask=real, other=0).to(tl.int64)
        req_kept = tl.minimum(tl.maximum(req_len - rejected, 0), req_len)
        tl.store(out_qsl_ptr + tl.where(req < qsl_end, req, 0), tl.where(real, first.to(tl.int32), total),
                 mask=req < qsl_end)
        seq_len = tl.load(seq_lens_ptr + safe_req, mask=real, other=0)
        tl.store(out_seq_ptr + tl.where(req < seq_end, req, 0), tl.where(real, seq_len, 0), mask=req < seq_end)
        last = tl.where(real, first + req_kept - 1, 0)
        tl.store(last_index_ptr + tl.where(req < index_end, req, 0), last.to(last_index_ptr.dtype.element_ty),
                 mask=req < index_end)
        if HAS_MAPPING:
            req_row = tl.load(idx_ptr + safe_req, mask=real, other=-1).to(tl.int64)
            tl.store(mapping_ptr + tl.where(req < mapping_end, req, 0),
                     tl.where(real, req_row, -1).to(mapping_ptr.dtype.element_ty), mask=req < mapping_end)
    if HAS_STEP:
        # Lane 0 of program 0 resets the step (a one-lane store rather than a scalar one).
        step_at = tl.where(request_lanes + pid == 0, 0, -1)
        tl.store(step_ptr + tl.maximum(step_at, 0), tl.zeros([BLOCK_R], dtype=step_ptr.dtype.element_ty),
                 mask=step_at >= 0)


def prepare_draft_prefill_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_reqs = a.idx_mapping.numel()
    num_rows = min(a.last_sampled_tokens.size(0), a.next_prefill_tokens.size(-1))
    token_bound = max(a.target_input_ids.numel(), a.input_ids.numel(), a.target_positions.numel(), a.positions.numel())
    mapping_end = a.request_idx_mapping.numel() if a.request_idx_mapping is not None else 0
    request_end = max(a.out_query_start_loc.numel(), a.out_seq_lens.numel(), a.last_token_indices.numel(), mapping_end)
    num_tasks = max(num_reqs, triton.cdiv(request_end, BLOCK_R))
    grid = (num_programs(a.idx_mapping.device, num_tasks),)
    update = a.sampled_tokens is not None
    if update:  # the post-update part: its record names are post_update_after_sampling's
        up, (up_rows, up_has_qsl), _, up_bins, _ = post_update_arguments(a)
    else:  # never read (the part is compiled away): placeholders of their kinds
        q = a.out_query_start_loc
        up, up_rows, up_has_qsl, up_bins = (q, q, q, q, 0, 0, q, q, q, 0, q, 0, 0, q, q, 0, 0, q, 0, q, 0, 0), 0, 0, False
    _prepare_draft_prefill_inputs_kernel[grid](
        nonempty(a.target_input_ids), nonempty(a.target_positions), nonempty(a.idx_mapping), a.query_start_loc,
        nonempty(a.seq_lens), nonempty(a.num_sampled), nonempty(a.num_rejected), nonempty(a.last_sampled_tokens),
        a.last_sampled_tokens.stride(0), nonempty(a.next_prefill_tokens), nonempty(a.input_ids), nonempty(a.positions),
        a.out_query_start_loc, nonempty(a.out_seq_lens), nonempty(a.last_token_indices),
        a.current_draft_step if a.current_draft_step is not None else a.out_query_start_loc,
        nonempty(a.request_idx_mapping) if a.request_idx_mapping is not None else a.out_query_start_loc,
        num_reqs, num_rows, a.target_input_ids.numel(), a.input_ids.numel(),
        min(a.target_positions.numel(), a.positions.numel()), token_bound, a.out_query_start_loc.numel(),
        a.out_seq_lens.numel(), a.last_token_indices.numel(), mapping_end, request_end,
        *up, up_rows, up_has_qsl,
        HAS_STEP=a.current_draft_step is not None, HAS_MAPPING=a.request_idx_mapping is not None,
        BLOCK_T=BLOCK_T, BLOCK_R=BLOCK_R, HAS_UPDATE=update, UPDATE_BINS=up_bins, UPDATE_BLOCK=UPDATE_BLOCK,
    )
