"""Triton kernel for dspark_swa_indices_multi: every DSpark group's indices in one launch.

Tasks are (tile of BLOCK_ROWS rows of this rank's slice) x (chunk of BLOCK_W entries), up to
the widest group's chunk count. A task finds its rows' requests once (the binary search over
query_start_loc and the seq_len loads are the groups' common part), then writes that chunk of
every group of the launch, unrolled over up to MAX_GROUPS groups passed as plain arguments
(triton_kernels/_groups.py says why not tuples). The per-group math is
dspark_swa_indices' own (`store_visible_slots`); a chunk past a narrower group's width writes
nothing there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._cp import cp_token_split
from specops.triton_kernels._groups import MAX_GROUPS, flat_group_args, group_chunks
from specops.triton_kernels._launch import nonempty, num_programs, search_steps
from specops.triton_kernels.dspark_swa_indices import BLOCK_W, rows_of_task, store_visible_slots

# At 4 warps the specialization with a window of 1 (a compile-time constant) reaches ptxas's 255
# registers and spills 36 bytes on sm_90; at 8 warps the generic code fits (about 170).
NUM_WARPS = 8
# Rows a task: 8, where the single-group kernel takes 16. At 16 the [rows, BLOCK_W] tile of every
# group of the launch spilled on sm_90 under ptxas's default register allocation at the launchers'
# argument ranges (tests/tooling/test_kernel_compile.py); the search per row is the same work.
BLOCK_ROWS = 8

# Scalars Triton would otherwise specialize on (an int equal to 1 becomes a constant, one
# divisible by 16 gets a hint), each value the launcher passes making another kernel: a window
# of 1 with a block size of 16 and one request spilled on sm_90 at 8 warps, a specialization the
# op table's draws never launched. None of them shapes an access a hint could widen (the table
# is gathered; the output rows keep out_stride's hint), so each launch compiles the one code
# per NUM_GROUPS and output stride (tests/tooling/test_kernel_compile.py compiles each of them).
UNSPECIALIZED = ["num_reqs", "rows_begin", "num_rows", "num_chunks", "num_search_steps"] + [
    f"{name}_{g}" for g in range(4)
    for name in ("width", "window", "block_size", "table_rows", "table_cols", "table_stride")]


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _dspark_swa_indices_multi_kernel(
    query_start_loc_ptr, seq_lens_ptr, num_reqs, rows_begin, num_rows, num_chunks, num_search_steps,
    block_table_0, out_0, out_lens_0, width_0, window_0, block_size_0,
    table_rows_0, table_cols_0, table_stride_0, out_stride_0,
    block_table_1, out_1, out_lens_1, width_1, window_1, block_size_1,
    table_rows_1, table_cols_1, table_stride_1, out_stride_1,
    block_table_2, out_2, out_lens_2, width_2, window_2, block_size_2,
    table_rows_2, table_cols_2, table_stride_2, out_stride_2,
    block_table_3, out_3, out_lens_3, width_3, window_3, block_size_3,
    table_rows_3, table_cols_3, table_stride_3, out_stride_3,
    NUM_GROUPS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tasks = (num_rows + BLOCK_ROWS - 1) // BLOCK_ROWS * num_chunks
    for task in range(pid, num_tasks, num_progs):
        chunk, row, is_row, is_real, request, query_len, seq_len = rows_of_task(
            task, num_chunks, query_start_loc_ptr, seq_lens_ptr, num_reqs, rows_begin, num_rows, num_search_steps,
            BLOCK_ROWS)
        store_visible_slots(block_table_0, out_0, out_lens_0, row, is_row, is_real, request, query_len,
                            seq_len, chunk, width_0, window_0, block_size_0, table_rows_0, table_cols_0,
                            table_stride_0, out_stride_0, BLOCK_W)
        if NUM_GROUPS > 1:
            store_visible_slots(block_table_1, out_1, out_lens_1, row, is_row, is_real, request, query_len,
                                seq_len, chunk, width_1, window_1, block_size_1, table_rows_1, table_cols_1,
                                table_stride_1, out_stride_1, BLOCK_W)
        if NUM_GROUPS > 2:
            store_visible_slots(block_table_2, out_2, out_lens_2, row, is_row, is_real, request, query_len,
                                seq_len, chunk, width_2, window_2, block_size_2, table_rows_2, table_cols_2,
                                table_stride_2, out_stride_2, BLOCK_W)
        if NUM_GROUPS > 3:
            store_visible_slots(block_table_3, out_3, out_lens_3, row, is_row, is_real, request, query_len,
                                seq_len, chunk, width_3, window_3, block_size_3, table_rows_3, table_cols_3,
                                table_stride_3, out_stride_3, BLOCK_W)


assert MAX_GROUPS == 4, "the kernel above is unrolled for MAX_GROUPS groups"


def dspark_swa_indices_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    split = cp_token_split(a.num_tokens, a.cp_size, a.cp_rank)
    num_rows = split.tokens_per_rank
    if num_rows == 0 or not a.block_tables:
        return
    num_reqs = a.query_start_loc.numel() - 1
    per_group = [(nonempty(table), a.out[g], a.out_lens[g], a.widths[g], a.windows[g], a.block_sizes[g], table.size(0),
                  table.size(1), table.stride(0), a.out[g].stride(0)) for g, table in enumerate(a.block_tables)]
    for groups in group_chunks(len(a.block_tables)):
        num_chunks = max(triton.cdiv(a.widths[g], BLOCK_W) for g in groups)
        grid = (num_programs(a.query_start_loc.device, triton.cdiv(num_rows, BLOCK_ROWS) * num_chunks),)
        _dspark_swa_indices_multi_kernel[grid](
            a.query_start_loc, nonempty(a.seq_lens), num_reqs, split.local_start, num_rows, num_chunks,
            search_steps(num_reqs),
            *flat_group_args(per_group, groups),
            NUM_GROUPS=len(groups), BLOCK_ROWS=BLOCK_ROWS, BLOCK_W=BLOCK_W, num_warps=NUM_WARPS,
        )
