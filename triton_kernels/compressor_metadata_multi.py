"""Triton kernel for compressor_metadata_multi: every group's rows of every step in one launch.

Up to MAX_GROUPS groups per launch, each group's pointers and sizes passed as plain arguments
(triton_kernels/_groups.py says why not tuples) and unrolled at compile time. Tasks are the
BLOCK-row tiles of every (group, step) in one list, group after group and step after step within
a group; the persistent grid deals them out round-robin (program p takes global tasks p, p + P,
...), so small groups do not leave programs idle. A tile is compressor_metadata's
(compressor_tile), on its step's row of cu_seqlens / start_pos and its step's rows of the outputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._groups import MAX_GROUPS, flat_group_args, group_chunks
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels.compressor_metadata import BLOCK, compressor_tile

# Requests scanned a step of a tile's search: 16, where the single-group kernel scans 32. The
# [BLOCK, RB] match block of each group's tile is what fills the registers; at 32 the two-group
# specializations spilled on sm_90 under ptxas's default register allocation
# (tests/tooling/test_kernel_compile.py). The scan's result does not depend on RB.
RB = 16


@triton.jit
def _group_tasks(cos_ptr, sin_ptr, table_ptr, out_cos_ptr, out_sin_ptr, slot_ptr, table_stride, table_width,
                 block_size, ratio, rope_rows, rope_stride, num_rows, rope_dim, cu_ptr, cu_stride, start_ptr,
                 start_stride, num_reqs, num_steps, first_task, pid, num_progs,
                 FORMAT: tl.constexpr, DIM: tl.constexpr, BLOCK: tl.constexpr, RB: tl.constexpr):
    """This program's tiles of one group (its steps' tiles, step after step), whose first tile is
    global task first_task; returns the next group's first task."""
    num_tiles = (num_rows + BLOCK - 1) // BLOCK
    num_tasks = num_tiles * num_steps
    first = (pid - first_task % num_progs + num_progs) % num_progs
    for task in range(first, num_tasks, num_progs):
        step = (task // num_tiles).to(tl.int64)
        tile = task % num_tiles
        step_rows = step * num_rows
        compressor_tile(cos_ptr, sin_ptr, cu_ptr + step * cu_stride, start_ptr + step * start_stride, table_ptr,
                        out_cos_ptr + step_rows * rope_dim, out_sin_ptr + step_rows * rope_dim,
                        slot_ptr + step_rows * FORMAT, tile * BLOCK, table_stride, table_width, block_size, ratio,
                        num_reqs, rope_rows, rope_stride, num_rows, rope_dim, FORMAT, BLOCK, RB, DIM)
    return first_task + num_tasks


@triton.jit
def _compressor_metadata_multi_kernel(
    cos_0, sin_0, table_0, out_cos_0, out_sin_0, slot_0, table_stride_0, table_width_0, block_size_0, ratio_0,
    rope_rows_0, rope_stride_0, num_rows_0, rope_dim_0,
    cos_1, sin_1, table_1, out_cos_1, out_sin_1, slot_1, table_stride_1, table_width_1, block_size_1, ratio_1,
    rope_rows_1, rope_stride_1, num_rows_1, rope_dim_1,
    cos_2, sin_2, table_2, out_cos_2, out_sin_2, slot_2, table_stride_2, table_width_2, block_size_2, ratio_2,
    rope_rows_2, rope_stride_2, num_rows_2, rope_dim_2,
    cos_3, sin_3, table_3, out_cos_3, out_sin_3, slot_3, table_stride_3, table_width_3, block_size_3, ratio_3,
    rope_rows_3, rope_stride_3, num_rows_3, rope_dim_3,
    cu_ptr, cu_stride, start_ptr, start_stride, num_reqs, num_steps,
    NUM_GROUPS: tl.constexpr, FORMAT_0: tl.constexpr, DIM_0: tl.constexpr, FORMAT_1: tl.constexpr,
    DIM_1: tl.constexpr, FORMAT_2: tl.constexpr, DIM_2: tl.constexpr, FORMAT_3: tl.constexpr, DIM_3: tl.constexpr,
    BLOCK: tl.constexpr, RB: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    task = _group_tasks(cos_0, sin_0, table_0, out_cos_0, out_sin_0, slot_0, table_stride_0, table_width_0,
                        block_size_0, ratio_0, rope_rows_0, rope_stride_0, num_rows_0, rope_dim_0, cu_ptr, cu_stride,
                        start_ptr, start_stride, num_reqs, num_steps, 0, pid, num_progs, FORMAT_0, DIM_0, BLOCK, RB)
    if NUM_GROUPS > 1:
        task = _group_tasks(cos_1, sin_1, table_1, out_cos_1, out_sin_1, slot_1, table_stride_1, table_width_1,
                            block_size_1, ratio_1, rope_rows_1, rope_stride_1, num_rows_1, rope_dim_1, cu_ptr,
                            cu_stride, start_ptr, start_stride, num_reqs, num_steps, task, pid, num_progs, FORMAT_1,
                            DIM_1, BLOCK, RB)
    if NUM_GROUPS > 2:
        task = _group_tasks(cos_2, sin_2, table_2, out_cos_2, out_sin_2, slot_2, table_stride_2, table_width_2,
                            block_size_2, ratio_2, rope_rows_2, rope_stride_2, num_rows_2, rope_dim_2, cu_ptr,
                            cu_stride, start_ptr, start_stride, num_reqs, num_steps, task, pid, num_progs, FORMAT_2,
                            DIM_2, BLOCK, RB)
    if NUM_GROUPS > 3:
        _group_tasks(cos_3, sin_3, table_3, out_cos_3, out_sin_3, slot_3, table_stride_3, table_width_3, block_size_3,
                     ratio_3, rope_rows_3, rope_stride_3, num_rows_3, rope_dim_3, cu_ptr, cu_stride, start_ptr,
                     start_stride, num_reqs, num_steps, task, pid, num_progs, FORMAT_3, DIM_3, BLOCK, RB)


assert MAX_GROUPS == 4, "the kernel above is unrolled for MAX_GROUPS groups"


def compressor_metadata_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_steps = a.cu_seqlens.shape[0]
    # Empty tensors as one element (nonempty): a masked lane still addresses offset 0 on the NPU.
    per_group = [(nonempty(a.rope_cos[g]), nonempty(a.rope_sin[g]), nonempty(a.kv_block_tables[g]), a.compress_cos[g],
                  a.compress_sin[g], a.slot_mappings[g], a.kv_block_tables[g].stride(0), a.kv_block_tables[g].shape[1],
                  a.kv_block_sizes[g], a.compress_ratios[g], a.rope_cos[g].shape[0], a.rope_cos[g].stride(0),
                  a.compress_cos[g].shape[1], a.rope_cos[g].shape[1]) for g in range(len(a.rope_cos))]
    constants = [(a.slot_mapping_formats[g], triton.next_power_of_2(max(a.rope_cos[g].shape[1], 1)))
                 for g in range(len(a.rope_cos))]
    for groups in group_chunks(len(a.rope_cos)):
        num_tasks = sum(num_steps * triton.cdiv(a.compress_cos[g].shape[1], BLOCK) for g in groups)
        if num_tasks == 0:
            continue
        chosen = [constants[g] for g in groups] + [constants[groups[0]]] * (MAX_GROUPS - len(groups))
        grid = (num_programs(a.cu_seqlens.device, num_tasks),)
        _compressor_metadata_multi_kernel[grid](
            *flat_group_args(per_group, groups), a.cu_seqlens, a.cu_seqlens.stride(0), a.start_pos, a.start_pos.stride(0),
            a.num_reqs_actual, num_steps, NUM_GROUPS=len(groups),
            **{f"{name}_{g}": value for g, pair in enumerate(chosen) for name, value in zip(("FORMAT", "DIM"), pair)},
            BLOCK=BLOCK, RB=RB,
        )
