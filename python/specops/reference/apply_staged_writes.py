"""Reference for apply_staged_writes (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch


def apply_staged_writes(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    table_rows, table_cols = a.table.shape
    bounds = a.cu_lens.tolist()
    for k, (row, start) in enumerate(zip(a.rows.tolist(), a.starts.tolist())):
        begin, end = bounds[k], bounds[k + 1]
        fits = (
            0 <= row < table_rows
            and start >= 0
            and 0 <= begin <= end <= a.values.numel()
            and start + (end - begin) <= table_cols
        )
        if fits:  # a write that does not fit is dropped whole, never clipped
            a.table[row, start : start + end - begin] = a.values[begin:end]
