"""Reference for advance_draft_step: a draft step's positions, seq_lens, every group's slots and
the step's token bookkeeping."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts
from specops.reference._slot_math import kv_placement

INT32_MAX = 2**31 - 1


def _slots(table: torch.Tensor, counts: torch.Tensor | None, row: torch.Tensor, position: torch.Tensor,
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


def advance_draft_step(
    positions: torch.Tensor, seq_lens: torch.Tensor, block_tables: list[torch.Tensor],
    token_indices: torch.Tensor | None, num_rejected_tokens: torch.Tensor | None, idx_mapping: torch.Tensor | None,
    out_positions: torch.Tensor, slot_mappings: list[torch.Tensor], query_start_loc: torch.Tensor | None,
    num_blocks: list[torch.Tensor], max_model_len: int, past_max_model_len: int, num_tokens_padded: int,
    num_reqs_padded: int, cp_world_size: int, cp_rank: int, cp_interleave: int, block_sizes: list[int],
    blocks_per_kv_block: list[int], cp_sharded: list[bool], slot_mapping_enabled: list[bool],
    target_seq_lens: torch.Tensor | None, input_ids: torch.Tensor | None, draft_tokens: torch.Tensor | None,
    sampled_tokens: torch.Tensor | None, draft_step: torch.Tensor | None, num_draft_steps: int,
    sample_positions: torch.Tensor | None, hidden_states: torch.Tensor | None, next_hidden_states: torch.Tensor | None,
    max_model_len_tensor: torch.Tensor | None = None,
) -> None:
    rule = past_max_model_len
    if max_model_len_tensor is not None:
        # Read as a tensor, as the device kernel reads it (a value below 1 taken as 1).
        max_model_len = max_model_len_tensor.long().clamp(min=1)
    num_reqs = token_indices.numel() if token_indices is not None else positions.numel()
    step = int(draft_step) if draft_step is not None else 0
    in_columns = draft_tokens is not None and 0 <= step < draft_tokens.size(1)
    if sampled_tokens is not None and in_columns:
        draft_tokens[:num_reqs, step] = sampled_tokens.to(draft_tokens.dtype)
    if num_draft_steps >= 0 and step >= num_draft_steps - 1:
        return  # the last draft step: only the sampled tokens' store
    if input_ids is not None:
        tokens = sampled_tokens if sampled_tokens is not None else (
            draft_tokens[:num_reqs, step] if in_columns else torch.zeros(num_reqs, dtype=torch.int64))
        input_ids[:num_reqs] = tokens.to(input_ids.dtype)
    if sample_positions is not None:
        sample_positions[:num_reqs] += 1
    if hidden_states is not None:
        next_hidden_states[:num_reqs] = hidden_states[:num_reqs]
    if token_indices is not None:
        num_reqs = token_indices.numel()
        index = token_indices.long()
        ok = (index >= 0) & (index < positions.numel())
        current = positions.long()[index.where(ok, 0)] if positions.numel() else torch.zeros_like(index)
    else:
        num_reqs = positions.numel()
        ok = torch.ones(num_reqs, dtype=torch.bool)
        current = positions.long()
    # p = current + 1 >= max_model_len, tested on current: at current = 2^63 - 1 the sum wraps to
    # -2^63, which the rules (docs/step_bookkeeping.md, "advance_draft_step"; reset: 0, clamp:
    # L - 1) never give.
    over = ok & (current >= max_model_len - 1)
    p = (current + 1).where(ok & ~over, 0)
    base = (target_seq_lens if target_seq_lens is not None else seq_lens[:num_reqs]).long()
    if num_rejected_tokens is not None:
        base = base - num_rejected_tokens.long()
    if rule == 1:
        position = p.where(~over, max_model_len - 1)
        seq_len = (base + 1).clamp(max=max_model_len)
        mapped = ok
    else:
        position = p.where(~over, 0)
        seq_len = (base + 1).where(~over, 1).clamp(max=max_model_len)
        mapped = ok & ~over
    row = idx_mapping.long() if idx_mapping is not None else torch.arange(num_reqs)
    layouts = group_layouts(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, cp_world_size,
                            cp_rank, cp_interleave)
    for g, (table, out, layout) in enumerate(zip(block_tables, slot_mappings, layouts)):
        slots = _slots(table, num_blocks[g] if num_blocks else None, row, position, mapped & layout.enabled,
                       layout.block_size, layout.blocks_per_kv_block, *layout.cp)
        if out.dtype == torch.int32:
            slots = slots.where(slots <= INT32_MAX, PAD_SLOT_ID)
        out[:num_reqs] = slots.to(out.dtype)
        out[num_reqs:num_tokens_padded if num_tokens_padded >= 0 else out.numel()] = PAD_SLOT_ID
    out_positions[:num_reqs] = position.to(out_positions.dtype)
    positions_end = out_positions.numel()
    if positions_end > num_reqs and num_tokens_padded >= 0:
        positions_end = num_tokens_padded
    out_positions[num_reqs:positions_end] = 0
    seq_lens[:num_reqs] = seq_len.to(torch.int32)
    seq_lens[num_reqs:seq_lens.numel() if num_reqs_padded < 0 else num_reqs_padded] = 0
    if query_start_loc is not None:
        end = query_start_loc.numel() if num_reqs_padded < 0 else num_reqs_padded + 1
        query_start_loc[:end] = torch.arange(end).clamp(max=num_reqs).to(torch.int32)
