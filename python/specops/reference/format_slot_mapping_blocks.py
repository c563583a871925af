"""Reference for format_slot_mapping_blocks (docs/context_parallel.md)."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID


def format_slot_mapping_blocks(slot_mapping: torch.Tensor, block_size: int, out: torch.Tensor) -> None:
    num_slots = slot_mapping.numel()
    slots = slot_mapping.long()
    # torch's // and % on integers are floor division and floor modulo, as the op defines them.
    out[:num_slots, 0] = (slots // block_size).to(out.dtype)
    out[:num_slots, 1] = (slots % block_size).to(out.dtype)
    out[num_slots:, 0] = PAD_SLOT_ID // block_size
    out[num_slots:, 1] = PAD_SLOT_ID % block_size
