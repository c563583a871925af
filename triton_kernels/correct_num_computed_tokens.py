"""Triton kernel for correct_num_computed_tokens (docs/async_accounting.md).

The correction is in place and rows move between layouts: row i reads row p of the previous
batch, which some other row overwrites. A multi-program kernel could not order one program's
stores after another program's loads, so the whole correction runs in ONE program, in two
passes separated by a barrier: gather every row's new values (into registers when all rows fit
in one tile, else into a scratch buffer), then store. Every read thus sees the values from
before the call, for any batch size, and no grid size can break it. The work is tiny (one load
chain per row), so one program costs a launch and a few tiles, which is the cost floor anyway.
`correct_counts` is shared with the fused prepare_spec_decode_inputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import nonempty

BLOCK = 1024  # rows per tile; batches up to BLOCK rows never touch scratch


@triton.jit
def continued_rows(prev_positions_ptr, prev_num_draft_tokens_ptr, rows, is_row, num_previous_rows):
    """(previous row, continues): continues when p = prev_positions[i] is in [0, num_previous_rows)
    and that row drafted; the row is 0 (and never read) otherwise."""
    previous = tl.load(prev_positions_ptr + rows, mask=is_row, other=-1).to(tl.int64)
    in_range = is_row & (previous >= 0) & (previous < num_previous_rows)
    previous = tl.where(in_range, previous, 0)
    drafts = tl.load(prev_num_draft_tokens_ptr + previous, mask=in_range, other=0)
    return previous, in_range & (drafts > 0)


@triton.jit
def _gather_corrected_counts(
    num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
    prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, rows, is_row, num_previous_rows,
):
    previous, continues = continued_rows(prev_positions_ptr, prev_num_draft_tokens_ptr, rows, is_row,
                                         num_previous_rows)
    # The valid and host counts may be int64 (vllm-ascend's valid counts are): they enter the
    # int32 arithmetic by their low 32 bits, as the peer's `.int()` takes them.
    valid = tl.load(valid_sampled_token_count_ptr + previous, mask=continues, other=0).to(tl.int32)
    old_computed = tl.load(num_computed_tokens_ptr + previous, mask=continues, other=0)
    # Masked by the row bound alone, and selected below: triton-ascend turns a contiguous load with
    # a data-dependent mask into a full-tile read.
    host_computed = tl.load(cpu_num_computed_tokens_ptr + rows, mask=is_row, other=0).to(tl.int32)
    old_accepted = tl.load(num_accepted_tokens_ptr + rows, mask=is_row, other=0)
    computed = tl.where(continues, old_computed + valid, host_computed)
    accepted = tl.where(continues, valid, old_accepted)
    return computed, accepted


@triton.jit
def correct_counts(
    num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
    prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, scratch_ptr,
    num_rows, num_previous_rows,
    BLOCK: tl.constexpr, ONE_TILE: tl.constexpr,
):
    """The whole correction, run by a single program (see the module docstring).

    scratch holds 2 * num_rows int32 when ONE_TILE is false (num_rows > BLOCK).
    """
    if ONE_TILE:
        rows = tl.arange(0, BLOCK)
        is_row = rows < num_rows  # one tile: rows start at 0
        computed, accepted = _gather_corrected_counts(
            num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
            prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, rows, is_row, num_previous_rows)
        tl.debug_barrier()  # every thread's loads before any thread's stores
        tl.store(num_computed_tokens_ptr + rows, computed, mask=is_row)
        tl.store(num_accepted_tokens_ptr + rows, accepted, mask=is_row)
    else:
        for start in range(0, num_rows, BLOCK):
            rows = start + tl.arange(0, BLOCK)
            is_row = (rows >= 0) & (rows < num_rows)
            computed, accepted = _gather_corrected_counts(
                num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
                prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, rows, is_row, num_previous_rows)
            tl.store(scratch_ptr + rows, computed, mask=is_row)
            tl.store(scratch_ptr + num_rows + rows, accepted, mask=is_row)
        tl.debug_barrier()  # every tile gathered (and visible) before the first store
        for start in range(0, num_rows, BLOCK):
            rows = start + tl.arange(0, BLOCK)
            is_row = (rows >= 0) & (rows < num_rows)
            computed = tl.load(scratch_ptr + rows, mask=is_row, other=0)
            accepted = tl.load(scratch_ptr + num_rows + rows, mask=is_row, other=0)
            tl.store(num_computed_tokens_ptr + rows, computed, mask=is_row)
            tl.store(num_accepted_tokens_ptr + rows, accepted, mask=is_row)


@triton.jit
def _correct_num_computed_tokens_kernel(
    num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
    prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, scratch_ptr,
    num_rows, num_previous_rows,
    BLOCK: tl.constexpr, ONE_TILE: tl.constexpr,
):
    correct_counts(num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr,
                   valid_sampled_token_count_ptr, prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, scratch_ptr,
                   num_rows, num_previous_rows, BLOCK, ONE_TILE)


def correction_scratch(buffer: torch.Tensor, num_rows: int, values_per_row: int,
                       dtype: torch.dtype = torch.int32) -> tuple[torch.Tensor, bool]:
    """(scratch, one_tile) for a single-program correction of num_rows rows.

    Batches of up to BLOCK rows gather into registers and get `buffer` as a placeholder pointer
    that is never dereferenced; larger ones get values_per_row values of `dtype` per row.
    """
    if num_rows <= BLOCK:
        return buffer, True
    return torch.empty(values_per_row * num_rows, dtype=dtype, device=buffer.device), False


def correct_num_computed_tokens(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_rows = a.prev_positions.numel()
    if num_rows == 0:
        return
    num_previous_rows = min(a.valid_sampled_token_count.numel(), a.prev_num_draft_tokens.numel(),
                            a.num_computed_tokens.numel())
    scratch, one_tile = correction_scratch(a.num_computed_tokens, num_rows, 2)
    # One program by design: see the module docstring.
    _correct_num_computed_tokens_kernel[(1,)](
        a.num_computed_tokens, a.num_accepted_tokens, a.prev_positions, nonempty(a.valid_sampled_token_count),
        nonempty(a.prev_num_draft_tokens),
        a.cpu_num_computed_tokens, scratch, num_rows, num_previous_rows,
        BLOCK=BLOCK, ONE_TILE=one_tile,
    )
