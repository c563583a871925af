"""Reference for format_slot_mapping_blocks_multi: every group formatted on its own."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID


def format_slot_mapping_blocks_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    for slot_mapping, block_size, pairs in zip(a.slot_mappings, a.block_sizes, a.out):
        slots = slot_mapping[:a.num_slots].long()
        # torch's // and % on integers are floor division and floor modulo: PAD -> (-1, block_size - 1).
        pairs[:a.num_slots, 0] = (slots // block_size).to(pairs.dtype)
        pairs[:a.num_slots, 1] = (slots % block_size).to(pairs.dtype)
        pairs[a.num_slots:, 0] = PAD_SLOT_ID // block_size
        pairs[a.num_slots:, 1] = PAD_SLOT_ID % block_size
