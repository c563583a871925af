"""Reference for dspark_swa_indices (docs/context_parallel.md)."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._cp import cp_token_split

INT32_MAX = 2**31 - 1


def request_rows(
    block_table: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor, window: int, block_size: int,
    width: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """int64 [R, width] row of each request (slots of its visible positions, then PAD) and
    int64 [R] number of visible entries."""
    num_reqs = query_start_loc.numel() - 1
    device = block_table.device
    query_lens = (query_start_loc[1:] - query_start_loc[:-1]).long()
    seq = seq_lens.long()
    start = (seq - query_lens - window).clamp(min=0)
    visible = (seq - start).clamp(0, width)

    entry = torch.arange(width, device=device)
    position = start[:, None] + entry[None, :]
    column = position // block_size
    num_rows, num_cols = block_table.shape
    request = torch.arange(num_reqs, device=device)[:, None]
    valid = (entry[None, :] < visible[:, None]) & (column < num_cols) & (request < num_rows)
    if num_rows > 0 and num_cols > 0:
        block_id = block_table[request.clamp(max=num_rows - 1), column.clamp(0, num_cols - 1)].long()
    else:
        block_id = torch.full_like(position, -1)
    slot = block_id * block_size + position % block_size
    valid &= (block_id >= 0) & (slot <= INT32_MAX)
    return torch.where(valid, slot, PAD_SLOT_ID), visible


def dspark_swa_indices(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    split = cp_token_split(a.num_tokens, a.cp_size, a.cp_rank)
    rows = split.tokens_per_rank
    num_reqs = a.query_start_loc.numel() - 1
    if num_reqs == 0:
        a.out[:rows] = PAD_SLOT_ID
        a.out_lens[:rows] = 0
        return
    row_of_request, visible = request_rows(a.block_table, a.query_start_loc, a.seq_lens, a.window, a.block_size, a.width)

    # The global tokens of this rank's slice, and the request of each (searchsorted, so that no
    # token count has to be read back from a device).
    token = torch.arange(split.local_start, split.local_end, device=a.block_table.device)
    boundaries = a.query_start_loc.long()
    request = torch.searchsorted(boundaries[1:], token, right=True).clamp(max=num_reqs - 1)
    is_real = token < boundaries[num_reqs]
    a.out[:rows, 0] = torch.where(is_real[:, None], row_of_request[request], PAD_SLOT_ID).to(torch.int32)
    a.out_lens[:rows] = torch.where(is_real, visible[request], 0).to(torch.int32)
