"""pcp_gathered_slot_mappings: every KV-cache group's slots of the PCP-gathered stream, in one
launch (docs/pcp.md)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.ops._checks import check_no_overlap, check_tensor, checked_size
from specops.ops._op import SpecOp
from specops.reference.pcp_gathered_slot_mappings import pcp_gathered_slot_mappings as _reference


def _check(slot_mappings: Sequence[torch.Tensor], padded_gather_idx: torch.Tensor,
           gathered_kv_write_mask: torch.Tensor, out: Sequence[torch.Tensor], num_tokens_padded: int) -> None:
    """Mirrors csrc/cpu/pcp_gathered_slot_mappings.cpp (metadata only)."""
    check_tensor(padded_gather_idx, "padded_gather_idx", [torch.int64], 1)
    device = padded_gather_idx.device
    check_tensor(gathered_kv_write_mask, "gathered_kv_write_mask", [torch.bool], 1, device, "padded_gather_idx")
    num_gathered = padded_gather_idx.numel()
    if gathered_kv_write_mask.numel() != num_gathered:
        raise ValueError(f"gathered_kv_write_mask must have as many entries as padded_gather_idx ({num_gathered}), "
                         f"got {gathered_kv_write_mask.numel()}")
    if len(out) != len(slot_mappings):
        raise ValueError(f"out must have one buffer per tensor of slot_mappings ({len(slot_mappings)}), got {len(out)}")
    if num_tokens_padded < -1:
        raise ValueError(f"num_tokens_padded must be >= 0 (or None), got {num_tokens_padded}")
    for g, (slots, target) in enumerate(zip(slot_mappings, out)):
        check_tensor(slots, f"slot_mappings[{g}]", [torch.int64, torch.int32], 1, device, "padded_gather_idx")
        check_tensor(target, f"out[{g}]", [torch.int64, torch.int32], 1, device, "padded_gather_idx")
        if target.dtype != slots.dtype:
            raise ValueError(f"out[{g}] must have the dtype of slot_mappings[{g}] "
                             f"({str(slots.dtype).removeprefix('torch.')}), got {str(target.dtype).removeprefix('torch.')}")
        if target.numel() < num_gathered:
            raise ValueError(f"out[{g}] must have at least P L = padded_gather_idx.numel() = {num_gathered} entries, "
                             f"got {target.numel()}")
        if num_tokens_padded >= 0 and not num_gathered <= num_tokens_padded <= target.numel():
            raise ValueError(f"num_tokens_padded must be in [P L = padded_gather_idx.numel() = {num_gathered}, "
                             f"out[{g}].numel() = {target.numel()}], got {num_tokens_padded}")
    inputs = [(padded_gather_idx, "padded_gather_idx"), (gathered_kv_write_mask, "gathered_kv_write_mask")]
    inputs += [(slots, f"slot_mappings[{g}]") for g, slots in enumerate(slot_mappings)]
    for g, target in enumerate(out):
        for earlier in range(g):
            check_no_overlap(target, f"out[{g}]", out[earlier], f"out[{earlier}]")
        for tensor, name in inputs:
            check_no_overlap(target, f"out[{g}]", tensor, name)


_OP = SpecOp("pcp_gathered_slot_mappings", _check, _reference)


def pcp_gathered_slot_mappings(
    slot_mappings: Sequence[torch.Tensor] | torch.Tensor,
    padded_gather_idx: torch.Tensor,
    gathered_kv_write_mask: torch.Tensor,
    *,
    out: Sequence[torch.Tensor] | torch.Tensor | None = None,
    num_tokens_padded: int | None = None,
) -> list[torch.Tensor]:
    """The KV slots of the gathered stream, every group in one launch:
    out[g][j] = slot_mappings[g][padded_gather_idx[j]] where gathered_kv_write_mask[j], else
    PAD_SLOT_ID, for j < P L; PAD in [P L, num_tokens_padded) (default: each buffer's end).

    slot_mappings: the global batch's slot mapping of every KV-cache group (int64 or int32,
    DCP sharding included), a list of 1-D tensors or a 2-D [G, >= T] tensor; padded_gather_idx
    int64 [P L] and gathered_kv_write_mask bool [P L] (PCPLayout.copy_to); out: one buffer per
    group of the group's dtype, [>= P L] (a list, or a 2-D tensor), allocated [P L] when absent.
    The native CPU op rejects a masked-in index outside a slot mapping; device kernels write PAD
    there. Returns out as a list.
    """
    if num_tokens_padded is not None:
        # Checked before it sizes an output (-1 is the schema's "None").
        num_tokens_padded = checked_size(num_tokens_padded, "num_tokens_padded", 0, "0 (or None)")
    if isinstance(slot_mappings, torch.Tensor):
        slot_mappings = list(slot_mappings.unbind(0)) if slot_mappings.dim() == 2 else [slot_mappings]
    elif not isinstance(slot_mappings, list):
        slot_mappings = list(slot_mappings)
    if out is None:
        size = padded_gather_idx.numel() if num_tokens_padded is None else num_tokens_padded
        out = [torch.empty(size, dtype=t.dtype, device=t.device) for t in slot_mappings]
    elif isinstance(out, torch.Tensor):
        out = list(out.unbind(0)) if out.dim() == 2 else [out]
    elif not isinstance(out, list):
        out = list(out)
    _OP.select()(slot_mappings, padded_gather_idx, gathered_kv_write_mask, out,
                 -1 if num_tokens_padded is None else num_tokens_padded)
    return out
