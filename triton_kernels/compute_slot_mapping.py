"""Triton kernel for compute_slot_mapping (docs/slot_mapping.md).

Token-tiled: each program walks tiles of BLOCK tokens and finds each token's request by a
binary search over query_start_loc, so one long prefill and many short decodes balance the
same way. Index math is int32 (positions are checked to fit first); slots are int64, and PAD where an
int32 output cannot hold them.
The per-token slot math lives in `_slot_math.py`, shared with the fused prepare_spec_decode_inputs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import nonempty, num_programs, search_steps
from specops.triton_kernels._search import segment_of
from specops.triton_kernels._slot_math import narrowed_slot, slots_of_tokens, usable_columns

BLOCK = 1024


@triton.jit
def _compute_slot_mapping_kernel(
    query_start_loc_ptr, positions_ptr, block_table_ptr, idx_mapping_ptr, out_ptr,
    num_reqs, num_tokens, num_tokens_padded,
    table_rows, table_cols, table_stride,
    block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave,
    num_search_steps, num_blocks_ptr,
    HAS_IDX_MAPPING: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tiles = (num_tokens_padded + BLOCK - 1) // BLOCK
    for tile in range(pid, num_tiles, num_progs):
        token = tile * BLOCK + tl.arange(0, BLOCK)
        # Both ends: past 2^31 - 1 the lanes of the last tile wrap to negative indices.
        in_buffer = (token >= 0) & (token < num_tokens_padded)
        is_real = in_buffer & (token < num_tokens)
        request = segment_of(query_start_loc_ptr, token, is_real, num_reqs, num_search_steps, BLOCK)
        is_real = is_real & (request < num_reqs)
        if HAS_IDX_MAPPING:
            # request is in [0, max(num_reqs - 1, 0)] in every lane: unmasked, then selected.
            row = tl.where(is_real, tl.load(idx_mapping_ptr + request), -1).to(tl.int64)
        else:
            row = request.to(tl.int64)
        # Masked by one bound, then selected: triton-ascend turns a contiguous load with a data-dependent
        # mask (request < num_reqs) into a full-tile read, and corrupts its heap on a mask of three
        # comparisons.
        in_positions = (token >= 0) & (token < tl.minimum(num_tokens, num_tokens_padded))
        position = tl.load(positions_ptr + token, mask=in_positions, other=-1).to(tl.int64)
        position = tl.where(is_real, position, -1)
        columns = usable_columns(num_blocks_ptr, row, is_real, table_rows, table_cols, HAS_NUM_BLOCKS)
        slot = slots_of_tokens(block_table_ptr, row, position, is_real, table_rows, columns, table_stride,
                               block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave)
        tl.store(out_ptr + token, narrowed_slot(slot, out_ptr), mask=in_buffer)


def compute_slot_mapping(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    if a.num_tokens_padded == 0:
        return
    num_reqs = a.query_start_loc.numel() - 1
    num_tiles = triton.cdiv(a.num_tokens_padded, BLOCK)
    grid = (num_programs(a.out.device, num_tiles),)
    _compute_slot_mapping_kernel[grid](
        a.query_start_loc, a.positions, nonempty(a.block_table),
        nonempty(a.idx_mapping) if a.idx_mapping is not None else a.query_start_loc, a.out,
        num_reqs, a.positions.numel(), a.num_tokens_padded,
        a.block_table.size(0), a.block_table.size(1), a.block_table.stride(0),
        a.block_size, a.blocks_per_kv_block, a.cp_world_size, a.cp_rank, a.cp_interleave,
        search_steps(num_reqs), nonempty(a.num_blocks) if a.num_blocks is not None else a.query_start_loc,
        HAS_IDX_MAPPING=a.idx_mapping is not None, HAS_NUM_BLOCKS=a.num_blocks is not None, BLOCK=BLOCK,
    )
