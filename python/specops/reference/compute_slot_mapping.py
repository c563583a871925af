"""Reference for compute_slot_mapping (docs/slot_mapping.md)."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops.reference._batch import request_of_each_token
from specops.slot_math import kv_placement

INT32_MAX = 2**31 - 1


def compute_slot_mapping(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_tokens = a.positions.numel()
    num_rows, num_cols = a.block_table.shape
    request = request_of_each_token(a.query_start_loc, num_tokens)  # -1: a token in no request
    row = request
    if a.idx_mapping is not None and a.idx_mapping.numel():
        row = torch.where(request >= 0, a.idx_mapping.long()[request.clamp(min=0)], -1)

    position = a.positions.long()
    is_local, virtual_block, local_offset = kv_placement(position, a.block_size * a.blocks_per_kv_block, a.cp_world_size,
                                                         a.cp_rank, a.cp_interleave)
    column = virtual_block * a.blocks_per_kv_block + local_offset // a.block_size

    valid = (
        is_local
        & (row >= 0) & (row < num_rows)
        & (position >= 0) & (position <= INT32_MAX)
        & (column < num_cols)
    )
    if a.num_blocks is not None and num_rows > 0:
        # Past the row's allocated blocks the row holds the null block: PAD, never a slot there.
        allocated = a.num_blocks[:num_rows].long()[row.clamp(0, num_rows - 1)]
        valid &= column < allocated
    # Gather with clamped indices, then discard what was invalid.
    if num_rows > 0 and num_cols > 0:
        block_id = a.block_table[row.clamp(0, num_rows - 1), column.clamp(0, num_cols - 1)].long()
    else:
        block_id = torch.full_like(row, -1)
    valid &= block_id >= 0
    slot = block_id * a.block_size + local_offset % a.block_size
    if a.out.dtype == torch.int32:
        valid &= slot <= INT32_MAX  # a cast would wrap it to another request's slot
    slot = torch.where(valid, slot, PAD_SLOT_ID)

    a.out[:num_tokens] = slot.to(a.out.dtype)
    a.out[num_tokens:a.num_tokens_padded] = PAD_SLOT_ID
