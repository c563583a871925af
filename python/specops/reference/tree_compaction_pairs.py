"""Reference for tree_compaction_pairs: the KV moves of every accepted tree path, in every
KV-cache group, and the next step's seq_lens and accepted counts."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts
from specops.reference.advance_draft_step import INT32_MAX, draft_slots
from specops.reference.tree_slot_mappings import tree_positions


def tree_compaction_pairs(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_reqs, num_steps = a.accept_index.shape
    draft_token_num = a.draft_token_num
    device = a.accept_index.device
    # A count outside [0, S - 1] (rejected by the host op) is clamped into it, on every path.
    accepted_count = a.accept_token_num.long().clamp(0, num_steps - 1)
    j = torch.arange(num_steps, device=device).expand(num_reqs, num_steps)
    first = (torch.arange(num_reqs, device=device) * draft_token_num)[:, None]
    index = a.accept_index.long()
    # The node's tree index where it is one of its request's nodes, compared before subtracting.
    accepted = (j <= accepted_count[:, None]) & (index >= first) & (index < first + draft_token_num)
    i = (index - first).where(accepted, 0)
    source = tree_positions(a.verified_seq_len, i).where(accepted, -1).reshape(-1)
    destination = tree_positions(a.verified_seq_len, j).where(accepted, -1).reshape(-1)
    rows = a.idx_mapping.long() if a.idx_mapping is not None else torch.arange(num_reqs, device=device)
    row = rows.repeat_interleave(num_steps)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    for g, (table, layout) in enumerate(zip(a.block_tables, layouts)):
        counts = a.num_blocks[g] if a.num_blocks else None

        def slots(position: torch.Tensor) -> torch.Tensor:
            return draft_slots(table, counts, row, position, (position >= 0) & layout.enabled, layout.block_size,
                               layout.blocks_per_kv_block, *layout.cp)

        src, dst = slots(source), slots(destination)
        same = src == dst  # the same slot, or neither position stored on this rank
        for out, slot in ((a.src_slots, src), (a.dst_slots, dst)):
            slot = slot.where(~same, PAD_SLOT_ID)
            if out.dtype == torch.int32:
                slot = slot.where(slot <= INT32_MAX, PAD_SLOT_ID)
            out[g] = slot.to(out.dtype)
    if a.next_seq_lens is not None:
        a.next_seq_lens[:] = (a.verified_seq_len.long() + accepted_count + 1).to(a.next_seq_lens.dtype)
    if a.num_accepted_tokens is not None:
        a.num_accepted_tokens[:] = (accepted_count + 1).to(a.num_accepted_tokens.dtype)
