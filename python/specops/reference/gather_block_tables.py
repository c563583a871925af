"""Reference for gather_block_tables (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch

from specops._constants import NULL_BLOCK_ID


def gather_block_tables(
    src_block_table: torch.Tensor,
    num_blocks: torch.Tensor,
    idx_mapping: torch.Tensor,
    out: torch.Tensor,
    num_reqs_padded: int,
    num_computed_tokens: torch.Tensor | None = None,
    sliding_window_reach: int = 0,
    block_size: int = 0,
) -> None:
    src_rows, src_cols = src_block_table.shape
    most_blocks = min(src_cols, out.size(1))
    mask_window = num_computed_tokens is not None and sliding_window_reach > 0
    out[:num_reqs_padded] = NULL_BLOCK_ID
    for batch_row, row in enumerate(idx_mapping.tolist()):
        if not 0 <= row < src_rows:  # a request without a row (-1) keeps a NULL row
            continue
        count = min(max(int(num_blocks[row]), 0), most_blocks)
        # Entries wholly below the sliding window of the request's first scheduled token stay
        # NULL (a negative count, rejected by the host op, masks nothing).
        masked = 0
        if mask_window:
            masked = max(int(num_computed_tokens[row]) - sliding_window_reach, 0) // block_size
        if masked < count:
            out[batch_row, masked:count] = src_block_table[row, masked:count]
