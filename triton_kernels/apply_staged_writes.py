"""Triton kernel for apply_staged_writes (docs/persistent_buffers.md).

Value-tiled: each program walks tiles of BLOCK staged values and finds each value's write by
a binary search over cu_lens, so many one-value writes and a few long ones balance alike.
A write that does not fit in the table (row or columns out of range, values past the end of
`values`) is dropped whole, as in the C++ body.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs, search_steps
from specops.triton_kernels._search import segment_of

BLOCK = 1024


@triton.jit
def _apply_staged_writes_kernel(
    table_ptr, rows_ptr, starts_ptr, cu_lens_ptr, values_ptr,
    num_writes, num_values, table_rows, table_cols, table_stride,
    num_search_steps,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = (num_values + BLOCK - 1) // BLOCK
    for tile in range(pid, num_tiles, num_progs):
        value_index = tile * BLOCK + tl.arange(0, BLOCK)
        is_value = (value_index >= 0) & (value_index < num_values)

        # With invalid (decreasing) cu_lens the search can miss a value's write; the range
        # check below then drops the value, so nothing is written out of bounds.
        write = segment_of(cu_lens_ptr, value_index, is_value, num_writes, num_search_steps, BLOCK)
        begin = tl.load(cu_lens_ptr + write, mask=is_value, other=0)
        end = tl.load(cu_lens_ptr + write + 1, mask=is_value, other=0)
        row = tl.load(rows_ptr + write, mask=is_value, other=-1).to(tl.int64)
        start = tl.load(starts_ptr + write, mask=is_value, other=-1)
        # Written so that nothing overflows int32: start <= table_cols before the subtraction.
        fits = (
            is_value & (begin <= value_index) & (value_index < end)
            & (begin >= 0) & (end <= num_values)
            & (row >= 0) & (row < table_rows)
            & (start >= 0) & (start <= table_cols) & (end - begin <= table_cols - start)
        )
        # Masked by the tile bound alone (only `fits` lanes are stored): triton-ascend turns a
        # contiguous load with a data-dependent mask into a full-tile read.
        value = tl.load(values_ptr + value_index, mask=is_value, other=0)
        column = tl.where(fits, start + (value_index - begin), 0)
        target = table_ptr + tl.where(fits, row, 0) * table_stride + column
        tl.store(target, value, mask=fits)


def apply_staged_writes(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_writes = a.rows.numel()
    if num_writes == 0 or a.values.numel() == 0:
        return
    num_tiles = triton.cdiv(a.values.numel(), BLOCK)
    grid = (num_programs(a.table.device, num_tiles),)
    _apply_staged_writes_kernel[grid](
        a.table, a.rows, a.starts, a.cu_lens, a.values,
        num_writes, a.values.numel(), a.table.size(0), a.table.size(1), a.table.stride(0),
        search_steps(num_writes),
        BLOCK=BLOCK,
    )
