"""compute_slot_mapping: the KV-cache slot of every token, with CP interleave (docs/slot_mapping.md)."""

from __future__ import annotations

import dataclasses

import torch

from specops.ops._checks import (
    INT32_MAX,
    check_context_parallel,
    check_interleave_divides,
    check_outputs_alias_nothing,
    check_positive,
    check_query_start_loc,
    check_tensor,
    checked_size,
)
from specops.ops._op import SpecOp
from specops.reference.compute_slot_mapping import compute_slot_mapping as _reference


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
    check_interleave_divides(kv_block, cp_interleave, "" if names == SlotMappingArgNames() else f" ({product})")
    if not num_tokens <= num_tokens_padded <= out.numel():
        raise ValueError(
            f"num_tokens_padded must be in [num_tokens = {num_tokens}, {names.out}.numel() = {out.numel()}], "
            f"got {num_tokens_padded}"
        )


def _check(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    out: torch.Tensor,
    blocks_per_kv_block: int,
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    idx_mapping: torch.Tensor | None,
    num_tokens_padded: int,
    num_blocks: torch.Tensor | None = None,
) -> None:
    check_tensor(out, "out", [torch.int64, torch.int32], 1)
    device = out.device
    check_tensor(positions, "positions", [torch.int64, torch.int32], 1, device)
    num_reqs = check_query_start_loc(query_start_loc, device)
    check_slot_mapping_args(block_table, block_size, out, blocks_per_kv_block, cp_world_size, cp_rank,
                            cp_interleave, positions.numel(), num_tokens_padded, device)
    check_idx_mapping(idx_mapping, num_reqs, device)
    check_num_blocks(num_blocks, "num_blocks", block_table, "block_table", device)
    # Every kernel reads its inputs while it stores.
    check_outputs_alias_nothing([(out, "out")], [(query_start_loc, "query_start_loc"), (positions, "positions"),
                                                 (block_table, "block_table"), (idx_mapping, "idx_mapping"),
                                                 (num_blocks, "num_blocks")])


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


def check_idx_mapping(
    idx_mapping: torch.Tensor | None, num_reqs: int, device: torch.device, device_of: str = "out"
) -> None:
    if idx_mapping is not None:
        check_tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64], 1, device, device_of)
        if idx_mapping.numel() != num_reqs:
            raise ValueError(
                f"idx_mapping must have R = query_start_loc.numel() - 1 = {num_reqs} entries, got {idx_mapping.numel()}"
            )


_OP = SpecOp("compute_slot_mapping", _check, _reference)


def compute_slot_mapping(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_size: int,
    *,
    out: torch.Tensor | None = None,
    blocks_per_kv_block: int = 1,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    idx_mapping: torch.Tensor | None = None,
    num_tokens_padded: int | None = None,
    num_blocks: torch.Tensor | None = None,
) -> torch.Tensor:
    """KV-cache slot id of every token; PAD_SLOT_ID for tokens this CP rank does not store.

    query_start_loc: int32 [R + 1]; positions: int64 or int32 [T]; block_table: int32
    [rows, max_blocks] of kernel-block ids; out: int64 or int32 (allocated as int64
    [num_tokens_padded or T] when absent; a slot an int32 out cannot hold is PAD on device
    paths and a ValueError on the host). Row r of the batch reads block_table[idx_mapping[r]]
    (or row r); a row of -1 gives PAD. out[T:num_tokens_padded] is set to PAD. out must not
    share memory with any input.

    num_blocks: int32 [>= rows], the blocks allocated to each table row (a table wider than
    what is allocated, as PersistentMappings' source tables are). A position this rank stores
    at or past column num_blocks[row] is past the request's allocated blocks: a ValueError
    naming the request, the position and the count on the host, PAD on device paths, never the
    null block the row holds there. Without it every column of the table counts as allocated.
    """
    if out is None:
        check_tensor(positions, "positions", [torch.int64, torch.int32], 1)
        if num_tokens_padded is not None:
            num_tokens_padded = checked_size(num_tokens_padded, "num_tokens_padded", positions.numel(),
                                             f"num_tokens = positions.numel() = {positions.numel()}")
        size = positions.numel() if num_tokens_padded is None else num_tokens_padded
        out = torch.empty(size, dtype=torch.int64, device=positions.device)
    if num_tokens_padded is None:
        num_tokens_padded = out.numel()
    _OP.select()(
        query_start_loc, positions, block_table, block_size, out,
        blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave, idx_mapping, num_tokens_padded, num_blocks,
    )
    return out
