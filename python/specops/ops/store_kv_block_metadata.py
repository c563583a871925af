"""store_kv_block_metadata: the groups of vllm-ascend's store_kv_block, word for word what its
AI-CPU kernel `store_kv_block_metadata` writes (docs/dsa_metadata_family.md), with outputs
sized for the worst case and a capacity check the kernel lacks."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.ops._op import SpecOp
from specops.reference.store_kv_block_metadata import store_kv_block_metadata as _reference

__all__ = ["StoreKvBlockGroups", "store_kv_block_metadata"]


class StoreKvBlockGroups(NamedTuple):
    """Run g: group_len[g] tokens from token group_key_idx[g] on, stored from slot
    group_key_cache_idx[g] on; zeros after the last run."""

    group_len: torch.Tensor
    group_key_idx: torch.Tensor
    group_key_cache_idx: torch.Tensor


_OP = SpecOp("store_kv_block_metadata", _reference)


def store_kv_block_metadata(
    slot_mapping: torch.Tensor,
    group_len: torch.Tensor | None = None,
    group_key_idx: torch.Tensor | None = None,
    group_key_cache_idx: torch.Tensor | None = None,
    block_size: int = 0,
) -> StoreKvBlockGroups:
    """The runs of `slot_mapping` (int32, int64 accepted; negative slots are padding) that
    vllm-ascend's store_kv_block copies: consecutive slots inside one block of `block_size`.

    The three outputs are int32 [capacity], written in place; absent ones are allocated with
    slot_mapping's length, the most runs there can be. vllm-ascend sizes them by requests, which a
    request whose tokens cross a block boundary overruns (its tokens make two runs): on the host
    more runs than the capacity is a ValueError naming group_len; on a device the runs past the
    capacity are not written.
    """
    # Sized from slot_mapping (the op names it when it is not a tensor).
    size, device = (slot_mapping.numel(), slot_mapping.device) if isinstance(slot_mapping, torch.Tensor) else (0, None)
    outputs = StoreKvBlockGroups(*(torch.zeros(max(size, 1), dtype=torch.int32, device=device) if given is None
                                   else given for given in (group_len, group_key_idx, group_key_cache_idx)))
    group_len, group_key_idx, group_key_cache_idx = (outputs.group_len, outputs.group_key_idx,
                                                     outputs.group_key_cache_idx)
    _OP.select()(slot_mapping, group_len, group_key_idx, group_key_cache_idx, block_size)
    return outputs
