"""Reference for gather_block_tables (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch

from specops._constants import NULL_BLOCK_ID


def gather_block_tables(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    src_rows, src_cols = a.src_block_table.shape
    most_blocks = min(src_cols, a.out.size(1))
    mask_window = a.num_computed_tokens is not None and a.sliding_window_reach > 0
    a.out[:a.num_reqs_padded] = NULL_BLOCK_ID
    for batch_row, row in enumerate(a.idx_mapping.tolist()):
        if not 0 <= row < src_rows:  # a request without a row (-1) keeps a NULL row
            continue
        count = min(max(int(a.num_blocks[row]), 0), most_blocks)
        # Entries wholly below the sliding window of the request's first scheduled token stay
        # NULL (a negative count, rejected by the host op, masks nothing).
        masked = 0
        if mask_window:
            masked = max(int(a.num_computed_tokens[row]) - a.sliding_window_reach, 0) // a.block_size
        if masked < count:
            a.out[batch_row, masked:count] = a.src_block_table[row, masked:count]
