"""Triton kernel for format_slot_mapping_blocks_multi: every group's slot mapping in one launch.

Up to MAX_GROUPS groups per launch, each group's slot mapping, output and sizes passed as plain
arguments (triton_kernels/_groups.py says why not tuples) and unrolled at compile time. Tasks
are the row tiles of every group in one list, group after group; the persistent grid deals them
out round-robin, so program p takes global tasks p, p + P, ... wherever the group boundaries
fall, and small groups do not leave programs idle. The tile math is format_slot_mapping_blocks'
(floor semantics from C-style // and %).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._groups import MAX_GROUPS, flat_group_args, group_chunks
from specops.triton_kernels._launch import num_programs
from specops.triton_kernels.format_slot_mapping_blocks import BLOCK, format_tile


@triton.jit
def _group_tiles(slot_mapping_ptr, out_ptr, num_rows, row_stride, block_size, num_slots, first_task, pid, num_progs,
                 BLOCK: tl.constexpr):
    """This program's tiles of one group, whose first tile is global task first_task; returns the
    next group's first task."""
    num_tiles = (num_rows + BLOCK - 1) // BLOCK
    # The first tile of this group whose global index is pid modulo num_progs.
    first_tile = (pid - first_task % num_progs + num_progs) % num_progs
    for tile in range(first_tile, num_tiles, num_progs):
        format_tile(slot_mapping_ptr, out_ptr, tile, num_slots, num_rows, row_stride, block_size, BLOCK)
    return first_task + num_tiles


@triton.jit
def _format_slot_mapping_blocks_multi_kernel(
    slot_mapping_0, out_0, num_rows_0, row_stride_0, block_size_0,
    slot_mapping_1, out_1, num_rows_1, row_stride_1, block_size_1,
    slot_mapping_2, out_2, num_rows_2, row_stride_2, block_size_2,
    slot_mapping_3, out_3, num_rows_3, row_stride_3, block_size_3,
    num_slots,
    NUM_GROUPS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    task = _group_tiles(slot_mapping_0, out_0, num_rows_0, row_stride_0, block_size_0, num_slots, 0, pid, num_progs,
                        BLOCK)
    if NUM_GROUPS > 1:
        task = _group_tiles(slot_mapping_1, out_1, num_rows_1, row_stride_1, block_size_1, num_slots, task, pid,
                            num_progs, BLOCK)
    if NUM_GROUPS > 2:
        task = _group_tiles(slot_mapping_2, out_2, num_rows_2, row_stride_2, block_size_2, num_slots, task, pid,
                            num_progs, BLOCK)
    if NUM_GROUPS > 3:
        _group_tiles(slot_mapping_3, out_3, num_rows_3, row_stride_3, block_size_3, num_slots, task, pid, num_progs,
                     BLOCK)


assert MAX_GROUPS == 4, "the kernel above is unrolled for MAX_GROUPS groups"


def format_slot_mapping_blocks_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    per_group = [(a.slot_mappings[g], a.out[g], a.out[g].size(0), a.out[g].stride(0), a.block_sizes[g]) for g in range(len(a.out))]
    for groups in group_chunks(len(a.out)):
        num_tasks = sum(triton.cdiv(a.out[g].size(0), BLOCK) for g in groups)
        if num_tasks == 0:
            continue
        grid = (num_programs(a.out[0].device, num_tasks),)
        _format_slot_mapping_blocks_multi_kernel[grid](
            *flat_group_args(per_group, groups), a.num_slots, NUM_GROUPS=len(groups), BLOCK=BLOCK,
        )
