"""format_slot_mapping_blocks_multi: every KV-cache group's slot mapping as (block, offset) pairs,
in one op call (one launch on a device)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.ops._checks import (
    check_allocated_elements,
    check_int32_range,
    check_no_overlap,
    check_non_negative,
    check_rows_disjoint,
    check_tensor,
    checked_size,
    checked_tensor_list,
    ints_per_group,
)
from specops.ops._op import SpecOp
from specops.reference.format_slot_mapping_blocks_multi import format_slot_mapping_blocks_multi as _reference


def _check(slot_mappings: Sequence[torch.Tensor], block_sizes: Sequence[int], num_slots: int,
           out: Sequence[torch.Tensor]) -> None:
    """Mirrors csrc/cpu/format_slot_mapping_blocks_multi.cpp (metadata only)."""
    num_groups = len(slot_mappings)
    if len(block_sizes) != num_groups:
        raise ValueError(f"block_sizes must have one entry per slot mapping (len(slot_mappings) = {num_groups}), "
                         f"got {len(block_sizes)}")
    if len(out) != num_groups:
        raise ValueError(f"out must have one tensor per slot mapping (len(slot_mappings) = {num_groups}), "
                         f"got {len(out)}")
    check_non_negative(num_slots, "num_slots")
    device = out[0].device if num_groups and isinstance(out[0], torch.Tensor) else None
    for g in range(num_groups):
        target = out[g]
        check_tensor(target, f"out[{g}]", [torch.int64, torch.int32], 2, device, "out[0]")
        check_rows_disjoint(target, f"out[{g}]")
        check_tensor(slot_mappings[g], f"slot_mappings[{g}]", [torch.int64, torch.int32], 1, device, "out[0]")
        if slot_mappings[g].numel() < num_slots:
            raise ValueError(f"slot_mappings[{g}] must have at least num_slots = {num_slots} entries, "
                             f"got {slot_mappings[g].numel()}")
        check_int32_range(block_sizes[g], f"block_sizes[{g}]", 1)
        if target.size(1) != 2 or target.size(0) < num_slots:
            raise ValueError(f"out[{g}] must have shape [>= num_slots = {num_slots}, 2], got {list(target.shape)}")
        for earlier in range(g):
            check_no_overlap(target, f"out[{g}]", out[earlier], f"out[{earlier}]")
    # Every slot mapping is read while outputs are written.
    for g in range(num_groups):
        for source in range(num_groups):
            check_no_overlap(out[g], f"out[{g}]", slot_mappings[source], f"slot_mappings[{source}]")


_OP = SpecOp("format_slot_mapping_blocks_multi", _check, _reference)


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
        for g, mapping in enumerate(slot_mappings):
            if mapping.numel() < num_slots:
                raise ValueError(f"slot_mappings[{g}] must have at least num_slots = {num_slots} entries, "
                                 f"got {mapping.numel()}")
        out = [torch.empty((num_slots, 2), dtype=t.dtype, device=t.device) for t in slot_mappings]
    out = checked_tensor_list(out, "out")
    if not slot_mappings:
        # Nothing to format, and no tensor for the dispatcher to pick a kernel by.
        _check(slot_mappings, block_sizes, num_slots, out)
        return out
    _OP.select()(slot_mappings, block_sizes, num_slots, out)
    return out
