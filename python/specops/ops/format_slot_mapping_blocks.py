"""format_slot_mapping_blocks: slot ids as (block, offset) pairs (docs/context_parallel.md)."""

from __future__ import annotations

import torch

from specops.arguments import check_allocated_elements
from specops.ops._op import SpecOp
from specops.reference.format_slot_mapping_blocks import format_slot_mapping_blocks as _reference

__all__ = ["format_slot_mapping_blocks"]



_OP = SpecOp("format_slot_mapping_blocks", _reference)


def format_slot_mapping_blocks(
    slot_mapping: torch.Tensor, block_size: int, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """out[i] = (slot // block_size, slot % block_size) with floor semantics: PAD_SLOT_ID
    becomes (-1, block_size - 1).

    slot_mapping: int64 or int32 [N]; out: int64 or int32 [>= N, 2] (allocated [N, 2] with
    slot_mapping's dtype when absent); rows past N get the pair of PAD_SLOT_ID.
    """
    if out is None and isinstance(slot_mapping, torch.Tensor):  # else the op names slot_mapping
        check_allocated_elements(slot_mapping.numel(), 2, "slot_mapping", "slot_mapping.numel() pairs")
        out = torch.empty((slot_mapping.numel(), 2), dtype=slot_mapping.dtype, device=slot_mapping.device)
    _OP.select()(slot_mapping, block_size, out)
    return out
