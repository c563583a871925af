"""Triton kernel for count_sampled_and_rejected: what the sampler kept, per request.

Request-tiled on a persistent grid; the tiles run to the larger padded end, each store masked
by its own buffer's end. A row outside [0, rows) of prefill_len counts as chunked (samples and
rejects nothing), every masked lane at offset 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 256


@triton.jit
def _count_sampled_and_rejected_kernel(
    num_sampled_ptr, seq_lens_ptr, cu_num_logits_ptr, idx_mapping_ptr, prefill_len_ptr, num_rejected_ptr,
    num_reqs, num_rows, sampled_end, rejected_end, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = tl.cdiv(tl.maximum(sampled_end, rejected_end), BLOCK)
    for tile in range(pid, num_tiles, num_progs):
        r = tile * BLOCK + tl.arange(0, BLOCK)
        real = r < num_reqs
        safe_r = tl.where(real, r, 0)
        row = tl.load(idx_mapping_ptr + safe_r, mask=real, other=-1).to(tl.int64)
        has_row = real & (row >= 0) & (row < num_rows)
        prefill_len = tl.load(prefill_len_ptr + tl.where(has_row, row, 0), mask=has_row, other=0)
        seq_len = tl.load(seq_lens_ptr + safe_r, mask=real, other=0)
        counted = has_row & (seq_len >= prefill_len)
        sampled = tl.load(num_sampled_ptr + safe_r, mask=real, other=0)
        num_logits = (tl.load(cu_num_logits_ptr + safe_r + 1, mask=real, other=0).to(tl.int64)
                      - tl.load(cu_num_logits_ptr + safe_r, mask=real, other=0))
        rejected = (num_logits - sampled).to(tl.int32)
        tl.store(num_sampled_ptr + tl.where(r < sampled_end, r, 0), tl.where(counted, sampled, 0),
                 mask=r < sampled_end)
        tl.store(num_rejected_ptr + tl.where(r < rejected_end, r, 0), tl.where(counted, rejected, 0),
                 mask=r < rejected_end)


def count_sampled_and_rejected(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    sampled_end = a.num_sampled.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded
    rejected_end = a.num_rejected.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded
    num_tasks = triton.cdiv(max(sampled_end, rejected_end), BLOCK)
    if num_tasks == 0:
        return
    grid = (num_programs(a.num_sampled.device, num_tasks),)
    _count_sampled_and_rejected_kernel[grid](
        a.num_sampled, a.seq_lens, a.cu_num_logits, a.idx_mapping, a.prefill_len, a.num_rejected,
        a.idx_mapping.numel(), a.prefill_len.numel(), sampled_end, rejected_end, BLOCK=BLOCK,
    )
