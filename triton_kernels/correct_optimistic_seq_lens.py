"""Triton kernel for correct_optimistic_seq_lens (docs/async_accounting.md).

A host op in a runner; on a device it runs like correct_num_computed_tokens: one program, all
loads before any store (a barrier between), so every read sees the values from before the
call even when seq_lens_cpu aliases an input. seq_lens and the valid counts may be int32 or
int64 (the rejected count is in the valid counts' width, the subtraction in seq_lens').
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import nonempty
from specops.triton_kernels.correct_num_computed_tokens import BLOCK, continued_rows, correction_scratch


@triton.jit
def _corrected_seq_lens(seq_lens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr, prev_num_draft_tokens_ptr,
                        rows, is_row, num_previous_rows):
    previous, continues = continued_rows(prev_positions_ptr, prev_num_draft_tokens_ptr, rows, is_row,
                                         num_previous_rows)
    drafts = tl.load(prev_num_draft_tokens_ptr + previous, mask=continues, other=0)
    valid = tl.load(valid_sampled_token_count_ptr + previous, mask=continues, other=0)
    seq_lens = tl.load(seq_lens_ptr + rows, mask=is_row, other=0)
    # drafts + 1 in int32, the difference in the valid counts' width (int32 or int64), then taken
    # in seq_lens' width: the peer's numpy promotion.
    rejected = (drafts + 1).to(valid.dtype) - valid
    return tl.where(continues, seq_lens - rejected.to(seq_lens.dtype), seq_lens)


@triton.jit
def _correct_optimistic_seq_lens_kernel(
    seq_lens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr, prev_num_draft_tokens_ptr, scratch_ptr,
    num_rows, num_previous_rows,
    BLOCK: tl.constexpr, ONE_TILE: tl.constexpr,
):
    if ONE_TILE:
        rows = tl.arange(0, BLOCK)
        is_row = rows < num_rows
        seq_lens = _corrected_seq_lens(seq_lens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
                                       prev_num_draft_tokens_ptr, rows, is_row, num_previous_rows)
        tl.debug_barrier()  # every thread's loads before any thread's stores
        tl.store(seq_lens_ptr + rows, seq_lens, mask=is_row)
    else:
        for start in range(0, num_rows, BLOCK):
            rows = start + tl.arange(0, BLOCK)
            is_row = (rows >= 0) & (rows < num_rows)
            seq_lens = _corrected_seq_lens(seq_lens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
                                           prev_num_draft_tokens_ptr, rows, is_row, num_previous_rows)
            tl.store(scratch_ptr + rows, seq_lens, mask=is_row)
        tl.debug_barrier()
        for start in range(0, num_rows, BLOCK):
            rows = start + tl.arange(0, BLOCK)
            is_row = (rows >= 0) & (rows < num_rows)
            tl.store(seq_lens_ptr + rows, tl.load(scratch_ptr + rows, mask=is_row, other=0), mask=is_row)


def correct_optimistic_seq_lens(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_rows = a.prev_positions.numel()
    if num_rows == 0:
        return
    num_previous_rows = min(a.valid_sampled_token_count.numel(), a.prev_num_draft_tokens.numel())
    scratch, one_tile = correction_scratch(a.seq_lens_cpu, num_rows, 1, a.seq_lens_cpu.dtype)
    # nonempty: a previous step of no rows (every row new) leaves these empty, and triton-ascend
    # issues a masked gather at every lane's offset, 0 included (the lowered code read past them).
    _correct_optimistic_seq_lens_kernel[(1,)](
        a.seq_lens_cpu, a.prev_positions, nonempty(a.valid_sampled_token_count), nonempty(a.prev_num_draft_tokens), scratch,
        num_rows, num_previous_rows,
        BLOCK=BLOCK, ONE_TILE=one_tile,
    )
