"""Reference for compute_slot_mapping (docs/slot_mapping.md)."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops.reference._batch import request_of_each_token
from specops.reference._slot_math import kv_placement

INT32_MAX = 2**31 - 1


def compute_slot_mapping(
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
    num_tokens = positions.numel()
    num_rows, num_cols = block_table.shape
    request = request_of_each_token(query_start_loc, num_tokens)  # -1: a token in no request
    row = request
    if idx_mapping is not None and idx_mapping.numel():
        row = torch.where(request >= 0, idx_mapping.long()[request.clamp(min=0)], -1)

    position = positions.long()
    is_local, virtual_block, local_offset = kv_placement(position, block_size * blocks_per_kv_block, cp_world_size,
                                                         cp_rank, cp_interleave)
    column = virtual_block * blocks_per_kv_block + local_offset // block_size

    valid = (
        is_local
        & (row >= 0) & (row < num_rows)
        & (position >= 0) & (position <= INT32_MAX)
        & (column < num_cols)
    )
    if num_blocks is not None and num_rows > 0:
        # Past the row's allocated blocks the row holds the null block: PAD, never a slot there.
        allocated = num_blocks[:num_rows].long()[row.clamp(0, num_rows - 1)]
        valid &= column < allocated
    # Gather with clamped indices, then discard what was invalid.
    if num_rows > 0 and num_cols > 0:
        block_id = block_table[row.clamp(0, num_rows - 1), column.clamp(0, num_cols - 1)].long()
    else:
        block_id = torch.full_like(row, -1)
    valid &= block_id >= 0
    slot = block_id * block_size + local_offset % block_size
    if out.dtype == torch.int32:
        valid &= slot <= INT32_MAX  # a cast would wrap it to another request's slot
    slot = torch.where(valid, slot, PAD_SLOT_ID)

    out[:num_tokens] = slot.to(out.dtype)
    out[num_tokens:num_tokens_padded] = PAD_SLOT_ID
