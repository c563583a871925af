"""Triton kernel for gather_block_tables (docs/persistent_buffers.md).

Row-tiled: each program walks tiles of BLOCK_ROWS batch rows and sweeps their columns in
chunks of BLOCK_COLS, so a tile of short decode rows is one wide vector access. Source rows
of -1, rows past the source table and the padded rows read nothing and write NULL. With
MASK_WINDOW, the entries below a row's sliding window, j < max(first_pos - reach, 0) //
block_size, read nothing and write NULL as well (int64 math: no wrap for any count).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import nonempty, num_programs

BLOCK_ROWS = 8
BLOCK_COLS = 128


@triton.jit
def store_gathered_rows(
    batch_row, in_padded, row, src_ptr, num_blocks_ptr, num_computed_tokens_ptr, out_ptr,
    src_rows, src_stride, out_cols, out_stride, most_blocks, sliding_window_reach, block_size,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, MASK_WINDOW: tl.constexpr,
):
    """Writes the padded rows `batch_row` (int64; in_padded: below num_reqs_padded) of one
    table: the first counts of source rows `row` (-1: none), NULL elsewhere. With MASK_WINDOW the
    entries below each row's window are NULL too (a reach of 2^31 - 1 masks nothing: no int32
    first position lies past it)."""
    has_row = (row >= 0) & (row < src_rows)
    safe_row = tl.where(has_row, row, 0)
    count = tl.where(has_row, tl.load(num_blocks_ptr + safe_row), 0)
    count = tl.minimum(tl.maximum(count, 0), most_blocks)
    if MASK_WINDOW:
        first_pos = tl.where(has_row, tl.load(num_computed_tokens_ptr + safe_row), 0).to(tl.int64)
        masked = tl.maximum(first_pos - sliding_window_reach, 0) // block_size
    else:
        masked = tl.zeros([BLOCK_ROWS], dtype=tl.int64)
    src_row_ptr = src_ptr + safe_row * src_stride
    out_row_ptr = out_ptr + batch_row * out_stride
    for col_start in range(0, out_cols, BLOCK_COLS):
        col = col_start + tl.arange(0, BLOCK_COLS)
        in_row = col < out_cols  # col_start >= 0 and out_cols is a table width: no lane wraps
        copied = in_row[None, :] & (col[None, :] < count[:, None]) & (col[None, :] >= masked[:, None])
        # Unmasked, at an in-bounds offset in every lane (entry 0 of row 0 where nothing is copied),
        # then selected: triton-ascend's adapter crashes on a masked 2-D load fed by the masked row
        # gather, and issues a masked gather at every lane's offset anyway.
        safe_col = tl.where(copied, col[None, :], 0)
        block_id = tl.where(copied, tl.load(src_row_ptr[:, None] + safe_col), 0)
        written = in_padded[:, None] & in_row[None, :]
        tl.store(out_row_ptr[:, None] + col[None, :], block_id, mask=written)


@triton.jit
def rows_of_tile(tile, idx_mapping_ptr, num_reqs, num_reqs_padded, BLOCK_ROWS: tl.constexpr):
    """(batch rows, in the padded extent, source rows) of one tile of BLOCK_ROWS batch rows;
    rows past R, and past the padded extent, have source row -1."""
    # int64 rows, so no lane wraps negative and one comparison bounds each mask: triton-ascend's
    # adapter corrupts its heap on a load or store mask of more than two comparisons.
    batch_row = (tl.zeros([BLOCK_ROWS], tl.int64) + tile) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_padded = batch_row < num_reqs_padded
    row = tl.load(idx_mapping_ptr + batch_row, mask=batch_row < num_reqs, other=-1)
    row = tl.where(in_padded, row, -1).to(tl.int64)
    return batch_row, in_padded, row


@triton.jit
def _gather_block_tables_kernel(
    src_ptr, num_blocks_ptr, idx_mapping_ptr, num_computed_tokens_ptr, out_ptr,
    num_reqs, num_reqs_padded, src_rows, src_stride, out_cols, out_stride, most_blocks,
    sliding_window_reach, block_size,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, MASK_WINDOW: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = (num_reqs_padded + BLOCK_ROWS - 1) // BLOCK_ROWS
    for tile in range(pid, num_tiles, num_progs):
        batch_row, in_padded, row = rows_of_tile(tile, idx_mapping_ptr, num_reqs, num_reqs_padded, BLOCK_ROWS)
        store_gathered_rows(batch_row, in_padded, row, src_ptr, num_blocks_ptr, num_computed_tokens_ptr, out_ptr,
                            src_rows, src_stride, out_cols, out_stride, most_blocks, sliding_window_reach,
                            block_size, BLOCK_ROWS, BLOCK_COLS, MASK_WINDOW)


def gather_block_tables(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    if a.num_reqs_padded == 0 or a.out.size(1) == 0:
        return
    mask_window = a.num_computed_tokens is not None and a.sliding_window_reach > 0
    num_tiles = triton.cdiv(a.num_reqs_padded, BLOCK_ROWS)
    grid = (num_programs(a.out.device, num_tiles),)
    _gather_block_tables_kernel[grid](
        nonempty(a.src_block_table), nonempty(a.num_blocks), nonempty(a.idx_mapping),
        nonempty(a.num_computed_tokens if mask_window else a.num_blocks), a.out,
        a.idx_mapping.numel(), a.num_reqs_padded,
        a.src_block_table.size(0), a.src_block_table.stride(0), a.out.size(1), a.out.stride(0),
        min(a.src_block_table.size(1), a.out.size(1)),
        a.sliding_window_reach, max(a.block_size, 1),
        BLOCK_ROWS=BLOCK_ROWS, BLOCK_COLS=BLOCK_COLS, MASK_WINDOW=mask_window,
    )
