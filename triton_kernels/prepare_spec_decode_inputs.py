"""Triton kernel for prepare_spec_decode_inputs: one launch for a whole spec-decode step.

Three phases separated by a barrier: the correction (`correct_counts`), then seq_lens per request
tile, then per token tile the position (`positions_of_tokens`) and, from the position still in
registers, the slot of every KV-cache group (`slots_of_tokens`, the math of compute_slot_mapping).
A correction needs every old count read before any store (correct_num_computed_tokens.py), so a
call with rows to correct runs one program; with none (the request-indexed mode, model runner
V2's counts read through idx_mapping, or an empty correction) the phases' tiles are spread over a
persistent grid. With gathered tables (request-indexed mode only) a phase before the token
tiles writes every group's batch table over row tiles, with gather_block_tables' own store
helper; it reads the source tables, counts and idx_mapping only, none of which the launch writes,
so it needs no barrier.

Up to MAX_GROUPS groups per launch, each group's table, outputs and sizes passed as plain
arguments (triton_kernels/_groups.py says why not tuples) and unrolled at compile time. Past
MAX_GROUPS groups, each further launch (FIRST = False) maps (and gathers) the next groups only,
from the counts the first launch corrected. A group whose slot mapping is disabled loads nothing
from its table for its slots (every token masked off) and stores PAD.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._step_layout import group_layouts, spec_decode_extents
from specops.triton_kernels._groups import MAX_GROUPS, flat_group_args, group_chunks
from specops.triton_kernels._launch import nonempty, num_programs, search_steps
from specops.triton_kernels._slot_math import narrowed_slot, slots_of_tokens, usable_columns
from specops.triton_kernels.correct_num_computed_tokens import BLOCK, correct_counts, correction_scratch
from specops.triton_kernels.dcp_local_seq_lens import local_seq_lens
from specops.triton_kernels.gather_block_tables import BLOCK_ROWS, store_gathered_rows
from specops.triton_kernels.prepare_input_ids import BLOCK as IDS_BLOCK
from specops.triton_kernels.prepare_input_ids import input_ids_arguments, input_ids_phase
from specops.triton_kernels.prepare_positions_and_seq_lens import positions_of_tokens, seq_lens_of_requests

INT32_MAX = 2**31 - 1
# Columns a gather step copies: 64, where gather_block_tables copies 128. The [rows, columns]
# tile beside the slot math of every group spilled on sm_90 under ptxas's default register
# allocation at 128 (3 groups; tests/tooling/test_kernel_compile.py).
GATHER_COLS = 64


@triton.jit
def _group_slots(block_table_ptr, slot_mapping_ptr, num_blocks_ptr, table_rows, table_cols, table_stride, block_size,
                 blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave, enabled, token, in_buffer, row, position,
                 is_real, HAS_NUM_BLOCKS: tl.constexpr):
    """One group's slot of each token of the tile (PAD where its slot mapping is disabled)."""
    mapped = tl.where(enabled != 0, is_real, False)
    columns = usable_columns(num_blocks_ptr, row, mapped, table_rows, table_cols, HAS_NUM_BLOCKS)
    slot = slots_of_tokens(block_table_ptr, row, position, mapped, table_rows, columns, table_stride, block_size,
                           blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave)
    tl.store(slot_mapping_ptr + token, narrowed_slot(slot, slot_mapping_ptr), mask=in_buffer)


@triton.jit
def _group_gather(batch_row, in_padded, row, block_table_ptr, num_blocks_ptr, num_computed_tokens_ptr, table_rows,
                  table_stride, gathered_ptr, gathered_cols, gathered_stride, most_blocks, reach, window_block_size,
                  GATHER_ROWS: tl.constexpr, GATHER_COLS: tl.constexpr, MASK_WINDOW: tl.constexpr):
    """One group's gathered rows of the tile (gather_block_tables_multi's per-group work)."""
    store_gathered_rows(batch_row, in_padded, row, block_table_ptr, num_blocks_ptr, num_computed_tokens_ptr,
                        gathered_ptr, table_rows, table_stride, gathered_cols, gathered_stride, most_blocks, reach,
                        window_block_size, GATHER_ROWS, GATHER_COLS, MASK_WINDOW)


