"""Triton kernel for prepare_input_ids: the step's input ids and logits indices, one launch.

Persistent grid over the requests (program p takes requests p, p + P, ...), then over the
padding tiles. Per request, its logits entries, its query's input ids (each computed once from
the rules of csrc/kernels/prepare_input_ids.h, the later rule winning, and stored once: no two
lanes store one id), and its lookahead prompt tokens. Loop bounds are clamped to the buffers,
so contradictory offsets cost no more than the buffers' sizes; every masked lane reads and
writes offset 0 of its tensor (the columns it reads pass through `nonempty`: triton-ascend's
lowering reads masked lanes too). A per-request condition enters a lane mask through tl.where
(the interpreter rejects a mask made by `&` of a scalar and a block).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._step_layout import input_ids_request_rows, logits_ends
from specops.triton_kernels._launch import nonempty, num_programs

BLOCK = 128


@triton.jit
def input_ids_phase(
    input_ids_ptr, idx_mapping_ptr, query_start_loc_ptr, num_computed_tokens_ptr, prefill_len_ptr,
    last_sampled_ptr, last_stride, draft_ptr, draft_stride, draft_cols, cu_num_logits_ptr,
    all_token_ids_ptr, token_stride, token_cols, next_prefill_ptr, lookahead_stride, num_lookahead,
    logits_indices_ptr, expanded_idx_ptr, local_pos_ptr,
    num_reqs, num_rows, num_new_sampled, has_prefill, input_numel, tokens_padded, logits_end, expanded_end, local_pos_end,
    HAS_PREFILL: tl.constexpr, BLOCK: tl.constexpr,
):
    """The op's whole work over this program's share of a persistent grid (prepare_spec_decode_inputs
    runs it beside its own phases in one launch)."""
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    logits_max = tl.maximum(tl.maximum(logits_end, expanded_end), local_pos_end)
    for r in range(pid, num_reqs, num_progs):
        mapped = tl.load(idx_mapping_ptr + r).to(tl.int64)
        has_row = (mapped >= 0) & (mapped < num_rows)
        row = tl.where(has_row, mapped, -1)
        safe_row = tl.where(has_row, mapped, 0)
        # int64 index: a form --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md)
        q0 = tl.load(query_start_loc_ptr + tl.cast(r, tl.int64)).to(tl.int64)
        q1 = tl.load(query_start_loc_ptr + r + 1).to(tl.int64)
        c0 = tl.load(cu_num_logits_ptr + r).to(tl.int64)
        n_log = tl.load(cu_num_logits_ptr + r + 1).to(tl.int64) - c0
        n_draft = n_log - num_new_sampled

        first = tl.maximum(-c0, 0)
        stop = tl.minimum(n_log, logits_max - c0)
        # The loop counts from 0: an interpreter's loop variable is a Python int, which Triton types
        # int32 beside the lanes, and `first` passes 2^31 when c0 is INT32_MIN.
        for done in range(0, stop - first, BLOCK):
            start = first + done
            j = start + lanes
            o = (c0 + start) + lanes
            live = (j < stop) & (o >= 0)
            # Each mask below is one comparison of an offset that is -1 where the lane is off:
            # triton-ascend's adapter misreads freed memory on masks of more than two comparisons.
            at_logit = tl.where(live & (o < logits_end), o, -1)
            tl.store(logits_indices_ptr + tl.where(at_logit >= 0, at_logit, 0), q1 - n_log + j, mask=at_logit >= 0)
            at_idx = tl.where(live & (o < expanded_end), o, -1)
            tl.store(expanded_idx_ptr + tl.where(at_idx >= 0, at_idx, 0), row.to(expanded_idx_ptr.dtype.element_ty),
                     mask=at_idx >= 0)
            at_pos = tl.where(live & (o < local_pos_end), o, -1)
            tl.store(local_pos_ptr + tl.where(at_pos >= 0, at_pos, 0), j.to(tl.int32), mask=at_pos >= 0)

        nc = tl.load(num_computed_tokens_ptr + safe_row, mask=has_row, other=0).to(tl.int64)
        prefill_len = tl.load(prefill_len_ptr + safe_row, mask=has_row, other=0).to(tl.int64)
        seq_len = nc + (q1 - q0)
        prefilling = has_row & (has_prefill != 0) & (nc < prefill_len)
        generated = has_row & (seq_len > prefill_len)
        bonus = generated & (num_new_sampled == 1) & (seq_len - n_log >= prefill_len)
        last = tl.load(last_sampled_ptr + safe_row * last_stride, mask=has_row, other=0).to(tl.int32)
        token_stop = tl.minimum(q1, input_numel)
        for start in range(tl.maximum(q0, 0), token_stop, BLOCK):
            i = start + lanes
            live = tl.where(has_row, (i < token_stop) & (i >= 0), False)
            draft = i - (q1 - n_draft)
            is_draft = tl.where(generated, live & (draft >= 0) & (draft < draft_cols), False)
            draft_at = tl.where(is_draft, draft, -1)
            draft_token = tl.load(draft_ptr + tl.where(draft_at >= 0, safe_row * draft_stride + draft_at, 0),
                                  mask=draft_at >= 0, other=0).to(tl.int32)
            is_bonus = tl.where(bonus, live & (i == q1 - n_log) & (is_draft == 0), False)
            is_prompt = tl.where(prefilling, live & (is_draft == 0) & (is_bonus == 0), False)
            column = nc + (i - q0)
            column_at = tl.where(is_prompt & (column >= 0) & (column < token_cols), column, -1)
            prompt = tl.load(all_token_ids_ptr + tl.where(column_at >= 0, safe_row * token_stride + column_at, 0),
                             mask=column_at >= 0, other=0)
            value = tl.where(is_draft, draft_token, tl.where(is_bonus, last, prompt))
            written = tl.where(is_draft | is_bonus | is_prompt, i, -1)
            tl.store(input_ids_ptr + tl.maximum(written, 0), value, mask=written >= 0)
        if HAS_PREFILL:
            for start in range(0, num_lookahead, BLOCK):
                k = start + lanes
                live = tl.where(prefilling, k < num_lookahead, False)
                column = seq_len + k
                column_at = tl.where(live & (column >= 0) & (column < prefill_len) & (column < token_cols), column, -1)
                token = tl.load(all_token_ids_ptr + tl.where(column_at >= 0, safe_row * token_stride + column_at, 0),
                                mask=column_at >= 0, other=0)
                next_at = tl.where(live, k * lookahead_stride + safe_row, -1)
                tl.store(next_prefill_ptr + tl.maximum(next_at, 0), token, mask=next_at >= 0)

    # Padding, dealt out in tiles after the requests.
    num_tokens = tl.minimum(tl.maximum(tl.load(query_start_loc_ptr + num_reqs), 0), input_numel)
    tokens_end = tl.minimum(tl.where(tokens_padded < 0, num_tokens, tokens_padded), input_numel)
    for tile in range(pid, tl.cdiv(tl.maximum(tokens_end - num_tokens, 0), BLOCK), num_progs):
        t = num_tokens + tile * BLOCK + lanes
        pad = t < tokens_end
        tl.store(input_ids_ptr + tl.where(pad, t, 0), tl.zeros_like(lanes), mask=pad)
    num_logits = tl.maximum(tl.load(cu_num_logits_ptr + num_reqs), 0)
    for tile in range(pid, tl.cdiv(tl.maximum(logits_max - num_logits, 0), BLOCK), num_progs):
        o = num_logits + tile * BLOCK + lanes
        tl.store(logits_indices_ptr + tl.where(o < logits_end, o, 0), tl.zeros_like(o).to(tl.int64),
                 mask=o < logits_end)
        tl.store(expanded_idx_ptr + tl.where(o < expanded_end, o, 0),
                 (tl.zeros_like(o) - 1).to(expanded_idx_ptr.dtype.element_ty), mask=o < expanded_end)
        tl.store(local_pos_ptr + tl.where(o < local_pos_end, o, 0), tl.zeros_like(o), mask=o < local_pos_end)


@triton.jit
def _prepare_input_ids_kernel(
    input_ids_ptr, idx_mapping_ptr, query_start_loc_ptr, num_computed_tokens_ptr, prefill_len_ptr,
    last_sampled_ptr, last_stride, draft_ptr, draft_stride, draft_cols, cu_num_logits_ptr,
    all_token_ids_ptr, token_stride, token_cols, next_prefill_ptr, lookahead_stride, num_lookahead,
    logits_indices_ptr, expanded_idx_ptr, local_pos_ptr,
    num_reqs, num_rows, num_new_sampled, has_prefill, input_numel, tokens_padded, logits_end, expanded_end, local_pos_end,
    HAS_PREFILL: tl.constexpr, BLOCK: tl.constexpr,
):
    input_ids_phase(
        input_ids_ptr, idx_mapping_ptr, query_start_loc_ptr, num_computed_tokens_ptr, prefill_len_ptr,
        last_sampled_ptr, last_stride, draft_ptr, draft_stride, draft_cols, cu_num_logits_ptr,
        all_token_ids_ptr, token_stride, token_cols, next_prefill_ptr, lookahead_stride, num_lookahead,
        logits_indices_ptr, expanded_idx_ptr, local_pos_ptr,
        num_reqs, num_rows, num_new_sampled, has_prefill, input_numel, tokens_padded, logits_end, expanded_end,
        local_pos_end, HAS_PREFILL, BLOCK)


def input_ids_arguments(a, num_tokens_padded: int) -> tuple[tuple, bool, int]:
    """The phase's arguments from a checked record with prepare_input_ids' names (this op's, or
    prepare_spec_decode_inputs' input-ids part), HAS_PREFILL, and the tasks it deals out (its
    requests, then its padding tiles)."""
    all_token_ids = a.all_token_ids
    next_prefill_tokens = a.next_prefill_tokens
    num_reqs = a.idx_mapping.numel()
    has_prefill = all_token_ids is not None
    num_rows = input_ids_request_rows(a.num_computed_tokens, a.prefill_len, a.last_sampled_tokens, a.draft_tokens,
                                      all_token_ids, next_prefill_tokens)
    if not has_prefill:
        all_token_ids = next_prefill_tokens = a.input_ids
    ends = logits_ends(a.num_logits_padded, a.logits_indices, a.expanded_idx_mapping, a.expanded_local_pos)
    arguments = (
        a.input_ids, a.idx_mapping, a.query_start_loc, a.num_computed_tokens, a.prefill_len,
        a.last_sampled_tokens, a.last_sampled_tokens.stride(0), nonempty(a.draft_tokens), a.draft_tokens.stride(0),
        a.draft_tokens.size(1), a.cu_num_logits,
        nonempty(all_token_ids), all_token_ids.stride(0) if has_prefill else 0,
        all_token_ids.size(1) if has_prefill else 0,
        next_prefill_tokens, next_prefill_tokens.stride(0) if has_prefill else 0,
        next_prefill_tokens.size(0) if has_prefill else 0,
        a.logits_indices, a.expanded_idx_mapping, a.expanded_local_pos,
        num_reqs, num_rows, a.num_new_sampled_tokens, int(has_prefill), a.input_ids.numel(), num_tokens_padded, *ends)
    # Requests first, then a tile of padding per program at least (cheap when there is none).
    return arguments, has_prefill, max(num_reqs, triton.cdiv(max(a.input_ids.numel(), *ends), BLOCK), 1)


def prepare_input_ids(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    arguments, has_prefill, num_tasks = input_ids_arguments(a, a.num_tokens_padded)
    grid = (num_programs(a.input_ids.device, num_tasks),)
    _prepare_input_ids_kernel[grid](*arguments, HAS_PREFILL=has_prefill, BLOCK=BLOCK)
