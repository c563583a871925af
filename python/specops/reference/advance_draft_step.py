"""Reference for advance_draft_step: a draft step's positions, seq_lens, every group's slots and
the step's token bookkeeping."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts
from specops.slot_math import kv_placement

INT32_MAX = 2**31 - 1


def draft_slots(table: torch.Tensor, counts: torch.Tensor | None, row: torch.Tensor, position: torch.Tensor,
                mapped: torch.Tensor, block_size: int, blocks_per_kv_block: int, world: int, rank: int,
                interleave: int) -> torch.Tensor:
    """int64 slot of (row, position) per request; PAD where it has none."""
    rows, cols = table.shape
    valid = mapped & (row >= 0) & (row < rows) & (position >= 0) & (position <= INT32_MAX)
    safe_position = position.where(valid, 0)
    safe_row = row.where(valid, 0)
    kv_block = block_size * blocks_per_kv_block
    is_local, virtual_block, local_offset = kv_placement(safe_position, kv_block, world, rank, interleave)
    column = virtual_block * blocks_per_kv_block + local_offset // block_size
    usable = torch.full_like(row, cols)
    if counts is not None and counts.numel():
        usable = counts.long()[safe_row].clamp(min=0).clamp(max=cols)
    valid = valid & is_local & (column < usable)
    block_id = table.long()[safe_row, column.where(valid, 0)] if table.numel() else torch.full_like(row, -1)
    valid = valid & (block_id >= 0)
    return (block_id * block_size + local_offset % block_size).where(valid, PAD_SLOT_ID)


def advance_draft_step(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    rule = a.past_max_model_len
    # Read as a tensor when max_model_len_tensor gives it, as the device kernel reads it (a value
    # below 1 taken as 1).
    max_model_len = a.max_model_len if a.max_model_len_tensor is None else a.max_model_len_tensor.long().clamp(min=1)
    num_reqs = a.token_indices.numel() if a.token_indices is not None else a.positions.numel()
    step = int(a.draft_step) if a.draft_step is not None else 0
    in_columns = a.draft_tokens is not None and 0 <= step < a.draft_tokens.size(1)
    if a.sampled_tokens is not None and in_columns:
        a.draft_tokens[:num_reqs, step] = a.sampled_tokens.to(a.draft_tokens.dtype)
    if a.num_draft_steps >= 0 and step >= a.num_draft_steps - 1:
        return  # the last draft step: only the sampled tokens' store
    if a.input_ids is not None:
        tokens = a.sampled_tokens if a.sampled_tokens is not None else (
            a.draft_tokens[:num_reqs, step] if in_columns else torch.zeros(num_reqs, dtype=torch.int64))
        a.input_ids[:num_reqs] = tokens.to(a.input_ids.dtype)
    if a.sample_positions is not None:
        a.sample_positions[:num_reqs] += 1
    if a.hidden_states is not None:
        a.next_hidden_states[:num_reqs] = a.hidden_states[:num_reqs]
    if a.token_indices is not None:
        num_reqs = a.token_indices.numel()
        index = a.token_indices.long()
        ok = (index >= 0) & (index < a.positions.numel())
        current = a.positions.long()[index.where(ok, 0)] if a.positions.numel() else torch.zeros_like(index)
    else:
        num_reqs = a.positions.numel()
        ok = torch.ones(num_reqs, dtype=torch.bool)
        current = a.positions.long()
    # p = current + 1 >= max_model_len, tested on current: at current = 2^63 - 1 the sum wraps to
    # -2^63, which the rules (docs/step_bookkeeping.md, "advance_draft_step"; reset: 0, clamp:
    # L - 1) never give.
    over = ok & (current >= max_model_len - 1)
    p = (current + 1).where(ok & ~over, 0)
    base = (a.target_seq_lens if a.target_seq_lens is not None else a.seq_lens[:num_reqs]).long()
    if a.num_rejected_tokens is not None:
        base = base - a.num_rejected_tokens.long()
    if rule == 1:
        position = p.where(~over, max_model_len - 1)
        seq_len = (base + 1).clamp(max=max_model_len)
        mapped = ok
    else:
        position = p.where(~over, 0)
        seq_len = (base + 1).where(~over, 1).clamp(max=max_model_len)
        mapped = ok & ~over
    row = a.idx_mapping.long() if a.idx_mapping is not None else torch.arange(num_reqs)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled, a.cp_world_size,
                            a.cp_rank, a.cp_interleave)
    for g, (table, out, layout) in enumerate(zip(a.block_tables, a.slot_mappings, layouts)):
        slots = draft_slots(table, a.num_blocks[g] if a.num_blocks else None, row, position, mapped & layout.enabled,
                       layout.block_size, layout.blocks_per_kv_block, *layout.cp)
        if out.dtype == torch.int32:
            slots = slots.where(slots <= INT32_MAX, PAD_SLOT_ID)
        out[:num_reqs] = slots.to(out.dtype)
        out[num_reqs:a.num_tokens_padded if a.num_tokens_padded >= 0 else out.numel()] = PAD_SLOT_ID
    a.out_positions[:num_reqs] = position.to(a.out_positions.dtype)
    positions_end = a.out_positions.numel()
    if positions_end > num_reqs and a.num_tokens_padded >= 0:
        positions_end = a.num_tokens_padded
    a.out_positions[num_reqs:positions_end] = 0
    a.seq_lens[:num_reqs] = seq_len.to(torch.int32)
    a.seq_lens[num_reqs:a.seq_lens.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded] = 0
    if a.query_start_loc is not None:
        end = a.query_start_loc.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded + 1
        a.query_start_loc[:end] = torch.arange(end).clamp(max=num_reqs).to(torch.int32)
