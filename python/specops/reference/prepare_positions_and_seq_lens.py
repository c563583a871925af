"""Reference for prepare_positions_and_seq_lens (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.reference._batch import request_of_each_token


def prepare_positions_and_seq_lens(
    num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    num_tokens_padded: int,
    num_reqs_padded: int,
    idx_mapping: torch.Tensor | None = None,
) -> None:
    num_reqs = query_start_loc.numel() - 1
    # Device kernels never write past num_tokens_padded, even when query_start_loc says more;
    # a negative query_start_loc[R] (an invalid batch) has no real token.
    num_tokens = max(0, min(int(query_start_loc[num_reqs]), num_tokens_padded))
    if idx_mapping is None:
        counts = num_computed_tokens[:num_reqs]
    else:
        # Request-indexed counts; a request without a row (-1) has computed nothing.
        counts = torch.tensor([int(num_computed_tokens[row]) if 0 <= row < num_computed_tokens.numel() else 0
                               for row in idx_mapping.tolist()], dtype=torch.int32, device=num_computed_tokens.device)
    request = request_of_each_token(query_start_loc, num_tokens)
    token = torch.arange(num_tokens, device=positions.device)
    # A token in no request (-1: only an invalid query_start_loc has one) gets position 0.
    first = counts.long() - query_start_loc[:num_reqs].long()
    in_request = request >= 0
    position = first[request.clamp(min=0)] + token if num_reqs else torch.zeros_like(token)
    positions[:num_tokens] = torch.where(in_request, position, 0).to(positions.dtype)
    positions[num_tokens:num_tokens_padded] = 0
    seq_lens[:num_reqs] = counts + (query_start_loc[1:] - query_start_loc[:-1])
    seq_lens[num_reqs:num_reqs_padded] = 0
