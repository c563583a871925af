"""Triton kernel for prepare_positions_and_seq_lens (docs/async_accounting.md).

Nothing is written in place, so this one is a plain persistent grid: tasks are the token tiles
of [0, num_tokens_padded) and then the request tiles of [0, num_reqs_padded). The number of
tokens is read on the device (query_start_loc[R]); tokens past it get position 0. With
HAS_IDX_MAPPING the counts are request-indexed: request r reads row idx_mapping[r], and a row
outside [0, num_counts) (-1: no row) counts 0. `positions_of_tokens` and
`seq_lens_of_requests` are shared with the fused prepare_spec_decode_inputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import nonempty, num_programs, search_steps
from specops.triton_kernels._search import segment_of

BLOCK = 1024


@triton.jit
def counts_of_requests(num_computed_tokens_ptr, idx_mapping_ptr, num_counts, request, is_request,
                       HAS_IDX_MAPPING: tl.constexpr):
    """int32 count of each request: batch-indexed, or read through idx_mapping (0 without a row)."""
    if HAS_IDX_MAPPING:
        row = tl.where(is_request, tl.load(idx_mapping_ptr + tl.where(is_request, request, 0)), -1).to(tl.int64)
        has_row = is_request & (row >= 0) & (row < num_counts)
        # Unmasked at the clamped row, then selected: triton-ascend's adapter corrupts its heap on a
        # mask of more than two comparisons. The row, in [0, num_counts), is an int32 index: a form
        # --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md).
        count = tl.where(has_row, tl.load(num_computed_tokens_ptr + tl.where(has_row, row, 0).to(tl.int32)), 0)
    else:
        count = tl.load(num_computed_tokens_ptr + request, mask=is_request, other=0)
    return count


@triton.jit
def positions_of_tokens(num_computed_tokens_ptr, query_start_loc_ptr, token, num_reqs, num_search_steps,
                        idx_mapping_ptr, num_counts, BLOCK: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr):
    """(request, int64 position, is_real) of each token; position 0 past query_start_loc[R]."""
    num_tokens = tl.load(query_start_loc_ptr + num_reqs)
    is_real = (token >= 0) & (token < num_tokens)
    request = segment_of(query_start_loc_ptr, token, is_real, num_reqs, num_search_steps, BLOCK)
    is_real = is_real & (request < num_reqs)
    start = tl.load(query_start_loc_ptr + request, mask=is_real, other=0)
    count = counts_of_requests(num_computed_tokens_ptr, idx_mapping_ptr, num_counts, request, is_real,
                               HAS_IDX_MAPPING)
    # int64: an invalid query_start_loc (a start near INT32_MIN) would wrap token - start.
    position = tl.where(is_real, count.to(tl.int64) + (token.to(tl.int64) - start.to(tl.int64)), 0)
    return request, position, is_real


@triton.jit
def seq_lens_of_requests(num_computed_tokens_ptr, query_start_loc_ptr, request, num_reqs, idx_mapping_ptr,
                         num_counts, HAS_IDX_MAPPING: tl.constexpr):
    """int32 seq_len of each request; 0 for padding requests (request >= R)."""
    is_request = (request >= 0) & (request < num_reqs)
    count = counts_of_requests(num_computed_tokens_ptr, idx_mapping_ptr, num_counts, request, is_request,
                               HAS_IDX_MAPPING)
    start = tl.load(query_start_loc_ptr + request, mask=is_request, other=0)
    end = tl.load(query_start_loc_ptr + request + 1, mask=is_request, other=0)
    return tl.where(is_request, count + (end - start), 0)


@triton.jit
def _prepare_positions_and_seq_lens_kernel(
    num_computed_tokens_ptr, query_start_loc_ptr, positions_ptr, seq_lens_ptr, idx_mapping_ptr,
    num_reqs, num_tokens_padded, num_reqs_padded, num_search_steps, num_counts,
    BLOCK: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_token_tiles = (num_tokens_padded + BLOCK - 1) // BLOCK
    num_tasks = num_token_tiles + (num_reqs_padded + BLOCK - 1) // BLOCK
    for task in range(pid, num_tasks, num_progs):
        if task < num_token_tiles:
            token = task * BLOCK + tl.arange(0, BLOCK)
            _, position, _ = positions_of_tokens(num_computed_tokens_ptr, query_start_loc_ptr, token, num_reqs,
                                                 num_search_steps, idx_mapping_ptr, num_counts, BLOCK,
                                                 HAS_IDX_MAPPING)
            tl.store(positions_ptr + token, position.to(positions_ptr.dtype.element_ty),
                     mask=(token >= 0) & (token < num_tokens_padded))
        else:
            request = (task - num_token_tiles) * BLOCK + tl.arange(0, BLOCK)
            seq_lens = seq_lens_of_requests(num_computed_tokens_ptr, query_start_loc_ptr, request, num_reqs,
                                            idx_mapping_ptr, num_counts, HAS_IDX_MAPPING)
            tl.store(seq_lens_ptr + request, seq_lens, mask=(request >= 0) & (request < num_reqs_padded))


def prepare_positions_and_seq_lens(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_tasks = triton.cdiv(a.num_tokens_padded, BLOCK) + triton.cdiv(a.num_reqs_padded, BLOCK)
    if num_tasks == 0:
        return
    num_reqs = a.query_start_loc.numel() - 1
    grid = (num_programs(a.positions.device, num_tasks),)
    _prepare_positions_and_seq_lens_kernel[grid](
        nonempty(a.num_computed_tokens), a.query_start_loc, a.positions, a.seq_lens,
        nonempty(a.idx_mapping) if a.idx_mapping is not None else a.query_start_loc,
        num_reqs, a.num_tokens_padded, a.num_reqs_padded, search_steps(num_reqs), a.num_computed_tokens.numel(),
        BLOCK=BLOCK, HAS_IDX_MAPPING=a.idx_mapping is not None,
    )
