"""apply_staged_writes: sparse row writes into a block table in one launch (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.apply_staged_writes import apply_staged_writes as _reference

__all__ = ["apply_staged_writes"]


_OP = SpecOp("apply_staged_writes", _reference)


def apply_staged_writes(
    table: torch.Tensor,
    rows: torch.Tensor,
    starts: torch.Tensor,
    cu_lens: torch.Tensor,
    values: torch.Tensor,
) -> torch.Tensor:
    """Writes `table[rows[k], starts[k] : starts[k] + len_k] = values[cu_lens[k] : cu_lens[k+1]]`.

    table: int32 [rows, cols], written in place; rows: int32 or int64 [K]; starts: int32 [K];
    cu_lens: int32 [K + 1], starting at 0; values: int32 [>= cu_lens[K]]. All writes in one
    call. The native CPU op rejects a write outside the table (naming rows, starts or cu_lens)
    before writing anything; device kernels drop such a write whole. Returns table.
    """
    _OP.select()(table, rows, starts, cu_lens, values)
    return table
