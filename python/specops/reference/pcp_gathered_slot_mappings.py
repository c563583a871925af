"""Reference for pcp_gathered_slot_mappings: the KV slots of the PCP-gathered stream, per group."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID


def pcp_gathered_slot_mappings(
    slot_mappings: list[torch.Tensor],
    padded_gather_idx: torch.Tensor,
    gathered_kv_write_mask: torch.Tensor,
    out: list[torch.Tensor],
    num_tokens_padded: int,
) -> None:
    index = padded_gather_idx.long()
    results = []
    for slots in slot_mappings:
        valid = gathered_kv_write_mask & (index >= 0) & (index < slots.numel())
        gathered = torch.full(index.shape, PAD_SLOT_ID, dtype=slots.dtype, device=slots.device)
        gathered[valid] = slots[index[valid]]
        results.append(gathered)
    for buffer, gathered in zip(out, results):
        end = num_tokens_padded if num_tokens_padded >= 0 else buffer.numel()
        buffer[: gathered.numel()] = gathered
        buffer[gathered.numel():end] = PAD_SLOT_ID