@triton.jit
def _gathered_rows(tile, idx_mapping_ptr, num_reqs, num_gathered_rows, GATHER_ROWS: tl.constexpr):
    """(batch rows, in the gathered extent, source rows) of one tile of the gather phase; rows past
    R, and past the extent, have source row -1.

    gather_block_tables' rows_of_tile loads the source row under a mask; in this kernel that form
    made `--triton-to-unstructure` read freed memory (memcheck, 2 of the 19 specializations), and
    so did clamped forms through int32 indices, so the load here is unmasked at a clamped int64
    index and selected after. Which forms hit the adapter's bug depends only on the kernel's
    offset values, so memcheck in `make test-ascend` decides (docs/device_readiness.md)."""
    batch_row = (tl.zeros([GATHER_ROWS], tl.int64) + tile) * GATHER_ROWS + tl.arange(0, GATHER_ROWS)
    # num_reqs == 0 reads the one-element placeholder at 0 (_launch.nonempty); the op checks
    # num_gathered_rows >= R, so a row below R is in the extent.
    at = tl.minimum(batch_row, tl.maximum(num_reqs, 1) - 1)
    row = tl.where(batch_row < num_reqs, tl.load(idx_mapping_ptr + at), -1).to(tl.int64)
    return batch_row, batch_row < num_gathered_rows, row


