"""Triton kernel for advance_draft_step: a draft step's positions, seq_lens and every group's slots.

Request tiles on a persistent grid. The position and seq_len of a request are computed once, in
registers, and each KV-cache group's slot from them (`slots_of_tokens`, compute_slot_mapping's
math). The groups are flattened pointer and size arguments for up to MAX_GROUPS groups per
launch (no tuple arguments: triton-ascend 3.2 has none); a step with more groups launches the
extra ones first, slots only (WRITE_STEP False: positions and seq_lens are still the inputs),
then the launch that also writes positions, seq_lens, the query layout and the step's token
bookkeeping. The last draft step (draft_step read on the device) empties every launch's request
loop, so that nothing but the sampled tokens' store runs. Every masked lane reads and writes
offset 0 of its tensor (an empty one is passed as a placeholder element).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

from specops._step_layout import GroupLayout, group_layouts
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels._slot_math import narrowed_slot, slots_of_tokens, usable_columns

BLOCK = 128
HIDDEN_ROWS, BLOCK_H = 8, 128  # the hidden-row copy's tile
MAX_GROUPS = 4
_GROUP_FIELDS = 13  # see _group_arguments


@triton.jit
def _store_group_slots(
    table_ptr, slot_ptr, num_blocks_ptr, table_rows, table_cols, table_stride, block_size, blocks_per_kv_block,
    cp_world_size, cp_rank, cp_interleave, enabled, slot_end, r, row, position, mapped,
    HAS_NUM_BLOCKS: tl.constexpr,
):
    mapped = tl.where(enabled != 0, mapped, False)
    columns = usable_columns(num_blocks_ptr, row, mapped, table_rows, table_cols, HAS_NUM_BLOCKS)
    slot = slots_of_tokens(table_ptr, row, position, mapped, table_rows, columns, table_stride, block_size,
                           blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave)
    in_buffer = r < slot_end
    tl.store(slot_ptr + tl.where(in_buffer, r, 0), narrowed_slot(slot, slot_ptr), mask=in_buffer)


@triton.jit
def _group_slots(
    t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
    t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
    t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
    t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
    index, row, position, mapped, NUM_GROUPS: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr,
):
    _store_group_slots(t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0, index, row, position,
                       mapped, HAS_NUM_BLOCKS)
    if NUM_GROUPS > 1:
        _store_group_slots(t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1, index, row,
                           position, mapped, HAS_NUM_BLOCKS)
    if NUM_GROUPS > 2:
        _store_group_slots(t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2, index, row,
                           position, mapped, HAS_NUM_BLOCKS)
    if NUM_GROUPS > 3:
        _store_group_slots(t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3, index, row,
                           position, mapped, HAS_NUM_BLOCKS)


@triton.jit
def _in_columns(r, step, draft_columns):
    """Lanes whose step is a column of the drafts (the step broadcast first: a scalar mask term
    is not a mask the interpreter stores with)."""
    lane_step = tl.zeros_like(r).to(tl.int64) + step
    return (lane_step >= 0) & (lane_step < draft_columns)


@triton.jit
def _draft_inputs(
    safe_r, real, step, draft_columns, input_ids_ptr, draft_tokens_ptr, draft_tokens_stride, sampled_ptr,
    sample_positions_ptr, HAS_INPUT_IDS: tl.constexpr, HAS_SAMPLED: tl.constexpr, HAS_SAMPLE_POSITIONS: tl.constexpr,
):
    """The input ids and sampling keys of the requests of one tile (advance_draft_step's DraftInputs)."""
    if HAS_INPUT_IDS:
        if HAS_SAMPLED:
            token = tl.load(sampled_ptr + safe_r, mask=real, other=0).to(tl.int64)
        else:
            read = real & _in_columns(safe_r, step, draft_columns)
            token = tl.load(draft_tokens_ptr + tl.where(read, safe_r.to(tl.int64) * draft_tokens_stride + step, 0),
                            mask=read, other=0).to(tl.int64)
        tl.store(input_ids_ptr + safe_r, token.to(input_ids_ptr.dtype.element_ty), mask=real)
    if HAS_SAMPLE_POSITIONS:
        key = tl.load(sample_positions_ptr + safe_r, mask=real, other=0)
        tl.store(sample_positions_ptr + safe_r, key + 1, mask=real)


@triton.jit
def _copy_hidden_rows(rows, num_reqs, hidden_ptr, hidden_stride, next_hidden_ptr, next_hidden_stride, hidden_size,
                      BLOCK_H: tl.constexpr):
    real = rows < num_reqs
    rows = tl.where(real, rows, 0).to(tl.int64)[:, None]
    for h in range(0, hidden_size, BLOCK_H):
        columns = h + tl.arange(0, BLOCK_H)[None, :]
        copied = real[:, None] & (columns < hidden_size)
        value = tl.load(hidden_ptr + tl.where(copied, rows * hidden_stride + columns, 0), mask=copied, other=0)
        tl.store(next_hidden_ptr + tl.where(copied, rows * next_hidden_stride + columns, 0), value, mask=copied)


@triton.jit
def _advance_draft_step_kernel(
    positions_ptr, seq_lens_ptr, token_indices_ptr, num_rejected_ptr, idx_mapping_ptr, out_positions_ptr,
    query_start_loc_ptr, num_reqs, num_positions, max_model_len, positions_end, seq_lens_end, query_start_loc_end,
    end,
    target_seq_lens_ptr, input_ids_ptr, draft_tokens_ptr, draft_tokens_stride, draft_columns, sampled_ptr,
    draft_step_ptr, num_draft_steps, sample_positions_ptr, hidden_ptr, hidden_stride, next_hidden_ptr,
    next_hidden_stride, hidden_size, max_model_len_ptr,
    t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
    t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
    t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
    t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
    NUM_GROUPS: tl.constexpr, CLAMP: tl.constexpr, HAS_TOKEN_INDICES: tl.constexpr, HAS_REJECTED: tl.constexpr,
    HAS_IDX_MAPPING: tl.constexpr, HAS_QUERY_START_LOC: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr,
    WRITE_STEP: tl.constexpr, HAS_TARGET_SEQ_LENS: tl.constexpr, HAS_INPUT_IDS: tl.constexpr,
    HAS_SAMPLED: tl.constexpr, HAS_STEP: tl.constexpr, HAS_SAMPLE_POSITIONS: tl.constexpr, HAS_HIDDEN: tl.constexpr,
    MAX_LEN_ON_DEVICE: tl.constexpr, BLOCK: tl.constexpr, HIDDEN_ROWS: tl.constexpr, BLOCK_H: tl.constexpr,
):
    pid = tl.program_id(0)
    if MAX_LEN_ON_DEVICE:
        # Read here, never on the host (a captured graph reads it at each replay); a value below
        # 1, which the host op rejects, is taken as 1 so every position stays >= 0.
        max_model_len = tl.maximum(tl.load(max_model_len_ptr).to(tl.int64), 1)
    num_progs = tl.num_programs(0)
    num_tiles = tl.cdiv(end, BLOCK)
    hidden_tiles = tl.cdiv(num_reqs, HIDDEN_ROWS)
    if HAS_STEP:
        step = tl.load(draft_step_ptr).to(tl.int64)
        # The last draft step: no request advances (empty loops, not an early return).
        last = (num_draft_steps >= 0) & (step >= num_draft_steps - 1)
        num_tiles = tl.where(last, 0, num_tiles)
        hidden_tiles = tl.where(last, 0, hidden_tiles)
    else:
        step = tl.full((), 0, tl.int64)
    if HAS_SAMPLED and WRITE_STEP:
        for tile in range(pid, tl.cdiv(num_reqs, BLOCK), num_progs):
            r = tile * BLOCK + tl.arange(0, BLOCK)
            real = r < num_reqs
            token = tl.load(sampled_ptr + tl.where(real, r, 0), mask=real, other=0)
            stored = real & _in_columns(r, step, draft_columns)
            tl.store(draft_tokens_ptr + tl.where(stored, r.to(tl.int64) * draft_tokens_stride + step, 0),
                     token.to(draft_tokens_ptr.dtype.element_ty), mask=stored)
    for tile in range(pid, num_tiles, num_progs):
        r = tile * BLOCK + tl.arange(0, BLOCK)
        real = r < num_reqs
        safe_r = tl.where(real, r, 0)
        if HAS_TOKEN_INDICES:
            index = tl.load(token_indices_ptr + safe_r, mask=real, other=0).to(tl.int64)
            ok = real & (index >= 0) & (index < num_positions)
            current = tl.load(positions_ptr + tl.where(ok, index, 0), mask=ok, other=-1).to(tl.int64)
        else:
            ok = real
            current = tl.load(positions_ptr + safe_r, mask=real, other=-1).to(tl.int64)
        # p = current + 1 >= max_model_len, tested on current: at current = 2^63 - 1 the sum
        # wraps to -2^63, which the rules (docs/step_bookkeeping.md, "advance_draft_step"; reset:
        # 0, clamp: L - 1) never give.
        over = ok & (current >= max_model_len - 1)
        p = tl.where(ok & (over == 0), current + 1, 0)
        if HAS_TARGET_SEQ_LENS:
            base = tl.load(target_seq_lens_ptr + safe_r, mask=real, other=0).to(tl.int64)
        else:
            base = tl.load(seq_lens_ptr + safe_r, mask=real, other=0).to(tl.int64)
        if HAS_REJECTED:
            base = base - tl.load(num_rejected_ptr + safe_r, mask=real, other=0)
        if CLAMP:
            position = tl.where(over, max_model_len - 1, p)
            seq_len = tl.minimum(base + 1, max_model_len)
            mapped = ok
        else:
            position = tl.where(over, 0, p)
            seq_len = tl.minimum(tl.where(over, 1, base + 1), max_model_len)
            mapped = ok & (over == 0)
        if HAS_IDX_MAPPING:
            # int64 index: a form --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md)
            row = tl.load(idx_mapping_ptr + safe_r.to(tl.int64), mask=real, other=-1).to(tl.int64)
        else:
            row = r.to(tl.int64)
        _group_slots(t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
                     t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
                     t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
                     t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
                     r, row, position, mapped, NUM_GROUPS, HAS_NUM_BLOCKS)
        if WRITE_STEP:
            _draft_inputs(safe_r, real, step, draft_columns, input_ids_ptr, draft_tokens_ptr, draft_tokens_stride,
                          sampled_ptr, sample_positions_ptr, HAS_INPUT_IDS, HAS_SAMPLED, HAS_SAMPLE_POSITIONS)
            at_position = r < positions_end
            tl.store(out_positions_ptr + tl.where(at_position, r, 0),
                     tl.where(real, position, 0).to(out_positions_ptr.dtype.element_ty), mask=at_position)
            at_seq_len = r < seq_lens_end
            tl.store(seq_lens_ptr + tl.where(at_seq_len, r, 0), tl.where(real, seq_len, 0).to(tl.int32),
                     mask=at_seq_len)
            if HAS_QUERY_START_LOC:
                at_offset = r < query_start_loc_end
                tl.store(query_start_loc_ptr + tl.where(at_offset, r, 0), tl.minimum(r, num_reqs), mask=at_offset)
    if HAS_HIDDEN and WRITE_STEP:
        # A loop of its own, on small row tiles: in the request loop its tile would share the
        # registers of every group's slot math (and spill).
        for tile in range(pid, hidden_tiles, num_progs):
            _copy_hidden_rows(tile * HIDDEN_ROWS + tl.arange(0, HIDDEN_ROWS), num_reqs, hidden_ptr, hidden_stride,
                              next_hidden_ptr, next_hidden_stride, hidden_size, BLOCK_H)


def _group_arguments(table, slot_mapping, num_blocks, layout: tuple[int, ...], slot_end: int) -> list:
    """The 13 flattened arguments of one group (see _advance_draft_step_kernel). The table and
    the counts are read unmasked at clamped offsets (slots_of_tokens), and the NPU route's
    lowered code issues masked lanes' stores too: never an empty tensor."""
    block_size, blocks_per_kv_block, world, rank, interleave, enabled = layout
    return [nonempty(table), nonempty(slot_mapping), nonempty(num_blocks), table.size(0), table.size(1),
            table.stride(0), block_size, blocks_per_kv_block, world, rank, interleave, enabled, slot_end]


def draft_group_arguments(block_tables: list[torch.Tensor], slot_mappings: list[torch.Tensor],
                          num_blocks: list[torch.Tensor], layouts: list[GroupLayout], num_tokens: int,
                          num_tokens_padded: int) -> list[list]:
    """Every group's flattened arguments from a draft op's group layouts: slots PAD in
    [num_tokens, num_tokens_padded), or to the buffer's end (-1); a group without num_blocks
    passes its table in their place."""
    groups = []
    for g, (table, out, layout) in enumerate(zip(block_tables, slot_mappings, layouts)):
        slot_end = num_tokens_padded if num_tokens_padded >= 0 else max(out.numel(), num_tokens)
        groups.append(_group_arguments(table, out, num_blocks[g] if num_blocks else table,
                                       (layout.block_size, layout.blocks_per_kv_block, *layout.cp,
                                        int(layout.enabled)), slot_end))
    return groups


def launch_chunks(groups: list[list], stand_in: Callable[[], list]):
    """The launches of a draft op: (groups, NUM_GROUPS, last, flat arguments) for the groups
    past the first MAX_GROUPS first (slots only, while the step's inputs are still unwritten),
    then the first MAX_GROUPS, the last launch. Unused groups repeat the first one's arguments
    (never read: NUM_GROUPS stops them); no group at all: `stand_in()`, a disabled group whose
    slot_end 0 masks every store (made only then: a step with groups allocates nothing)."""
    chunks = [groups[i:i + MAX_GROUPS] for i in range(MAX_GROUPS, len(groups), MAX_GROUPS)] + [groups[:MAX_GROUPS]]
    for index, chunk in enumerate(chunks):
        flat = [argument for group in chunk for argument in group]
        flat += (chunk[0] if chunk else stand_in()) * (MAX_GROUPS - len(chunk))
        yield chunk, max(len(chunk), 1), index == len(chunks) - 1, flat


def _draft_input_arguments(stand_in: torch.Tensor, target_seq_lens, input_ids, draft_tokens, sampled_tokens,
                           draft_step, num_draft_steps: int, sample_positions, hidden_states,
                           next_hidden_states) -> list:
    """The token bookkeeping's 14 arguments (see _advance_draft_step_kernel); `stand_in` (an
    int32 tensor of the call) takes the place of each tensor not given, never read."""
    def given(tensor):
        return nonempty(tensor if tensor is not None else stand_in)

    columns = draft_tokens.size(1) if draft_tokens is not None else 0
    tokens_stride = draft_tokens.stride(0) if draft_tokens is not None else 0
    hidden = (hidden_states.size(1), hidden_states.stride(0), next_hidden_states.stride(0)) if (
        hidden_states is not None) else (0, 0, 0)
    return [given(target_seq_lens), given(input_ids), given(draft_tokens), tokens_stride, columns,
            given(sampled_tokens), given(draft_step), num_draft_steps, given(sample_positions), given(hidden_states),
            hidden[1], given(next_hidden_states), hidden[2], hidden[0]]


def advance_draft_step(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    rule = a.past_max_model_len
    # The kernel reads max_model_len_tensor when given (max_model_len is -1 then).
    max_model_len = 1 if a.max_model_len_tensor is not None else a.max_model_len
    num_reqs = a.token_indices.numel() if a.token_indices is not None else a.positions.numel()
    positions_end = a.out_positions.numel()
    if positions_end > num_reqs and a.num_tokens_padded >= 0:
        positions_end = a.num_tokens_padded
    seq_lens_end = a.seq_lens.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded
    query_start_loc_end = 0
    if a.query_start_loc is not None:
        query_start_loc_end = a.query_start_loc.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded + 1
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    groups = draft_group_arguments(a.block_tables, a.slot_mappings, a.num_blocks, layouts, num_reqs,
                                   a.num_tokens_padded)
    step_end = max(positions_end, seq_lens_end, query_start_loc_end, num_reqs)
    common = dict(CLAMP=rule == 1, HAS_TOKEN_INDICES=a.token_indices is not None,
                  HAS_REJECTED=a.num_rejected_tokens is not None, HAS_IDX_MAPPING=a.idx_mapping is not None,
                  HAS_QUERY_START_LOC=a.query_start_loc is not None, HAS_NUM_BLOCKS=bool(a.num_blocks),
                  HAS_TARGET_SEQ_LENS=a.target_seq_lens is not None, HAS_INPUT_IDS=a.input_ids is not None,
                  HAS_SAMPLED=a.sampled_tokens is not None, HAS_STEP=a.draft_step is not None,
                  HAS_SAMPLE_POSITIONS=a.sample_positions is not None, HAS_HIDDEN=a.hidden_states is not None,
                  MAX_LEN_ON_DEVICE=a.max_model_len_tensor is not None, BLOCK=BLOCK, HIDDEN_ROWS=HIDDEN_ROWS,
                  BLOCK_H=BLOCK_H)
    inputs = _draft_input_arguments(a.seq_lens, a.target_seq_lens, a.input_ids, a.draft_tokens, a.sampled_tokens,
                                    a.draft_step, a.num_draft_steps, a.sample_positions, a.hidden_states,
                                    a.next_hidden_states)
    inputs.append(nonempty(a.max_model_len_tensor if a.max_model_len_tensor is not None else a.seq_lens))
    # Groups past the first MAX_GROUPS first, while positions and seq_lens still hold the inputs.
    def stand_in() -> list:
        return _group_arguments(a.seq_lens.new_empty((0, 0)), a.seq_lens, a.seq_lens, (1, 1, 1, 0, 1, 0), 0)

    for chunk, num_groups, write_step, flat in launch_chunks(groups, stand_in):
        end = max([step_end if write_step else num_reqs] + [group[-1] for group in chunk])
        if end == 0:
            continue
        grid = (num_programs(a.seq_lens.device, triton.cdiv(end, BLOCK)),)
        # Masked lanes access offset 0 on the NPU route, also of a tensor with no element (a step
        # of no requests): each empty one goes as a placeholder element (its stand-ins too).
        _advance_draft_step_kernel[grid](
            nonempty(a.positions), nonempty(a.seq_lens),
            nonempty(a.token_indices if a.token_indices is not None else a.positions),
            nonempty(a.num_rejected_tokens if a.num_rejected_tokens is not None else a.seq_lens),
            nonempty(a.idx_mapping if a.idx_mapping is not None else a.seq_lens), nonempty(a.out_positions),
            nonempty(a.query_start_loc if a.query_start_loc is not None else a.seq_lens),
            num_reqs, a.positions.numel(), max_model_len, positions_end, seq_lens_end, query_start_loc_end, end,
            *inputs, *flat, NUM_GROUPS=num_groups, WRITE_STEP=write_step, **common,
        )
