"""Reference for pcp_gathered_slot_mappings: the KV slots of the PCP-gathered stream, per group."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID


def pcp_gathered_slot_mappings(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    index = a.padded_gather_idx.long()
    results = []
    for slots in a.slot_mappings:
        valid = a.gathered_kv_write_mask & (index >= 0) & (index < slots.numel())
        gathered = torch.full(index.shape, PAD_SLOT_ID, dtype=slots.dtype, device=slots.device)
        gathered[valid] = slots[index[valid]]
        results.append(gathered)
    for buffer, gathered in zip(a.out, results):
        end = a.num_tokens_padded if a.num_tokens_padded >= 0 else buffer.numel()
        buffer[: gathered.numel()] = gathered
        buffer[gathered.numel():end] = PAD_SLOT_ID
