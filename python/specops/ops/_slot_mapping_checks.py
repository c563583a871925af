"""Checks of one slot mapping's block table, output and sizes, mirroring csrc/cpu/slot_mapping_checks.h.

Shared by compute_slot_mapping and every op that computes the slot mappings of KV-cache groups
(whose arguments are named block_tables[g] etc.: SlotMappingArgNames.of_group).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from specops.ops._checks import INT32_MAX, check_context_parallel, check_positive, check_tensor


@dataclasses.dataclass(frozen=True)
class SlotMappingArgNames:
    """How the arguments of one slot mapping are called in the op that checks them."""

    block_table: str = "block_table"
    out: str = "out"
    block_size: str = "block_size"
    blocks_per_kv_block: str = "blocks_per_kv_block"

    @classmethod
    def of_group(cls, group: int) -> SlotMappingArgNames:
        return cls(f"block_tables[{group}]", f"slot_mappings[{group}]", f"block_sizes[{group}]",
                   f"blocks_per_kv_block[{group}]")


def check_slot_mapping_args(
    block_table: torch.Tensor,
    block_size: int,
    out: torch.Tensor,
    blocks_per_kv_block: int,
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    num_tokens: int,
    num_tokens_padded: int,
    device: torch.device,
    names: SlotMappingArgNames = SlotMappingArgNames(),
    device_of: str = "out",
) -> None:
    """Checks one slot mapping's table, output and sizes (mirrors csrc/cpu/slot_mapping_checks.h);
    every tensor must be on `device`, the device of the argument `device_of`."""
    check_tensor(out, names.out, [torch.int64, torch.int32], 1, device, device_of)
    check_tensor(block_table, names.block_table, [torch.int32], 2, device, device_of)
    check_positive(block_size, names.block_size)
    check_positive(blocks_per_kv_block, names.blocks_per_kv_block)
    check_context_parallel(cp_world_size, cp_rank, cp_interleave)
    kv_block = block_size * blocks_per_kv_block
    product = f"{names.block_size} * {names.blocks_per_kv_block}"
    if kv_block * cp_world_size > INT32_MAX:
        raise ValueError(
            f"{product} * cp_world_size must be < 2^31, got {block_size} * {blocks_per_kv_block} * {cp_world_size}"
        )
    if kv_block % cp_interleave != 0:
        raise ValueError(f"cp_interleave must divide {product} = {kv_block}, got {cp_interleave}")
    if not num_tokens <= num_tokens_padded <= out.numel():
        raise ValueError(
            f"num_tokens_padded must be in [num_tokens = {num_tokens}, {names.out}.numel() = {out.numel()}], "
            f"got {num_tokens_padded}"
        )


def check_num_blocks(num_blocks: torch.Tensor | None, name: str, block_table: torch.Tensor, table_name: str,
                     device: torch.device, device_of: str = "out") -> None:
    """An optional count of the blocks allocated to each row of the table (mirrors
    use_num_blocks in csrc/cpu/slot_mapping_checks.h)."""
    if num_blocks is None:
        return
    check_tensor(num_blocks, name, [torch.int32], 1, device, device_of)
    if num_blocks.numel() < block_table.size(0):
        raise ValueError(f"{name} must have one entry per row of {table_name} ({block_table.size(0)}), "
                         f"got {num_blocks.numel()}")


def check_group_settings(block_sizes: Sequence[int], blocks_per_kv_block: Sequence[int], cp_sharded: Sequence[bool],
                         slot_mapping_enabled: Sequence[bool] | None, num_groups: int) -> None:
    """Every per-group list of an op that maps the slots of several KV-cache groups holds one
    entry per block table (slot_mapping_enabled None: check_slot_mapping_positions, which maps
    every group). Mirrors GroupSettings::check in csrc/cpu/slot_mapping_checks.h."""
    lists = [("block_sizes", block_sizes), ("blocks_per_kv_block", blocks_per_kv_block), ("cp_sharded", cp_sharded)]
    if slot_mapping_enabled is not None:
        lists.append(("slot_mapping_enabled", slot_mapping_enabled))
    for name, values in lists:
        if len(values) != num_groups:
            raise ValueError(f"{name} must have one entry per block table (len(block_tables) = {num_groups}), "
                             f"got {len(values)}")


def group_cp(sharded: bool, cp_world_size: int, cp_rank: int, cp_interleave: int) -> tuple[int, int, int]:
    """A group's CP layout (world size, rank, interleave): the op's, or a single rank where the
    group is not CP-sharded (GroupSettings::cp)."""
    return (cp_world_size, cp_rank, cp_interleave) if sharded else (1, 0, 1)
