"""Triton kernel for cp_local_metadata (docs/context_parallel.md).

Entry-tiled: each program walks tiles of BLOCK request indices and writes the three outputs at
those indices. The cumulative local query lengths need no scan: they telescope to
clamp(qsl[r]) - clamp(qsl[0]) (see csrc/kernels/cp_local_metadata.h).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._cp import cp_token_split
from specops.triton_kernels._launch import num_programs

BLOCK = 1024


@triton.jit
def _cp_local_metadata_kernel(
    query_start_loc_ptr, seq_lens_ptr, local_query_start_loc_ptr, local_seq_lens_ptr, start_pos_ptr,
    num_reqs, local_start, local_end,
    local_query_start_loc_len, local_seq_lens_len, start_pos_len, num_entries,
    CAUSAL: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    first = tl.minimum(tl.maximum(tl.load(query_start_loc_ptr), local_start), local_end)
    num_tiles = (num_entries + BLOCK - 1) // BLOCK
    for tile in range(pid, num_tiles, num_progs):
        index = tile * BLOCK + tl.arange(0, BLOCK)
        in_range = index >= 0  # the lanes past 2^31 - 1 wrap to negative indices

        # local_query_start_loc: past R it repeats entry R, so padded requests are empty.
        boundary = tl.minimum(index, num_reqs)
        in_output = in_range & (index < local_query_start_loc_len)
        start = tl.load(query_start_loc_ptr + boundary, mask=in_output, other=0)
        local_boundary = tl.minimum(tl.maximum(start, local_start), local_end) - first
        tl.store(local_query_start_loc_ptr + index, local_boundary, mask=in_output)

        is_request = in_range & (index < num_reqs)
        begin = tl.load(query_start_loc_ptr + index, mask=is_request, other=0)
        end = tl.load(query_start_loc_ptr + index + 1, mask=is_request, other=0)
        seq_len = tl.load(seq_lens_ptr + index, mask=is_request, other=0)
        local_begin = tl.minimum(tl.maximum(begin, local_start), local_end)
        local_end_ = tl.minimum(tl.maximum(end, local_start), local_end)
        has_local = local_end_ > local_begin
        if CAUSAL:
            later = end - local_end_  # tokens of the request on later ranks
            local_seq = tl.where(has_local & (seq_len > 0), tl.maximum(seq_len - later, 0), 0)
        else:
            local_seq = tl.where(has_local, seq_len, 0)
        local_seq = tl.where(is_request, local_seq, 0)
        tl.store(local_seq_lens_ptr + index, local_seq, mask=in_range & (index < local_seq_lens_len))
        start_pos = tl.where(is_request, seq_len - (end - begin), 0)
        tl.store(start_pos_ptr + index, start_pos, mask=in_range & (index < start_pos_len))


def cp_local_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    split = cp_token_split(a.num_input_tokens, a.cp_size, a.cp_rank)
    num_entries = max(a.local_query_start_loc.numel(), a.local_seq_lens.numel(), a.start_pos.numel())
    grid = (num_programs(a.local_query_start_loc.device, triton.cdiv(num_entries, BLOCK)),)
    _cp_local_metadata_kernel[grid](
        a.query_start_loc, a.seq_lens, a.local_query_start_loc, a.local_seq_lens, a.start_pos,
        a.query_start_loc.numel() - 1, split.local_start, split.local_end,
        a.local_query_start_loc.numel(), a.local_seq_lens.numel(), a.start_pos.numel(), num_entries,
        CAUSAL=a.causal, BLOCK=BLOCK,
    )
