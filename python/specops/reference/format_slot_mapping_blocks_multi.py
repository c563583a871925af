"""Reference for format_slot_mapping_blocks_multi: every group formatted on its own."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID


def format_slot_mapping_blocks_multi(slot_mappings: list[torch.Tensor], block_sizes: list[int], num_slots: int,
                                     out: list[torch.Tensor]) -> None:
    for slot_mapping, block_size, pairs in zip(slot_mappings, block_sizes, out):
        slots = slot_mapping[:num_slots].long()
        # torch's // and % on integers are floor division and floor modulo: PAD -> (-1, block_size - 1).
        pairs[:num_slots, 0] = (slots // block_size).to(pairs.dtype)
        pairs[:num_slots, 1] = (slots % block_size).to(pairs.dtype)
        pairs[num_slots:, 0] = PAD_SLOT_ID // block_size
        pairs[num_slots:, 1] = PAD_SLOT_ID % block_size