@triton.jit
def _prepare_spec_decode_inputs_kernel(
    num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr, valid_sampled_token_count_ptr,
    prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr, scratch_ptr, num_rows, num_previous_rows,
    query_start_loc_ptr, positions_ptr, seq_lens_ptr, idx_mapping_ptr,
    num_reqs, num_tokens_padded, num_reqs_padded, num_search_steps, num_counts, num_gathered_rows,
    block_table_0, slot_mapping_0, num_blocks_0, table_rows_0, table_cols_0, table_stride_0,
    block_size_0, blocks_per_kv_block_0, cp_world_size_0, cp_rank_0, cp_interleave_0, enabled_0,
    gathered_0, gathered_cols_0, gathered_stride_0, most_blocks_0, reach_0, window_block_size_0,
    block_table_1, slot_mapping_1, num_blocks_1, table_rows_1, table_cols_1, table_stride_1,
    block_size_1, blocks_per_kv_block_1, cp_world_size_1, cp_rank_1, cp_interleave_1, enabled_1,
    gathered_1, gathered_cols_1, gathered_stride_1, most_blocks_1, reach_1, window_block_size_1,
    block_table_2, slot_mapping_2, num_blocks_2, table_rows_2, table_cols_2, table_stride_2,
    block_size_2, blocks_per_kv_block_2, cp_world_size_2, cp_rank_2, cp_interleave_2, enabled_2,
    gathered_2, gathered_cols_2, gathered_stride_2, most_blocks_2, reach_2, window_block_size_2,
    block_table_3, slot_mapping_3, num_blocks_3, table_rows_3, table_cols_3, table_stride_3,
    block_size_3, blocks_per_kv_block_3, cp_world_size_3, cp_rank_3, cp_interleave_3, enabled_3,
    gathered_3, gathered_cols_3, gathered_stride_3, most_blocks_3, reach_3, window_block_size_3,
    dcp_ptr, dcp_end, cp_world_size, cp_rank, cp_interleave,
    ids_0, ids_1, ids_2, ids_3, ids_4, ids_5, ids_6, ids_7, ids_8, ids_9, ids_10, ids_11, ids_12, ids_13, ids_14,
    ids_15, ids_16, ids_17, ids_18, ids_19, ids_20, ids_21, ids_22, ids_23, ids_24, ids_25, ids_26, ids_27, ids_28,
    NUM_GROUPS: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr, BLOCK: tl.constexpr,
    ONE_TILE: tl.constexpr, FIRST: tl.constexpr, REQUEST_INDEXED: tl.constexpr, HAS_GATHER: tl.constexpr,
    MASK_WINDOW: tl.constexpr, GATHER_ROWS: tl.constexpr, GATHER_COLS: tl.constexpr, HAS_DCP: tl.constexpr,
    HAS_INPUT_IDS: tl.constexpr, IDS_PREFILL: tl.constexpr, IDS_BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    if FIRST:
        correct_counts(num_computed_tokens_ptr, num_accepted_tokens_ptr, prev_positions_ptr,
                       valid_sampled_token_count_ptr, prev_num_draft_tokens_ptr, cpu_num_computed_tokens_ptr,
                       scratch_ptr, num_rows, num_previous_rows, BLOCK, ONE_TILE)
        tl.debug_barrier()  # the corrected counts are stored and visible to every thread

        for start in range(pid * BLOCK, tl.maximum(num_reqs_padded, dcp_end), num_progs * BLOCK):
            request = start + tl.arange(0, BLOCK)
            # Batch-indexed counts (corrected in this step's layout), or a runner's read through idx_mapping.
            seq_lens = seq_lens_of_requests(num_computed_tokens_ptr, query_start_loc_ptr, request, num_reqs,
                                            idx_mapping_ptr, num_counts, REQUEST_INDEXED)
            tl.store(seq_lens_ptr + request, seq_lens, mask=(request >= 0) & (request < num_reqs_padded))
            if HAS_DCP:
                # From the seq_lens in registers (0 past R, as seq_lens_of_requests gives them).
                local = local_seq_lens(seq_lens.to(tl.int64), cp_world_size, cp_rank, cp_interleave)
                dcp_at = tl.where(request < dcp_end, request, -1)
                tl.store(dcp_ptr + tl.maximum(dcp_at, 0), local.to(tl.int32), mask=dcp_at >= 0)

        if HAS_INPUT_IDS:
            # prepare_input_ids' work: it reads nothing this launch writes, and writes nothing it
            # reads (the op's checks keep every output apart from every input).
            input_ids_phase(ids_0, ids_1, ids_2, ids_3, ids_4, ids_5, ids_6, ids_7, ids_8, ids_9, ids_10, ids_11,
                            ids_12, ids_13, ids_14, ids_15, ids_16, ids_17, ids_18, ids_19, ids_20, ids_21, ids_22,
                            ids_23, ids_24, ids_25, ids_26, ids_27, ids_28, IDS_PREFILL, IDS_BLOCK)

    if HAS_GATHER:
        for tile in range(pid, (num_gathered_rows + GATHER_ROWS - 1) // GATHER_ROWS, num_progs):
            batch_row, in_padded, src_row = _gathered_rows(tile, idx_mapping_ptr, num_reqs, num_gathered_rows,
                                                           GATHER_ROWS)
            _group_gather(batch_row, in_padded, src_row, block_table_0, num_blocks_0, num_computed_tokens_ptr,
                          table_rows_0, table_stride_0, gathered_0, gathered_cols_0, gathered_stride_0,
                          most_blocks_0, reach_0, window_block_size_0, GATHER_ROWS, GATHER_COLS,
                          MASK_WINDOW)
            if NUM_GROUPS > 1:
                _group_gather(batch_row, in_padded, src_row, block_table_1, num_blocks_1, num_computed_tokens_ptr,
                              table_rows_1, table_stride_1, gathered_1, gathered_cols_1, gathered_stride_1,
                              most_blocks_1, reach_1, window_block_size_1, GATHER_ROWS,
                              GATHER_COLS, MASK_WINDOW)
            if NUM_GROUPS > 2:
                _group_gather(batch_row, in_padded, src_row, block_table_2, num_blocks_2, num_computed_tokens_ptr,
                              table_rows_2, table_stride_2, gathered_2, gathered_cols_2, gathered_stride_2,
                              most_blocks_2, reach_2, window_block_size_2, GATHER_ROWS,
                              GATHER_COLS, MASK_WINDOW)
            if NUM_GROUPS > 3:
                _group_gather(batch_row, in_padded, src_row, block_table_3, num_blocks_3, num_computed_tokens_ptr,
                              table_rows_3, table_stride_3, gathered_3, gathered_cols_3, gathered_stride_3,
                              most_blocks_3, reach_3, window_block_size_3, GATHER_ROWS,
                              GATHER_COLS, MASK_WINDOW)

    for start in range(pid * BLOCK, num_tokens_padded, num_progs * BLOCK):
        token = start + tl.arange(0, BLOCK)
        in_buffer = (token >= 0) & (token < num_tokens_padded)
        request, position, is_real = positions_of_tokens(num_computed_tokens_ptr, query_start_loc_ptr, token,
                                                         num_reqs, num_search_steps, idx_mapping_ptr, num_counts,
                                                         BLOCK, REQUEST_INDEXED)
        if FIRST:
            tl.store(positions_ptr + token, position.to(positions_ptr.dtype.element_ty), mask=in_buffer)
        if HAS_IDX_MAPPING:
            # request is in [0, max(num_reqs - 1, 0)] in every lane: unmasked, then selected.
            # int64 index: a form --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md)
            row = tl.where(is_real, tl.load(idx_mapping_ptr + request.to(tl.int64)), -1).to(tl.int64)
        else:
            row = request.to(tl.int64)
        if NUM_GROUPS > 0:
            _group_slots(block_table_0, slot_mapping_0, num_blocks_0, table_rows_0, table_cols_0, table_stride_0,
                         block_size_0, blocks_per_kv_block_0, cp_world_size_0, cp_rank_0, cp_interleave_0, enabled_0,
                         token, in_buffer, row, position, is_real, HAS_NUM_BLOCKS)
        if NUM_GROUPS > 1:
            _group_slots(block_table_1, slot_mapping_1, num_blocks_1, table_rows_1, table_cols_1, table_stride_1,
                         block_size_1, blocks_per_kv_block_1, cp_world_size_1, cp_rank_1, cp_interleave_1, enabled_1,
                         token, in_buffer, row, position, is_real, HAS_NUM_BLOCKS)
        if NUM_GROUPS > 2:
            _group_slots(block_table_2, slot_mapping_2, num_blocks_2, table_rows_2, table_cols_2, table_stride_2,
                         block_size_2, blocks_per_kv_block_2, cp_world_size_2, cp_rank_2, cp_interleave_2, enabled_2,
                         token, in_buffer, row, position, is_real, HAS_NUM_BLOCKS)
        if NUM_GROUPS > 3:
            _group_slots(block_table_3, slot_mapping_3, num_blocks_3, table_rows_3, table_cols_3, table_stride_3,
                         block_size_3, blocks_per_kv_block_3, cp_world_size_3, cp_rank_3, cp_interleave_3, enabled_3,
                         token, in_buffer, row, position, is_real, HAS_NUM_BLOCKS)


assert MAX_GROUPS == 4, "the kernel above is unrolled for MAX_GROUPS groups"


def prepare_spec_decode_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_tokens_padded, num_reqs_padded = spec_decode_extents(a.positions, a.seq_lens, a.num_tokens_padded,
                                                             a.num_reqs_padded)
    num_rows = a.prev_positions.numel()
    num_previous_rows = min(a.valid_sampled_token_count.numel(), a.prev_num_draft_tokens.numel(),
                            a.num_computed_tokens.numel())
    scratch, one_tile = correction_scratch(a.num_computed_tokens, num_rows, 2)
    num_reqs = a.query_start_loc.numel() - 1
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled, a.cp_world_size,
                            a.cp_rank, a.cp_interleave)
    reach = list(a.sliding_window_reach) or [0] * len(a.block_tables)
    gather = bool(a.gathered_block_tables)
    # The gather's per-group part; a group without a window gets a reach no int32 first position
    # passes (it masks nothing), and without a gather the slots are never read.
    per_group = [(nonempty(table), a.slot_mappings[g], nonempty(a.num_blocks[g]) if a.num_blocks else a.query_start_loc,
                  table.size(0), table.size(1), table.stride(0), layout.block_size, layout.blocks_per_kv_block,
                  *layout.cp, int(layout.enabled),
                  *((nonempty(a.gathered_block_tables[g]), a.gathered_block_tables[g].size(1),
                     a.gathered_block_tables[g].stride(0), min(table.size(1), a.gathered_block_tables[g].size(1)),
                     reach[g] or INT32_MAX, max(a.block_sizes[g], 1)) if gather else (table, 0, 0, 0, INT32_MAX, 1)))
                 for g, (table, layout) in enumerate(zip(a.block_tables, layouts))]
    # A launch with no group still corrects the counts; its group slots are compiled away.
    no_group = (a.query_start_loc, a.positions, a.query_start_loc, 0, 0, 0, 1, 1, 1, 0, 1, 0,
                a.query_start_loc, 0, 0, 0, INT32_MAX, 1)
    dcp = a.dcp_local_seq_lens
    dcp_end = dcp.numel() if dcp is not None else 0
    has_ids = a.input_ids is not None
    if has_ids:  # the input-ids part (request-indexed only: never beside a correction)
        ids, ids_prefill, ids_tasks = input_ids_arguments(a, -1)
    else:  # its arguments never read (the phase is compiled away): placeholders of their kinds
        q = a.query_start_loc
        ids, ids_prefill, ids_tasks = (q, q, q, q, q, q, 0, q, 0, 0, q, q, 0, 0, q, 0, 0, q, q, q) + (0,) * 9, False, 0
    if num_rows > 0:
        grid = (1,)  # the correction's: see the module docstring
    else:
        tiles = max(triton.cdiv(num_tokens_padded, BLOCK), triton.cdiv(max(num_reqs_padded, dcp_end), BLOCK),
                    triton.cdiv(a.num_gathered_rows, BLOCK_ROWS) if gather else 0, ids_tasks)
        grid = (num_programs(a.query_start_loc.device, tiles),)
    for launch, groups in enumerate(group_chunks(len(a.block_tables)) or [range(0)]):
        _prepare_spec_decode_inputs_kernel[grid](
            nonempty(a.num_computed_tokens), a.num_accepted_tokens, a.prev_positions, nonempty(a.valid_sampled_token_count),
            nonempty(a.prev_num_draft_tokens), a.cpu_num_computed_tokens, scratch, num_rows, num_previous_rows,
            a.query_start_loc, a.positions, a.seq_lens,
            nonempty(a.idx_mapping) if a.idx_mapping is not None else a.query_start_loc,
            num_reqs, num_tokens_padded, num_reqs_padded, search_steps(num_reqs), a.num_computed_tokens.numel(),
            a.num_gathered_rows if gather else 0,
            *flat_group_args(per_group, groups, filler=no_group),
            nonempty(dcp) if dcp is not None else a.query_start_loc, dcp_end, a.cp_world_size, a.cp_rank,
            a.cp_interleave, *ids,
            NUM_GROUPS=len(groups), HAS_IDX_MAPPING=a.idx_mapping is not None, HAS_NUM_BLOCKS=bool(a.num_blocks),
            BLOCK=BLOCK, ONE_TILE=one_tile, FIRST=launch == 0, REQUEST_INDEXED=a.request_indexed_counts,
            HAS_GATHER=gather and len(groups) > 0,
            MASK_WINDOW=gather and any(reach[g] > 0 for g in groups), GATHER_ROWS=BLOCK_ROWS, GATHER_COLS=GATHER_COLS,
            HAS_DCP=launch == 0 and dcp_end > 0, HAS_INPUT_IDS=launch == 0 and has_ids, IDS_PREFILL=ids_prefill,
            IDS_BLOCK=IDS_BLOCK,
        )
