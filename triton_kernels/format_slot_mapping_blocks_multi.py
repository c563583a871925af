"""Triton kernel for format_slot_mapping_blocks_multi: every group's slot mapping in one launch.

The groups are Triton tuples (slot mappings, outputs, their sizes), unrolled at compile time.
Tasks are the row tiles of every group in one list, group after group; the persistent grid
deals them out round-robin, so program p takes global tasks p, p + P, ... wherever the group
boundaries fall, and small groups do not leave programs idle. The tile math is
format_slot_mapping_blocks' (floor semantics from C-style // and %).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs
from specops.triton_kernels.format_slot_mapping_blocks import BLOCK, format_tile


@triton.jit
def _format_slot_mapping_blocks_multi_kernel(
    slot_mappings, outs, num_rows, row_strides, block_sizes, num_slots,
    NUM_GROUPS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    first_task = 0  # global index of the group's first tile
    for g in tl.static_range(NUM_GROUPS):
        num_tiles = tl.cdiv(num_rows[g], BLOCK)
        # The first tile of this group whose global index is pid modulo num_progs.
        first_tile = (pid - first_task % num_progs + num_progs) % num_progs
        for tile in range(first_tile, num_tiles, num_progs):
            format_tile(slot_mappings[g], outs[g], tile, num_slots, num_rows[g], row_strides[g], block_sizes[g],
                        BLOCK)
        first_task += num_tiles


def format_slot_mapping_blocks_multi(slot_mappings: list[torch.Tensor], block_sizes: list[int], num_slots: int,
                                     out: list[torch.Tensor]) -> None:
    num_rows = tuple(t.size(0) for t in out)
    num_tasks = sum(triton.cdiv(rows, BLOCK) for rows in num_rows)
    if num_tasks == 0:
        return
    grid = (num_programs(out[0].device, num_tasks),)
    _format_slot_mapping_blocks_multi_kernel[grid](
        tuple(slot_mappings), tuple(out), num_rows, tuple(t.stride(0) for t in out), tuple(block_sizes), num_slots,
        NUM_GROUPS=len(out), BLOCK=BLOCK,
    )
