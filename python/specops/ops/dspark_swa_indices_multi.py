"""dspark_swa_indices_multi: the DSpark indices of every DSpark group of a step, in one op call
(one launch on a device)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops._cp import cp_token_split
from specops.ops._checks import (
    check_allocated_elements,
    check_cp_rank,
    check_entries,
    check_int32_range,
    check_no_overlap,
    check_query_start_loc,
    check_rows_disjoint,
    check_tensor,
    check_token_count,
    checked_int,
    checked_tensor_list,
    host_token_count,
    ints_per_group,
)
from specops.ops._op import SpecOp
from specops.ops.dspark_swa_indices import default_width
from specops.reference.dspark_swa_indices_multi import dspark_swa_indices_multi as _reference


def _check(
    block_tables: Sequence[torch.Tensor],
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    windows: Sequence[int],
    num_speculative_tokens: int,
    block_sizes: Sequence[int],
    num_tokens: int,
    widths: Sequence[int],
    cp_size: int,
    cp_rank: int,
    out: Sequence[torch.Tensor],
    out_lens: Sequence[torch.Tensor],
) -> None:
    """Mirrors csrc/cpu/dspark_swa_indices_multi.cpp (metadata only)."""
    num_groups = len(block_tables)
    for name, values in (("windows", windows), ("block_sizes", block_sizes), ("widths", widths), ("out", out),
                         ("out_lens", out_lens)):
        if len(values) != num_groups:
            raise ValueError(f"{name} must have one entry per block table (len(block_tables) = {num_groups}), "
                             f"got {len(values)}")
    num_reqs = check_query_start_loc(query_start_loc)
    device = query_start_loc.device
    check_tensor(seq_lens, "seq_lens", [torch.int32], 1, device, "query_start_loc")
    if seq_lens.numel() != num_reqs:
        raise ValueError(
            f"seq_lens must have R = query_start_loc.numel() - 1 = {num_reqs} entries, got {seq_lens.numel()}")
    check_int32_range(num_speculative_tokens, "num_speculative_tokens", 0)
    check_cp_rank(cp_size, cp_rank, "cp_size")
    check_token_count(num_tokens, "num_tokens", cp_size)
    rows = cp_token_split(num_tokens, cp_size, cp_rank).tokens_per_rank
    for g in range(num_groups):
        table = block_tables[g]
        check_tensor(table, f"block_tables[{g}]", [torch.int32], 2, device, "query_start_loc")
        if table.size(0) < num_reqs:
            raise ValueError(f"block_tables[{g}] must have at least R = query_start_loc.numel() - 1 = {num_reqs} "
                             f"rows, got {table.size(0)}")
        check_int32_range(windows[g], f"windows[{g}]", 0)
        check_int32_range(block_sizes[g], f"block_sizes[{g}]", 1)
        least = windows[g] + num_speculative_tokens
        if widths[g] < max(1, least):
            raise ValueError(f"widths[{g}] must be >= max(1, windows[{g}] + num_speculative_tokens = {least}), "
                             f"got {widths[g]}")
        target = out[g]
        check_tensor(target, f"out[{g}]", [torch.int32], 3, device, "query_start_loc")
        check_rows_disjoint(target, f"out[{g}]")
        if target.size(0) < rows or target.size(1) != 1 or target.size(2) != widths[g]:
            raise ValueError(f"out[{g}] must have shape [>= {rows}, 1, widths[{g}] = {widths[g]}], "
                             f"got {list(target.shape)}")
        check_tensor(out_lens[g], f"out_lens[{g}]", [torch.int32], 1, device, "query_start_loc")
        check_entries(out_lens[g], f"out_lens[{g}]", rows)
    # Every output is written once and every input is read while outputs are written.
    inputs = [(query_start_loc, "query_start_loc"), (seq_lens, "seq_lens")]
    inputs += [(table, f"block_tables[{g}]") for g, table in enumerate(block_tables)]
    for g in range(num_groups):
        check_no_overlap(out_lens[g], f"out_lens[{g}]", out[g], f"out[{g}]")
        for earlier in range(g):
            check_no_overlap(out[g], f"out[{g}]", out[earlier], f"out[{earlier}]")
            check_no_overlap(out[g], f"out[{g}]", out_lens[earlier], f"out_lens[{earlier}]")
            check_no_overlap(out_lens[g], f"out_lens[{g}]", out[earlier], f"out[{earlier}]")
            check_no_overlap(out_lens[g], f"out_lens[{g}]", out_lens[earlier], f"out_lens[{earlier}]")
        for output, name in ((out[g], f"out[{g}]"), (out_lens[g], f"out_lens[{g}]")):
            for tensor, tensor_name in inputs:
                check_no_overlap(output, name, tensor, tensor_name)


_OP = SpecOp("dspark_swa_indices_multi", _check, _reference)


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
        # Defaults and allocations come from the int arguments and query_start_loc[R]: checked
        # first, as the single op's wrapper does.
        num_speculative_tokens = checked_int(num_speculative_tokens, "num_speculative_tokens")
        check_int32_range(num_speculative_tokens, "num_speculative_tokens", 0)
        for g, window in enumerate(windows):
            check_int32_range(window, f"windows[{g}]", 0)
        if widths is None:
            widths = [default_width(window, num_speculative_tokens) for window in windows]
        widths = ints_per_group(widths, num_groups, "widths")
        num_tokens = host_token_count(query_start_loc) if num_tokens is None else checked_int(num_tokens, "num_tokens")
        check_tensor(query_start_loc, "query_start_loc", [torch.int32], 1)
        cp_size, cp_rank = checked_int(cp_size, "cp_size"), checked_int(cp_rank, "cp_rank")
        check_cp_rank(cp_size, cp_rank, "cp_size")
        check_token_count(num_tokens, "num_tokens", cp_size)
        rows = cp_token_split(num_tokens, cp_size, cp_rank).tokens_per_rank
        for g, (window, width) in enumerate(zip(windows, widths)):
            least = window + num_speculative_tokens
            if width < max(1, least):
                raise ValueError(f"widths[{g}] must be >= max(1, windows[{g}] + num_speculative_tokens = {least}), "
                                 f"got {width}")
            check_allocated_elements(rows, width, f"widths[{g}]", "rows of num_tokens times widths")
        device = query_start_loc.device
        if out is None:
            out = [torch.empty((rows, 1, width), dtype=torch.int32, device=device) for width in widths]
        if out_lens is None:
            out_lens = [torch.empty(rows, dtype=torch.int32, device=device) for _ in widths]
    else:
        widths = ints_per_group(widths, num_groups, "widths")
    out = checked_tensor_list(out, "out")
    out_lens = checked_tensor_list(out_lens, "out_lens")
    _OP.select()(block_tables, query_start_loc, seq_lens, windows, num_speculative_tokens, block_sizes, num_tokens,
                 widths, cp_size, cp_rank, out, out_lens)
    return out, out_lens
