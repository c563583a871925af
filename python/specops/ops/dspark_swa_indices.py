"""dspark_swa_indices: the KV slots each DSpark draft-block token may attend to (docs/context_parallel.md)."""

from __future__ import annotations

import torch

from specops._cp import cp_token_split
from specops.arguments import check_allocated_elements, checked_int, query_start_loc_tokens
from specops.ops._op import SpecOp
from specops.reference.dspark_swa_indices import dspark_swa_indices as _reference

__all__ = ["dspark_swa_indices"]

WIDTH_ALIGNMENT = 128


_OP = SpecOp("dspark_swa_indices", _reference)


def local_rows(num_tokens: int, cp_size: int, cp_rank: int) -> int:
    """The rows of this rank's slice of num_tokens tokens (0 where the op rejects the split)."""
    if cp_size < 1 or not 0 <= cp_rank < cp_size or num_tokens < 0:
        return 0
    return cp_token_split(num_tokens, cp_size, cp_rank).tokens_per_rank


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
        # Defaults and allocations come from the int arguments and query_start_loc[R] (read on the
        # host after its own checks); sizes the op rejects allocate nothing past the bound on
        # what a wrapper allocates, and the op names them.
        window = checked_int(window, "window")
        num_speculative_tokens = checked_int(num_speculative_tokens, "num_speculative_tokens")
        width = default_width(window, num_speculative_tokens) if width is None else checked_int(width, "width")
        num_tokens = query_start_loc_tokens(query_start_loc) if num_tokens is None else \
            checked_int(num_tokens, "num_tokens")
        rows = local_rows(num_tokens, checked_int(cp_size, "cp_size"), checked_int(cp_rank, "cp_rank"))
        check_allocated_elements(rows, width, "width", "rows of num_tokens times width")
        device = block_table.device if isinstance(block_table, torch.Tensor) else None
        if out is None:
            out = torch.empty((rows, 1, max(width, 0)), dtype=torch.int32, device=device)
        if out_lens is None:
            out_lens = torch.empty(rows, dtype=torch.int32, device=device)
    _OP.select()(block_table, query_start_loc, seq_lens, window, num_speculative_tokens, block_size, num_tokens, width,
        cp_size, cp_rank, out, out_lens)
    return out, out_lens
