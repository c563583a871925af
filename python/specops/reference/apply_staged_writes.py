"""Reference for apply_staged_writes (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch


def apply_staged_writes(
    table: torch.Tensor,
    rows: torch.Tensor,
    starts: torch.Tensor,
    cu_lens: torch.Tensor,
    values: torch.Tensor,
) -> None:
    table_rows, table_cols = table.shape
    bounds = cu_lens.tolist()
    for k, (row, start) in enumerate(zip(rows.tolist(), starts.tolist())):
        begin, end = bounds[k], bounds[k + 1]
        fits = (
            0 <= row < table_rows
            and start >= 0
            and 0 <= begin <= end <= values.numel()
            and start + (end - begin) <= table_cols
        )
        if fits:  # a write that does not fit is dropped whole, never clipped
            table[row, start : start + end - begin] = values[begin:end]
