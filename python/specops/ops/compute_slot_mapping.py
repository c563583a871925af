"""compute_slot_mapping: the KV-cache slot of every token, with CP interleave (docs/slot_mapping.md)."""

from __future__ import annotations

import torch

from specops.arguments import checked_size
from specops.ops._op import SpecOp
from specops.reference.compute_slot_mapping import compute_slot_mapping as _reference

__all__ = ["compute_slot_mapping"]



_OP = SpecOp("compute_slot_mapping", _reference)


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
    if out is None and isinstance(positions, torch.Tensor):  # else the op names positions
        if num_tokens_padded is not None:
            num_tokens_padded = checked_size(num_tokens_padded, "num_tokens_padded", positions.numel(),
                                             f"num_tokens = positions.numel() = {positions.numel()}")
        size = positions.numel() if num_tokens_padded is None else num_tokens_padded
        out = torch.empty(size, dtype=torch.int64, device=positions.device)
    if num_tokens_padded is None:
        num_tokens_padded = out.numel() if isinstance(out, torch.Tensor) else 0
    _OP.select()(query_start_loc, positions, block_table, block_size, out, blocks_per_kv_block, cp_world_size, cp_rank,
        cp_interleave, idx_mapping, num_tokens_padded, num_blocks)
    return out
