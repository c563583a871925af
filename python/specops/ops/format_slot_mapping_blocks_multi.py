"""format_slot_mapping_blocks_multi: every KV-cache group's slot mapping as (block, offset) pairs,
in one op call (one launch on a device)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.arguments import check_allocated_elements, checked_size, checked_tensor_list, ints_per_group
from specops.ops._op import SpecOp
from specops.reference.format_slot_mapping_blocks_multi import format_slot_mapping_blocks_multi as _reference

__all__ = ["format_slot_mapping_blocks_multi"]


_OP = SpecOp("format_slot_mapping_blocks_multi", _reference)


def format_slot_mapping_blocks_multi(
    slot_mappings: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    *,
    num_slots: int | None = None,
    out: Sequence[torch.Tensor] | None = None,
) -> list[torch.Tensor]:
    """format_slot_mapping_blocks of every group in one call: out[g][i] =
    (slot // block_sizes[g], slot % block_sizes[g]) for slot = slot_mappings[g][i], i < num_slots,
    with floor semantics (PAD_SLOT_ID becomes (-1, block_sizes[g] - 1)); rows of out[g] past
    num_slots get the pair of PAD_SLOT_ID.

    slot_mappings: int64 or int32 [>= num_slots] per group (longer persistent buffers are read up
    to num_slots); block_sizes: one per group, or one int for all; num_slots: defaults to the
    slot mappings' length when they all have the same; out: int64 or int32 [>= num_slots, 2] per
    group, no two sharing memory (allocated [num_slots, 2] with each slot mapping's dtype when
    absent). Returns out as a list.
    """
    slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    num_groups = len(slot_mappings)
    block_sizes = ints_per_group(block_sizes, num_groups, "block_sizes")
    if num_slots is None:
        lengths = {t.numel() for t in slot_mappings}
        if len(lengths) > 1:
            raise ValueError(f"num_slots must be given when the slot mappings differ in length, got {sorted(lengths)}")
        num_slots = lengths.pop() if lengths else 0
    if out is None:
        # Sized from num_slots: checked first (the op reads num_slots entries of each mapping).
        num_slots = checked_size(num_slots, "num_slots", 0)
        check_allocated_elements(num_slots, 2, "num_slots", "num_slots pairs")
        out = [torch.empty((num_slots, 2), dtype=t.dtype, device=t.device) for t in slot_mappings]
    out = checked_tensor_list(out, "out")
    if not slot_mappings:
        # Nothing to format, and no tensor for the dispatcher to pick a kernel by: only checked.
        _OP.check(slot_mappings=slot_mappings, block_sizes=block_sizes, num_slots=num_slots, out=out)
        return out
    _OP.select()(slot_mappings, block_sizes, num_slots, out)
    return out
