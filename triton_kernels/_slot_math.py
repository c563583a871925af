"""The slot of a token, on device: the one place every Triton kernel that maps positions to
KV-cache slots takes it from (compute_slot_mapping, the fused prepare_spec_decode_inputs).
The same math in C++ is csrc/kernels/slot_math.h, in torch
python/specops/reference/_slot_math.py (docs/slot_mapping.md).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def slots_of_tokens(
    block_table_ptr, row, position, is_real,
    table_rows, table_cols, table_stride,
    block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave,
):
    """int64 slot of each token (row: int64 block-table row; position: int64); PAD where invalid."""
    virtual_block_size = block_size * blocks_per_kv_block * cp_world_size
    rank_stride = cp_world_size * cp_interleave
    in_range = is_real & (position >= 0) & (position <= 2147483647) & (row >= 0) & (row < table_rows)
    position32 = tl.where(in_range, position, 0).to(tl.int32)

    virtual_block = position32 // virtual_block_size
    offset = position32 - virtual_block * virtual_block_size
    run = offset // cp_interleave
    is_local = (run % cp_world_size) == cp_rank
    local_offset = (offset // rank_stride) * cp_interleave + (offset - run * cp_interleave)
    kernel_block = local_offset // block_size
    column = virtual_block * blocks_per_kv_block + kernel_block
    valid = in_range & is_local & (column >= 0) & (column < table_cols)

    safe_row = tl.where(valid, row, 0)
    safe_column = tl.where(valid, column, 0)
    # Unmasked at the clamped offset, then selected: triton-ascend's adapter corrupts its heap on a mask of
    # more than two comparisons (the table is never empty: the launchers pass `nonempty` tables).
    block_id = tl.where(valid, tl.load(block_table_ptr + safe_row * table_stride + safe_column), -1)
    valid = valid & (block_id >= 0)
    slot = block_id.to(tl.int64) * block_size + (local_offset - kernel_block * block_size)
    return tl.where(valid, slot, -1)


@triton.jit
def usable_columns(num_blocks_ptr, row, is_real, table_rows, table_cols, HAS_NUM_BLOCKS: tl.constexpr):
    """The columns of each token's row it may use: the row's allocated blocks (num_blocks[row],
    a negative count none), never past the table; the whole row without num_blocks."""
    if HAS_NUM_BLOCKS:
        has_row = is_real & (row >= 0) & (row < table_rows)
        allocated = tl.where(has_row, tl.load(num_blocks_ptr + tl.where(has_row, row, 0)), 0)  # as block_id below
        columns = tl.minimum(tl.maximum(allocated, 0), table_cols)
    else:
        columns = tl.zeros_like(row).to(tl.int32) + table_cols
    return columns


@triton.jit
def narrowed_slot(slot, out_ptr):
    """The int64 slot as out's element type: PAD where an int32 out cannot hold it (a cast would
    wrap 2^32 to 0, another request's slot)."""
    if out_ptr.dtype.element_ty == tl.int32:
        slot = tl.where(slot <= 2147483647, slot, -1)
    return slot.to(out_ptr.dtype.element_ty)
