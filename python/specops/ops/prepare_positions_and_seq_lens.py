"""prepare_positions_and_seq_lens: positions and seq_lens from the device counts (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.arguments import checked_size, query_start_loc_tokens
from specops.ops._op import SpecOp
from specops.reference.prepare_positions_and_seq_lens import prepare_positions_and_seq_lens as _reference

__all__ = ["prepare_positions_and_seq_lens"]

_OP = SpecOp("prepare_positions_and_seq_lens", _reference)


def allocate_positions_and_seq_lens(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor | None,
    seq_lens: torch.Tensor | None,
    num_tokens_padded: int | None,
    num_reqs_padded: int | None,
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The outputs the caller did not pass, and the padded sizes they imply. Every size is
    checked before it allocates anything."""
    num_reqs = query_start_loc.numel() - 1 if isinstance(query_start_loc, torch.Tensor) else 0
    device = query_start_loc.device if isinstance(query_start_loc, torch.Tensor) else None
    if positions is None:
        if num_tokens_padded is None:
            # Without a buffer or a padded size, the token count is query_start_loc[R]: a host read.
            size = query_start_loc_tokens(query_start_loc)
        else:
            size = num_tokens_padded = checked_size(num_tokens_padded, "num_tokens_padded", 0)
        positions = torch.empty(size, dtype=torch.int64, device=device)
    if seq_lens is None:
        if num_reqs_padded is None:
            size = num_reqs
        else:
            size = num_reqs_padded = checked_size(num_reqs_padded, "num_reqs_padded", num_reqs,
                                                  f"R = query_start_loc.numel() - 1 = {num_reqs}")
        seq_lens = torch.empty(size, dtype=torch.int32, device=device)
    if num_tokens_padded is None:
        num_tokens_padded = positions.numel()
    if num_reqs_padded is None:
        num_reqs_padded = seq_lens.numel()
    return positions, seq_lens, num_tokens_padded, num_reqs_padded


def prepare_positions_and_seq_lens(
    num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    *,
    positions: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    num_tokens_padded: int | None = None,
    num_reqs_padded: int | None = None,
    idx_mapping: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """positions[t] = num_computed_tokens[r] + (t - query_start_loc[r]); seq_lens[r] = num_computed_tokens[r] + query_len[r].

    num_computed_tokens: int32 [>= R]; query_start_loc: int32 [R + 1]; positions: int64 or int32
    (allocated as int64 [num_tokens_padded, else query_start_loc[R], a host read] when absent);
    seq_lens: int32 (allocated [num_reqs_padded or R]). positions[T:num_tokens_padded] and
    seq_lens[R:num_reqs_padded] are 0 (defaults: the buffers' sizes).

    idx_mapping: int32 or int64 [R], for request-indexed counts (a runner's persistent
    per-request state): request r then reads num_computed_tokens[idx_mapping[r]] in place of
    num_computed_tokens[r], and a request without a row (-1) counts 0. The native CPU op rejects
    a row past num_computed_tokens; device kernels count 0 for it.
    """
    positions, seq_lens, num_tokens_padded, num_reqs_padded = allocate_positions_and_seq_lens(
        query_start_loc, positions, seq_lens, num_tokens_padded, num_reqs_padded)
    _OP.select()(num_computed_tokens, query_start_loc, positions, seq_lens, num_tokens_padded, num_reqs_padded,
        idx_mapping)
    return positions, seq_lens
