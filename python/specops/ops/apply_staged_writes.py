"""apply_staged_writes: sparse row writes into a block table in one launch (docs/persistent_buffers.md)."""

from __future__ import annotations

import torch

from specops.ops._checks import check_outputs_alias_nothing, check_rows_disjoint, check_tensor
from specops.ops._op import SpecOp
from specops.reference.apply_staged_writes import apply_staged_writes as _reference


def _check(
    table: torch.Tensor,
    rows: torch.Tensor,
    starts: torch.Tensor,
    cu_lens: torch.Tensor,
    values: torch.Tensor,
) -> None:
    check_tensor(table, "table", [torch.int32], 2)
    check_rows_disjoint(table, "table")
    device = table.device
    check_tensor(rows, "rows", [torch.int32, torch.int64], 1, device, "table")
    check_tensor(starts, "starts", [torch.int32], 1, device, "table")
    check_tensor(cu_lens, "cu_lens", [torch.int32], 1, device, "table")
    check_tensor(values, "values", [torch.int32], 1, device, "table")
    num_writes = rows.numel()
    if starts.numel() != num_writes:
        raise ValueError(
            f"starts must have one entry per write (K = rows.numel() = {num_writes}), got {starts.numel()}")
    if cu_lens.numel() != num_writes + 1:
        raise ValueError(
            f"cu_lens must have K + 1 = rows.numel() + 1 = {num_writes + 1} entries, got {cu_lens.numel()}")
    check_outputs_alias_nothing([(table, "table")], [(rows, "rows"), (starts, "starts"), (cu_lens, "cu_lens"),
                                                     (values, "values")])


_OP = SpecOp("apply_staged_writes", _check, _reference)


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
