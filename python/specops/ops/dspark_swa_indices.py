"""dspark_swa_indices: the KV slots each DSpark draft-block token may attend to (docs/context_parallel.md)."""

from __future__ import annotations

import torch

from specops._cp import cp_token_split
from specops.ops._checks import (
    check_allocated_elements,
    check_cp_rank,
    check_entries,
    check_int32_range,
    check_outputs_alias_nothing,
    check_query_start_loc,
    check_rows_disjoint,
    check_tensor,
    check_token_count,
    checked_int,
    host_token_count,
)
from specops.ops._op import SpecOp
from specops.reference.dspark_swa_indices import dspark_swa_indices as _reference

WIDTH_ALIGNMENT = 128


def _check_sizes(window: int, num_speculative_tokens: int, block_size: int, num_tokens: int, width: int,
                 cp_size: int, cp_rank: int) -> int:
    """Checks the int arguments; returns the rows of this rank's slice."""
    check_int32_range(window, "window", 0)
    check_int32_range(num_speculative_tokens, "num_speculative_tokens", 0)
    check_int32_range(block_size, "block_size", 1)
    if width < max(1, window + num_speculative_tokens):
        raise ValueError(
            f"width must be >= max(1, window + num_speculative_tokens = {window + num_speculative_tokens}), got {width}"
        )
    check_cp_rank(cp_size, cp_rank, "cp_size")
    check_token_count(num_tokens, "num_tokens", cp_size)
    return cp_token_split(num_tokens, cp_size, cp_rank).tokens_per_rank


def _check(
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    window: int,
    num_speculative_tokens: int,
    block_size: int,
    num_tokens: int,
    width: int,
    cp_size: int,
    cp_rank: int,
    out: torch.Tensor,
    out_lens: torch.Tensor,
) -> None:
    check_tensor(out, "out", [torch.int32], 3)
    check_rows_disjoint(out, "out")
    device = out.device
    num_reqs = check_query_start_loc(query_start_loc, device)
    check_tensor(block_table, "block_table", [torch.int32], 2, device)
    if block_table.size(0) < num_reqs:
        raise ValueError(
            f"block_table must have at least R = query_start_loc.numel() - 1 = {num_reqs} rows, "
            f"got {block_table.size(0)}")
    check_tensor(seq_lens, "seq_lens", [torch.int32], 1, device)
    if seq_lens.numel() != num_reqs:
        raise ValueError(
            f"seq_lens must have R = query_start_loc.numel() - 1 = {num_reqs} entries, got {seq_lens.numel()}")
    rows = _check_sizes(window, num_speculative_tokens, block_size, num_tokens, width, cp_size, cp_rank)
    if out.size(0) < rows or out.size(1) != 1 or out.size(2) != width:
        raise ValueError(f"out must have shape [>= {rows}, 1, width = {width}], got {list(out.shape)}")
    check_tensor(out_lens, "out_lens", [torch.int32], 1, device)
    check_entries(out_lens, "out_lens", rows)
    check_outputs_alias_nothing([(out, "out"), (out_lens, "out_lens")], [
        (block_table, "block_table"), (query_start_loc, "query_start_loc"), (seq_lens, "seq_lens")])


_OP = SpecOp("dspark_swa_indices", _check, _reference)


def default_width(window: int, num_speculative_tokens: int) -> int:
    """window + num_speculative_tokens rounded up to a multiple of 128 (at least 128)."""
    return max(1, -(-(window + num_speculative_tokens) // WIDTH_ALIGNMENT)) * WIDTH_ALIGNMENT


def dspark_swa_indices(
    block_table: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    window: int,
    num_speculative_tokens: int,
    block_size: int,
    num_tokens: int | None = None,
    width: int | None = None,
    cp_size: int = 1,
    cp_rank: int = 0,
    out: torch.Tensor | None = None,
    out_lens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per token, the slots of the last `window` positions before its request's draft block
    plus the whole block: row r of request r (block_table row r) is the slots of positions
    start..seq_lens[r]-1 with start = max(seq_lens[r] - q_len - window, 0), then -1 up to width.

    Returns (indices int32 [rows, 1, width], lens int32 [rows]) with rows = num_tokens, or under
    cp_size > 1 this rank's slice of the stream padded to a multiple of cp_size, written
    directly. Token rows past the real tokens are -1 with lens 0. num_tokens defaults to
    query_start_loc[R]: pass it with device tensors, since reading it is a device-to-host copy.
    """
    if width is None or num_tokens is None or out is None or out_lens is None:
        # Defaults and allocations come from the int arguments and query_start_loc[R]: checked first.
        window = checked_int(window, "window")
        num_speculative_tokens = checked_int(num_speculative_tokens, "num_speculative_tokens")
        check_int32_range(window, "window", 0)
        check_int32_range(num_speculative_tokens, "num_speculative_tokens", 0)
        width = default_width(window, num_speculative_tokens) if width is None else checked_int(width, "width")
        num_tokens = host_token_count(query_start_loc) if num_tokens is None else checked_int(num_tokens, "num_tokens")
        check_tensor(block_table, "block_table", [torch.int32], 2)
        rows = _check_sizes(window, num_speculative_tokens, checked_int(block_size, "block_size"), num_tokens, width,
                            checked_int(cp_size, "cp_size"), checked_int(cp_rank, "cp_rank"))
        check_allocated_elements(rows, width, "width", "rows of num_tokens times width")
        if out is None:
            out = torch.empty((rows, 1, width), dtype=torch.int32, device=block_table.device)
        if out_lens is None:
            out_lens = torch.empty(rows, dtype=torch.int32, device=block_table.device)
    _OP.select()(block_table, query_start_loc, seq_lens, window, num_speculative_tokens, block_size, num_tokens, width,
        cp_size, cp_rank, out, out_lens)
    return out, out_lens
