"""Triton kernel for dspark_swa_indices (docs/context_parallel.md).

Tiled over (rows of this rank's slice) x (chunks of the row width): each program walks tasks of
BLOCK_ROWS token rows by BLOCK_W entries, finds each token's request by a binary search over
query_start_loc, and writes the slots of the request's visible positions. Under DSA-CP the
rows are this rank's slice of the padded stream, so nothing outside it is computed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._cp import cp_token_split
from specops.triton_kernels._launch import nonempty, num_programs, search_steps
from specops.triton_kernels._search import segment_of

BLOCK_ROWS = 16
BLOCK_W = 128


@triton.jit
def rows_of_task(task, num_chunks, query_start_loc_ptr, seq_lens_ptr, num_reqs, rows_begin, num_rows,
                 num_search_steps, BLOCK_ROWS: tl.constexpr):
    """Task `task` of a grid over (row tile, width chunk) pairs: its chunk and, for its BLOCK_ROWS
    rows of this rank's slice, whether each is a row of the output, whether it is a real token,
    its request, the request's query length and seq_len (0 where not real; both int64)."""
    row_tile = task // num_chunks
    chunk = task - row_tile * num_chunks
    # int64 rows: no lane wraps negative, so one comparison bounds the stores' masks (triton-ascend's
    # adapter corrupts its heap on a mask of more than two comparisons).
    row = (tl.zeros([BLOCK_ROWS], tl.int64) + row_tile) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    is_row = row < num_rows
    token = rows_begin + row
    num_tokens = tl.load(query_start_loc_ptr + num_reqs)
    is_real = is_row & (token < num_tokens)
    request = segment_of(query_start_loc_ptr, token, is_real, num_reqs, num_search_steps, BLOCK_ROWS)
    is_real = is_real & (request < num_reqs)
    # int64: seq_len - query_len - window wraps in int32 for values near INT32_MIN (a large start,
    # a negative column that passes `column < table_cols`, a load 2^31 entries early).
    # Unmasked at clamped indices (query_start_loc has num_reqs + 1 entries, seq_lens is never empty)
    # and selected: a masked row gather feeding the 2-D block-table gather crashes triton-ascend's
    # adapter now and then (--discrete-mask-access-conversion).
    safe_request = tl.where(is_real, request, 0)
    begin = tl.where(is_real, tl.load(query_start_loc_ptr + safe_request), 0).to(tl.int64)
    end = tl.where(is_real, tl.load(query_start_loc_ptr + tl.where(is_real, request + 1, 0)), 0).to(tl.int64)
    seq_len = tl.where(is_real, tl.load(seq_lens_ptr + safe_request), 0).to(tl.int64)
    return chunk, row, is_row, is_real, request, end - begin, seq_len


@triton.jit
def store_visible_slots(block_table_ptr, out_ptr, out_lens_ptr, row, is_row, is_real, request, query_len, seq_len,
                        chunk, width, window, block_size, table_rows, table_cols, table_stride, out_stride,
                        BLOCK_W: tl.constexpr):
    """Entries [chunk * BLOCK_W, (chunk + 1) * BLOCK_W) of the rows `row` (and their lens, from
    the first chunk): the slots of positions start + j of each row's request, -1 past visible.
    query_len and seq_len are int64 (see rows_of_task)."""
    start = tl.maximum(seq_len - query_len - window, 0)
    visible = tl.minimum(tl.maximum(seq_len - start, 0), width)
    visible = tl.where(is_real, visible, 0)

    entry = chunk * BLOCK_W + tl.arange(0, BLOCK_W)
    position = start[:, None] + entry[None, :]
    column = position // block_size
    valid = ((entry[None, :] < visible[:, None]) & (column >= 0) & (column < table_cols)
             & (request < table_rows)[:, None])
    safe_request = tl.where(valid, request[:, None], 0).to(tl.int64)
    safe_column = tl.where(valid, column, 0)
    # Unmasked at in-bounds offsets (entry 0 where invalid), then selected: triton-ascend's adapter
    # crashes on this gather masked by a per-row term, and reads every lane's offset anyway.
    block_id = tl.where(valid, tl.load(block_table_ptr + safe_request * table_stride + safe_column), -1)
    slot = block_id.to(tl.int64) * block_size + (position - column * block_size)
    valid = valid & (block_id >= 0) & (slot <= 2147483647)
    slot = tl.where(valid, slot, -1).to(tl.int32)

    out_row = out_ptr + row.to(tl.int64)[:, None] * out_stride
    tl.store(out_row + entry[None, :], slot, mask=is_row[:, None] & (entry < width)[None, :])  # entry >= 0
    is_first_chunk = (tl.zeros_like(row) + chunk) == 0  # a tensor mask: the lens are written once
    tl.store(out_lens_ptr + row, visible.to(tl.int32), mask=is_row & is_first_chunk)


# Scalars Triton would otherwise specialize on (an int equal to 1 becomes a constant, one divisible
# by 16 gets a hint), one kernel per value class: a window and block size of 1 with one request
# spilled on sm_90. None shapes an access a hint could widen (the table is gathered; the output
# rows keep out_stride's hint): one code per output stride (tests/tooling/test_kernel_compile.py).
UNSPECIALIZED = ["num_reqs", "rows_begin", "num_rows", "width", "window", "block_size", "table_rows", "table_cols",
                 "table_stride", "num_search_steps"]


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _dspark_swa_indices_kernel(
    block_table_ptr, query_start_loc_ptr, seq_lens_ptr, out_ptr, out_lens_ptr,
    num_reqs, rows_begin, num_rows, width, window, block_size,
    table_rows, table_cols, table_stride, out_stride,
    num_search_steps,
    BLOCK_ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_chunks = (width + BLOCK_W - 1) // BLOCK_W
    num_tasks = (num_rows + BLOCK_ROWS - 1) // BLOCK_ROWS * num_chunks
    for task in range(pid, num_tasks, num_progs):
        chunk, row, is_row, is_real, request, query_len, seq_len = rows_of_task(
            task, num_chunks, query_start_loc_ptr, seq_lens_ptr, num_reqs, rows_begin, num_rows, num_search_steps,
            BLOCK_ROWS)
        store_visible_slots(block_table_ptr, out_ptr, out_lens_ptr, row, is_row, is_real, request, query_len, seq_len,
                            chunk, width, window, block_size, table_rows, table_cols, table_stride, out_stride,
                            BLOCK_W)


def dspark_swa_indices(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    split = cp_token_split(a.num_tokens, a.cp_size, a.cp_rank)
    num_rows = split.tokens_per_rank
    if num_rows == 0:
        return
    num_reqs = a.query_start_loc.numel() - 1
    num_tasks = triton.cdiv(num_rows, BLOCK_ROWS) * triton.cdiv(a.width, BLOCK_W)
    grid = (num_programs(a.out.device, num_tasks),)
    _dspark_swa_indices_kernel[grid](
        nonempty(a.block_table), a.query_start_loc, nonempty(a.seq_lens), a.out, a.out_lens,
        num_reqs, split.local_start, num_rows, a.width, a.window, a.block_size,
        a.block_table.size(0), a.block_table.size(1), a.block_table.stride(0), a.out.stride(0),
        search_steps(num_reqs),
        BLOCK_ROWS=BLOCK_ROWS, BLOCK_W=BLOCK_W,
    )
