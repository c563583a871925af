"""dspark_swa_indices_multi: the DSpark indices of every DSpark group of a step, in one op call
(one launch on a device)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.arguments import (
    check_allocated_elements,
    checked_int,
    checked_tensor_list,
    ints_per_group,
    query_start_loc_tokens,
)
from specops.ops._op import SpecOp
from specops.ops.dspark_swa_indices import default_width, local_rows
from specops.reference.dspark_swa_indices_multi import dspark_swa_indices_multi as _reference

__all__ = ["dspark_swa_indices_multi"]


_OP = SpecOp("dspark_swa_indices_multi", _reference)


def dspark_swa_indices_multi(
    block_tables: Sequence[torch.Tensor],
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    windows: int | Sequence[int],
    num_speculative_tokens: int,
    block_sizes: int | Sequence[int],
    num_tokens: int | None = None,
    widths: int | Sequence[int] | None = None,
    cp_size: int = 1,
    cp_rank: int = 0,
    out: Sequence[torch.Tensor] | None = None,
    out_lens: Sequence[torch.Tensor] | None = None,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """dspark_swa_indices of every DSpark group in one call: group g reads block_tables[g] with
    block_sizes[g] and sees windows[g] tokens before its draft block; out[g] is its
    [rows, 1, widths[g]] int32 indices and out_lens[g] its [rows] lens, exactly what
    dspark_swa_indices(block_tables[g], query_start_loc, seq_lens, window=windows[g], ...,
    width=widths[g]) writes. The groups share the batch, num_tokens and the CP split.

    windows, block_sizes, widths: one per group, or one int for all; widths default to each
    window + num_speculative_tokens rounded up to a multiple of 128. num_tokens defaults to
    query_start_loc[R] (a device-to-host read with device tensors: pass it). Outputs absent are
    allocated; no two outputs may share memory.
    """
    block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    windows = ints_per_group(windows, num_groups, "windows")
    block_sizes = ints_per_group(block_sizes, num_groups, "block_sizes")
    if widths is None or num_tokens is None or out is None or out_lens is None:
        # Defaults and allocations come from the int arguments and query_start_loc[R], as the
        # single op's wrapper takes them.
        num_speculative_tokens = checked_int(num_speculative_tokens, "num_speculative_tokens")
        if widths is None:
            widths = [default_width(window, num_speculative_tokens) for window in windows]
        widths = ints_per_group(widths, num_groups, "widths")
        num_tokens = query_start_loc_tokens(query_start_loc) if num_tokens is None else \
            checked_int(num_tokens, "num_tokens")
        rows = local_rows(num_tokens, checked_int(cp_size, "cp_size"), checked_int(cp_rank, "cp_rank"))
        for g, width in enumerate(widths):
            check_allocated_elements(rows, width, f"widths[{g}]", "rows of num_tokens times widths")
        device = query_start_loc.device if isinstance(query_start_loc, torch.Tensor) else None
        if out is None:
            out = [torch.empty((rows, 1, max(width, 0)), dtype=torch.int32, device=device) for width in widths]
        if out_lens is None:
            out_lens = [torch.empty(rows, dtype=torch.int32, device=device) for _ in widths]
    else:
        widths = ints_per_group(widths, num_groups, "widths")
    out = checked_tensor_list(out, "out")
    out_lens = checked_tensor_list(out_lens, "out_lens")
    _OP.select()(block_tables, query_start_loc, seq_lens, windows, num_speculative_tokens, block_sizes, num_tokens,
        widths, cp_size, cp_rank, out, out_lens)
    return out, out_lens
