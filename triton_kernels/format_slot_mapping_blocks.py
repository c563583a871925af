"""Triton kernel for format_slot_mapping_blocks (docs/context_parallel.md).

Slot-tiled. Triton's integer // and % truncate toward zero like C, so the kernel moves a
negative remainder one block down to get floor semantics.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 1024


@triton.jit
def format_tile(slot_mapping_ptr, out_ptr, tile, num_slots, num_rows, row_stride, block_size, BLOCK: tl.constexpr):
    """Rows [tile * BLOCK, (tile + 1) * BLOCK) of out: the (block, offset) pair of each slot,
    PAD's pair past num_slots."""
    index = tile * BLOCK + tl.arange(0, BLOCK)
    is_row = (index >= 0) & (index < num_rows)
    # One bound, not is_row & (index < num_slots): triton-ascend's adapter corrupts its heap on a load
    # mask of three comparisons (--discrete-mask-access-conversion, seen with valgrind).
    slot = tl.load(slot_mapping_ptr + index, mask=(index >= 0) & (index < tl.minimum(num_rows, num_slots)),
                   other=-1).to(tl.int64)
    block = slot // block_size
    offset = slot - block * block_size
    negative = offset < 0
    block = tl.where(negative, block - 1, block)
    offset = tl.where(negative, offset + block_size, offset)
    row = out_ptr + index.to(tl.int64) * row_stride
    tl.store(row, block.to(out_ptr.dtype.element_ty), mask=is_row)
    tl.store(row + 1, offset.to(out_ptr.dtype.element_ty), mask=is_row)


@triton.jit
def _format_slot_mapping_blocks_kernel(
    slot_mapping_ptr, out_ptr, num_slots, num_rows, row_stride, block_size,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = (num_rows + BLOCK - 1) // BLOCK
    for tile in range(pid, num_tiles, num_progs):
        format_tile(slot_mapping_ptr, out_ptr, tile, num_slots, num_rows, row_stride, block_size, BLOCK)


def format_slot_mapping_blocks(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_rows = a.out.size(0)
    if num_rows == 0:
        return
    grid = (num_programs(a.out.device, triton.cdiv(num_rows, BLOCK)),)
    _format_slot_mapping_blocks_kernel[grid](
        a.slot_mapping, a.out, a.slot_mapping.numel(), num_rows, a.out.stride(0), a.block_size, BLOCK=BLOCK,
    )
