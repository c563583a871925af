"""Reference for tree_slot_mappings: every draft-tree token's KV slot in every KV-cache group."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts
from specops.reference.advance_draft_step import INT32_MAX, draft_slots


def tree_positions(verified_seq_len: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """verified_seq_len[r] + offsets[r, k] as int64 [R, K]; -1 (no position) where the base is
    negative or past 2^31 - 1 (past every table: the sum, which could wrap, is not used)."""
    base = verified_seq_len.long()[:, None]
    ok = (base >= 0) & (base <= INT32_MAX)
    return (base.where(ok, 0) + offsets).where(ok, -1)


def tree_slot_mappings(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    draft_token_num = a.draft_token_num
    num_reqs = a.verified_seq_len.numel()
    device = a.verified_seq_len.device
    num_tokens = num_reqs * draft_token_num
    offsets = torch.arange(draft_token_num, device=device).expand(num_reqs, draft_token_num)
    position = tree_positions(a.verified_seq_len, offsets).reshape(-1)
    rows = a.idx_mapping.long() if a.idx_mapping is not None else torch.arange(num_reqs, device=device)
    row = rows.repeat_interleave(draft_token_num)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    for g, (table, out, layout) in enumerate(zip(a.block_tables, a.slot_mappings, layouts)):
        slots = draft_slots(table, a.num_blocks[g] if a.num_blocks else None, row, position,
                            (position >= 0) & layout.enabled, layout.block_size, layout.blocks_per_kv_block,
                            *layout.cp)
        if out.dtype == torch.int32:
            slots = slots.where(slots <= INT32_MAX, PAD_SLOT_ID)
        out[:num_tokens] = slots.to(out.dtype)
        out[num_tokens:a.num_tokens_padded if a.num_tokens_padded >= 0 else out.numel()] = PAD_SLOT_ID
