"""store_kv_block_metadata: the groups of vllm-ascend's store_kv_block, word for word what its
AI-CPU kernel `store_kv_block_metadata` writes (docs/dsa_metadata_family.md), with outputs
sized for the worst case and a capacity check the kernel lacks."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.ops._checks import check_outputs_alias_nothing, check_tensor
from specops.ops._op import SpecOp
from specops.reference.store_kv_block_metadata import store_kv_block_metadata as _reference
from specops.sas_layout import INT32_MAX

_OUTPUTS = ("group_len", "group_key_idx", "group_key_cache_idx")


class StoreKvBlockGroups(NamedTuple):
    """Run g: group_len[g] tokens from token group_key_idx[g] on, stored from slot
    group_key_cache_idx[g] on; zeros after the last run."""

    group_len: torch.Tensor
    group_key_idx: torch.Tensor
    group_key_cache_idx: torch.Tensor


def _check(slot_mapping: torch.Tensor, group_len: torch.Tensor, group_key_idx: torch.Tensor,
           group_key_cache_idx: torch.Tensor, block_size: int) -> None:
    """The kernel's rejections plus the shapes (mirrors csrc/cpu/store_kv_block_metadata.cpp);
    the slot values (INT32_MAX, more runs than the capacity) are checked on the host only."""
    check_tensor(slot_mapping, "slot_mapping", [torch.int32, torch.int64], 1)
    for name, t in zip(_OUTPUTS, (group_len, group_key_idx, group_key_cache_idx)):
        check_tensor(t, name, [torch.int32], 1, slot_mapping.device, "slot_mapping")
    if not 0 < block_size <= INT32_MAX:
        raise ValueError(f"block_size must be positive (and fit int32), got {block_size}")
    if slot_mapping.numel() == 0:
        raise ValueError("slot_mapping is empty")
    if group_len.numel() == 0 or group_key_idx.numel() == 0 or group_key_cache_idx.numel() == 0:
        raise ValueError("group_len, group_key_idx and group_key_cache_idx must not be empty")
    if group_key_idx.numel() != group_len.numel() or group_key_cache_idx.numel() != group_len.numel():
        raise ValueError(f"group_key_idx and group_key_cache_idx must have group_len's {group_len.numel()} entries, "
                         f"got {group_key_idx.numel()} and {group_key_cache_idx.numel()}")
    if slot_mapping.numel() > INT32_MAX:
        raise ValueError("slot_mapping has more than 2^31 - 1 slots")
    check_outputs_alias_nothing([(group_len, "group_len"), (group_key_idx, "group_key_idx"),
                                 (group_key_cache_idx, "group_key_cache_idx")], [(slot_mapping, "slot_mapping")])


_OP = SpecOp("store_kv_block_metadata", _check, _reference)


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
    if not isinstance(slot_mapping, torch.Tensor):
        raise ValueError(f"slot_mapping must be a tensor, got {type(slot_mapping).__name__}")
    outputs = [group_len, group_key_idx, group_key_cache_idx]
    for i, t in enumerate(outputs):
        if t is None:
            outputs[i] = torch.zeros(max(slot_mapping.numel(), 1), dtype=torch.int32, device=slot_mapping.device)
    _OP.select()(slot_mapping, *outputs, block_size)
    return StoreKvBlockGroups(*outputs)
