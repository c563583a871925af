"""Triton kernel for gather_block_tables_multi: every KV-cache group's batch table in one launch.

Tasks are tiles of BLOCK_ROWS padded batch rows, as in gather_block_tables. A task reads its
rows' source rows from idx_mapping once (the groups' common part), then writes those rows of
every group of the launch, unrolled over up to MAX_GROUPS groups passed as plain arguments
(triton_kernels/_groups.py says why not a table of pointers, as vLLM's kernel has). The
per-group work is gather_block_tables' own (`store_gathered_rows`): each group sweeps its own
columns, and masks its sliding window where its reach is > 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._groups import MAX_GROUPS, flat_group_args, group_chunks
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels.gather_block_tables import BLOCK_COLS, BLOCK_ROWS, rows_of_tile, store_gathered_rows

INT32_MAX = 2**31 - 1

# Scalars Triton would otherwise specialize on (an int equal to 1 becomes a constant, one
# divisible by 16 gets a hint), each distinct pattern another compiled kernel per group count.
# None of them shapes an access a hint could widen (they bound masks and scale counts); the
# strides keep their hints, which the row loads and stores use.
UNSPECIALIZED = ["num_reqs", "num_reqs_padded"] + [
    f"{name}_{g}" for g in range(4)
    for name in ("src_rows", "out_cols", "most_blocks", "sliding_window_reach", "block_size")]


@triton.jit(do_not_specialize=UNSPECIALIZED)
def _gather_block_tables_multi_kernel(
    idx_mapping_ptr, num_computed_tokens_ptr, num_reqs, num_reqs_padded,
    src_0, num_blocks_0, out_0, src_rows_0, src_stride_0, out_cols_0, out_stride_0, most_blocks_0,
    sliding_window_reach_0, block_size_0,
    src_1, num_blocks_1, out_1, src_rows_1, src_stride_1, out_cols_1, out_stride_1, most_blocks_1,
    sliding_window_reach_1, block_size_1,
    src_2, num_blocks_2, out_2, src_rows_2, src_stride_2, out_cols_2, out_stride_2, most_blocks_2,
    sliding_window_reach_2, block_size_2,
    src_3, num_blocks_3, out_3, src_rows_3, src_stride_3, out_cols_3, out_stride_3, most_blocks_3,
    sliding_window_reach_3, block_size_3,
    NUM_GROUPS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, MASK_WINDOW: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = (num_reqs_padded + BLOCK_ROWS - 1) // BLOCK_ROWS
    for tile in range(pid, num_tiles, num_progs):
        batch_row, in_padded, row = rows_of_tile(tile, idx_mapping_ptr, num_reqs, num_reqs_padded, BLOCK_ROWS)
        store_gathered_rows(batch_row, in_padded, row, src_0, num_blocks_0, num_computed_tokens_ptr, out_0,
                            src_rows_0, src_stride_0, out_cols_0, out_stride_0, most_blocks_0,
                            sliding_window_reach_0, block_size_0, BLOCK_ROWS, BLOCK_COLS, MASK_WINDOW)
        if NUM_GROUPS > 1:
            store_gathered_rows(batch_row, in_padded, row, src_1, num_blocks_1, num_computed_tokens_ptr, out_1,
                                src_rows_1, src_stride_1, out_cols_1, out_stride_1, most_blocks_1,
                                sliding_window_reach_1, block_size_1, BLOCK_ROWS, BLOCK_COLS, MASK_WINDOW)
        if NUM_GROUPS > 2:
            store_gathered_rows(batch_row, in_padded, row, src_2, num_blocks_2, num_computed_tokens_ptr, out_2,
                                src_rows_2, src_stride_2, out_cols_2, out_stride_2, most_blocks_2,
                                sliding_window_reach_2, block_size_2, BLOCK_ROWS, BLOCK_COLS, MASK_WINDOW)
        if NUM_GROUPS > 3:
            store_gathered_rows(batch_row, in_padded, row, src_3, num_blocks_3, num_computed_tokens_ptr, out_3,
                                src_rows_3, src_stride_3, out_cols_3, out_stride_3, most_blocks_3,
                                sliding_window_reach_3, block_size_3, BLOCK_ROWS, BLOCK_COLS, MASK_WINDOW)


assert MAX_GROUPS == 4, "the kernel above is unrolled for MAX_GROUPS groups"


def gather_block_tables_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    if a.num_reqs_padded == 0 or not a.src_block_tables:
        return
    # A group without a window (reach 0) in a launch that masks is passed a reach of 2^31 - 1:
    # every int32 first position lies within it, so it masks nothing, with no per-group branch.
    per_group = [(nonempty(src), nonempty(a.num_blocks[g]), nonempty(a.out[g]), src.size(0), src.stride(0),
                  a.out[g].size(1), a.out[g].stride(0), min(src.size(1), a.out[g].size(1)),
                  a.sliding_window_reach[g] or INT32_MAX, max(a.block_sizes[g], 1))
                 for g, src in enumerate(a.src_block_tables)]
    grid = (num_programs(a.idx_mapping.device, triton.cdiv(a.num_reqs_padded, BLOCK_ROWS)),)
    for groups in group_chunks(len(a.src_block_tables)):
        # Masking compiled in only where a group of this launch has a window to mask.
        mask_window = a.num_computed_tokens is not None and any(a.sliding_window_reach[g] > 0 for g in groups)
        _gather_block_tables_multi_kernel[grid](
            nonempty(a.idx_mapping), nonempty(a.num_computed_tokens if mask_window else a.idx_mapping),
            a.idx_mapping.numel(), a.num_reqs_padded,
            *flat_group_args(per_group, groups),
            NUM_GROUPS=len(groups), BLOCK_ROWS=BLOCK_ROWS, BLOCK_COLS=BLOCK_COLS, MASK_WINDOW=mask_window,
        )
