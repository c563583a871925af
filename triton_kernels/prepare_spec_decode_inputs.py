"""Triton kernel for prepare_spec_decode_inputs: one launch for a whole spec-decode step.

One program (the correction needs every old count read before any store, see
correct_num_computed_tokens.py), in three phases separated by barriers: the correction
(`correct_counts`), then seq_lens per request tile, then per token tile the position
(`positions_of_tokens`) and, from the position still in registers, the slot of every
KV-cache group (`slots_of_tokens`, the math of compute_slot_mapping). The groups are Triton
tuples (block tables, outputs and sizes), unrolled at compile time. A group whose slot mapping
is disabled loads nothing from its table (every token masked off) and stores PAD.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._spec_decode_sizes import SpecDecodeSizes
from specops.triton_kernels._launch import search_steps
from specops.triton_kernels._slot_math import narrowed_slot, slots_of_tokens, usable_columns
from specops.triton_kernels.correct_num_computed_tokens import BLOCK, correct_counts, correction_scratch
from specops.triton_kernels.prepare_positions_and_seq_lens import positions_of_tokens, seq_lens_of_requests


@triton.jit
def _prepare_spec_decode_inputs_kernel(
    num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
    prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, scratch_ptr, num_rows, num_previous_rows,
    query_start_loc_ptr, positions_ptr, seq_lens_ptr, idx_mapping_ptr,
    num_reqs, num_tokens_padded, num_reqs_padded, num_search_steps,
    block_tables, slot_mappings, table_rows, table_cols, table_strides,
    block_sizes, blocks_per_kv_block, cp_world_sizes, cp_ranks, cp_interleaves, slot_mapping_enabled, num_blocks,
    NUM_GROUPS: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr, BLOCK: tl.constexpr,
    ONE_TILE: tl.constexpr,
):
    correct_counts(num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr,
                   valid_sampled_token_count_ptr, prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, scratch_ptr,
                   num_rows, num_previous_rows, BLOCK, ONE_TILE)
    tl.debug_barrier()  # the corrected counts are stored and visible to every thread

    for start in range(0, num_reqs_padded, BLOCK):
        request = start + tl.arange(0, BLOCK)
        # The fused op's counts are batch-indexed (corrected in this step's layout): no idx_mapping.
        seq_lens = seq_lens_of_requests(num_computed_tokens_ptr, query_start_loc_ptr, request, num_reqs,
                                        num_computed_tokens_ptr, 0, False)
        tl.store(seq_lens_ptr + request, seq_lens, mask=(request >= 0) & (request < num_reqs_padded))

    for start in range(0, num_tokens_padded, BLOCK):
        token = start + tl.arange(0, BLOCK)
        in_buffer = (token >= 0) & (token < num_tokens_padded)
        request, position, is_real = positions_of_tokens(num_computed_tokens_ptr, query_start_loc_ptr, token,
                                                         num_reqs, num_search_steps, num_computed_tokens_ptr, 0,
                                                         BLOCK, False)
        tl.store(positions_ptr + token, position.to(positions_ptr.dtype.element_ty), mask=in_buffer)
        if HAS_IDX_MAPPING:
            row = tl.load(idx_mapping_ptr + request, mask=is_real, other=-1).to(tl.int64)
        else:
            row = request.to(tl.int64)
        for g in tl.static_range(NUM_GROUPS):
            mapped = tl.where(slot_mapping_enabled[g] != 0, is_real, False)
            columns = usable_columns(num_blocks[g], row, mapped, table_rows[g], table_cols[g], HAS_NUM_BLOCKS)
            slot = slots_of_tokens(block_tables[g], row, position, mapped, table_rows[g], columns,
                                   table_strides[g], block_sizes[g], blocks_per_kv_block[g], cp_world_sizes[g],
                                   cp_ranks[g], cp_interleaves[g])
            tl.store(slot_mappings[g] + token, narrowed_slot(slot, slot_mappings[g]), mask=in_buffer)


def prepare_spec_decode_inputs(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: list[torch.Tensor],
    slot_mappings: list[torch.Tensor],
    idx_mapping: torch.Tensor | None,
    sizes: list[int],
    num_blocks: list[torch.Tensor] = (),
) -> None:
    layout = SpecDecodeSizes.unpack(sizes, len(block_tables))
    num_rows = prev_positions.numel()
    num_previous_rows = min(valid_sampled_token_count.numel(), prev_num_draft_tokens.numel(),
                            num_computed_tokens.numel())
    scratch, one_tile = correction_scratch(num_computed_tokens, num_rows, 2)
    num_reqs = query_start_loc.numel() - 1
    cp = [layout.group_cp(g) for g in range(len(block_tables))]
    # One program by design: see the module docstring.
    _prepare_spec_decode_inputs_kernel[(1,)](
        num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count, prev_num_draft_tokens,
        cpu_num_computed_tokens, scratch, num_rows, num_previous_rows,
        query_start_loc, positions, seq_lens, idx_mapping if idx_mapping is not None else query_start_loc,
        num_reqs, layout.num_tokens_padded, layout.num_reqs_padded, search_steps(num_reqs),
        tuple(block_tables), tuple(slot_mappings),
        tuple(t.size(0) for t in block_tables), tuple(t.size(1) for t in block_tables),
        tuple(t.stride(0) for t in block_tables),
        tuple(layout.block_sizes), tuple(layout.blocks_per_kv_block),
        tuple(c[0] for c in cp), tuple(c[1] for c in cp), tuple(c[2] for c in cp),
        tuple(int(enabled) for enabled in layout.slot_mapping_enabled),
        tuple(num_blocks) if num_blocks else tuple(query_start_loc for _ in block_tables),
        NUM_GROUPS=len(block_tables), HAS_IDX_MAPPING=idx_mapping is not None, HAS_NUM_BLOCKS=bool(num_blocks),
        BLOCK=BLOCK, ONE_TILE=one_tile,
    )
