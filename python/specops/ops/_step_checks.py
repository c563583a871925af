"""Metadata checks shared by the step-bookkeeping ops, mirroring csrc/cpu/step_checks.h."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.ops._checks import check_positive, checked_bool, checked_size, ints_per_group
from specops.ops._slot_mapping_checks import (
    SlotMappingArgNames,
    check_group_settings,
    check_num_blocks,
    check_slot_mapping_args,
    group_cp,
)


def padded_end(out: torch.Tensor, out_name: str, padded: int, padded_name: str, real: int, real_name: str) -> int:
    """Where the padding of out ends: `padded` (-1: the buffer's end), in [real, out.numel()]."""
    if padded < 0:
        return max(out.numel(), real)
    if not real <= padded <= out.numel():
        raise ValueError(f"{padded_name} must be in [{real_name} = {real}, {out_name}.numel() = {out.numel()}], "
                         f"got {padded}")
    return padded


def padded_argument(value: int | None, name: str) -> int:
    """A wrapper's optional *_padded argument as the schema takes it (-1: each buffer's end).
    Checked before the wrapper sizes an output from it: a padded extent is an int32 count."""
    if value is None:
        return -1
    value = checked_size(value, name, 0)
    if value >= 2**31 - 1:
        raise ValueError(f"{name} must be < 2^31 - 1, got {value}")
    return value


def max_model_len_arguments(max_model_len: int | torch.Tensor | None,
                            max_model_len_tensor: torch.Tensor | None) -> tuple[int, torch.Tensor | None]:
    """A draft op wrapper's limit as its schema takes it: (the int, None), or for a tensor, read
    on the device (vLLM 0.34's `max_model_len_gpu`), (-1, the tensor). The tensor comes as
    max_model_len_tensor (the schema's name) or as max_model_len itself: never read on the host."""
    if (isinstance(max_model_len, torch.Tensor) and max_model_len.dtype in (torch.int32, torch.int64)
            and max_model_len_tensor is None):
        # Any other tensor stays an int argument, rejected as one (a bool or float is not a limit).
        max_model_len, max_model_len_tensor = None, max_model_len
    if max_model_len_tensor is not None:
        if max_model_len is not None:
            raise ValueError("give max_model_len or max_model_len_tensor, not both")
        return -1, max_model_len_tensor
    if max_model_len is None:
        raise ValueError("max_model_len must be given (an int, or a 0-D tensor as max_model_len_tensor)")
    return max_model_len, None


def check_max_model_len(max_model_len: int, max_model_len_tensor: torch.Tensor | None, like: object) -> None:
    """Mirrors max_model_len_value (csrc/cpu/step_checks.h), metadata only: the tensor's value is
    the host op's to check (reading it here would sync a device); `like` is the tensor whose
    device it must be on (positions)."""
    if max_model_len_tensor is None:
        check_positive(max_model_len, "max_model_len")
        return
    tensor = max_model_len_tensor
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"max_model_len_tensor must be a tensor, got {type(tensor).__name__}")
    if max_model_len != -1:
        raise ValueError(f"max_model_len must be -1 when max_model_len_tensor gives it, got {max_model_len}")
    if isinstance(like, torch.Tensor) and tensor.device != like.device:
        raise ValueError(f"max_model_len_tensor must be on {like.device} like positions, got {tensor.device}")
    if tensor.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"max_model_len_tensor must have dtype int32 or int64, got "
                         f"{str(tensor.dtype).removeprefix('torch.')}")
    if tensor.dim() != 0:
        raise ValueError(f"max_model_len_tensor must be 0-D, got shape {list(tensor.shape)}")


def _per_group(value: object, num_groups: int) -> list:
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return [value] * num_groups


def group_settings(block_sizes: Sequence[int] | int, blocks_per_kv_block: Sequence[int] | int,
                   cp_sharded: Sequence[bool] | bool, slot_mapping_enabled: Sequence[bool] | bool,
                   num_groups: int) -> list[list]:
    """The per-group keywords of a multi-group op's wrapper (a list, or one value for every
    group) as its schema takes them, [block_sizes, blocks_per_kv_block, cp_sharded,
    slot_mapping_enabled]: each checked as the schema takes it and naming its entry, one entry
    per block table."""
    settings = [ints_per_group(block_sizes, num_groups, "block_sizes"),
                ints_per_group(blocks_per_kv_block, num_groups, "blocks_per_kv_block"),
                [checked_bool(v, f"cp_sharded[{g}]") for g, v in enumerate(_per_group(cp_sharded, num_groups))],
                [checked_bool(v, f"slot_mapping_enabled[{g}]")
                 for g, v in enumerate(_per_group(slot_mapping_enabled, num_groups))]]
    check_group_settings(*settings, num_groups)
    return settings


def check_draft_groups(block_tables: Sequence[torch.Tensor], slot_mappings: Sequence[torch.Tensor],
                       num_blocks: Sequence[torch.Tensor], block_sizes: Sequence[int],
                       blocks_per_kv_block: Sequence[int], cp_sharded: Sequence[bool],
                       slot_mapping_enabled: Sequence[bool], cp: tuple[int, int, int], num_tokens: int,
                       num_tokens_padded: int, device: torch.device | None, device_of: str) -> None:
    """Every group's slot target of a draft op (draft_step_groups in step_checks.h): the
    per-group lists of one entry per table, the slot-mapping checks of prepare_spec_decode_inputs
    for num_tokens tokens (W = 1 for a group that is not CP-sharded) with the slots PAD up to
    num_tokens_padded (-1: the buffer's end), and num_blocks[g] when given."""
    num_groups = len(block_tables)
    check_group_settings(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    if len(slot_mappings) != num_groups:
        raise ValueError(f"slot_mappings must have one tensor per block table (len(block_tables) = {num_groups}), "
                         f"got {len(slot_mappings)}")
    if len(num_blocks) not in (0, num_groups):
        raise ValueError(f"num_blocks must be empty or hold one tensor per block table (len(block_tables) = "
                         f"{num_groups}), got {len(num_blocks)}")
    for g in range(num_groups):
        out = slot_mappings[g]
        slot_end = num_tokens_padded if num_tokens_padded >= 0 else max(
            out.numel() if isinstance(out, torch.Tensor) else 0, num_tokens)
        check_slot_mapping_args(block_tables[g], block_sizes[g], out, blocks_per_kv_block[g],
                                *group_cp(cp_sharded[g], *cp), num_tokens, slot_end, device,
                                SlotMappingArgNames.of_group(g), device_of=device_of)
        if num_blocks:
            check_num_blocks(num_blocks[g], f"num_blocks[{g}]", block_tables[g], f"block_tables[{g}]", device,
                             device_of=device_of)


def group_tensors(slot_mappings: Sequence[torch.Tensor], block_tables: Sequence[torch.Tensor],
                  num_blocks: Sequence[torch.Tensor]) -> tuple[list, list]:
    """A draft op's per-group (tensor, name) pairs for its alias check: the slot mappings as
    outputs, each block table and its num_blocks tensor as inputs (add_group_tensors)."""
    outputs = [(out, f"slot_mappings[{g}]") for g, out in enumerate(slot_mappings)]
    inputs = []
    for g, table in enumerate(block_tables):
        inputs.append((table, f"block_tables[{g}]"))
        if num_blocks:
            inputs.append((num_blocks[g], f"num_blocks[{g}]"))
    return outputs, inputs
