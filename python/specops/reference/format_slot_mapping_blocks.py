"""Reference for format_slot_mapping_blocks (docs/context_parallel.md)."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID


def format_slot_mapping_blocks(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_slots = a.slot_mapping.numel()
    slots = a.slot_mapping.long()
    # torch's // and % on integers are floor division and floor modulo, as the op defines them.
    a.out[:num_slots, 0] = (slots // a.block_size).to(a.out.dtype)
    a.out[:num_slots, 1] = (slots % a.block_size).to(a.out.dtype)
    a.out[num_slots:, 0] = PAD_SLOT_ID // a.block_size
    a.out[num_slots:, 1] = PAD_SLOT_ID % a.block_size
