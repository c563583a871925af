"""pcp_gathered_slot_mappings: every KV-cache group's slots of the PCP-gathered stream, in one
launch (docs/pcp.md)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.arguments import checked_size
from specops.ops._op import SpecOp
from specops.reference.pcp_gathered_slot_mappings import pcp_gathered_slot_mappings as _reference

__all__ = ["pcp_gathered_slot_mappings"]


_OP = SpecOp("pcp_gathered_slot_mappings", _reference)


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
    num_tokens_padded = -1 if num_tokens_padded is None else num_tokens_padded
    _OP.select()(slot_mappings, padded_gather_idx, gathered_kv_write_mask, out, num_tokens_padded)
    return out
