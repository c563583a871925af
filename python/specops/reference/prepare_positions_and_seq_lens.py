"""Reference for prepare_positions_and_seq_lens (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.reference._batch import request_of_each_token


def prepare_positions_and_seq_lens(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_reqs = a.query_start_loc.numel() - 1
    # Device kernels never write past num_tokens_padded, even when query_start_loc says more;
    # a negative query_start_loc[R] (an invalid batch) has no real token.
    num_tokens = max(0, min(int(a.query_start_loc[num_reqs]), a.num_tokens_padded))
    if a.idx_mapping is None:
        counts = a.num_computed_tokens[:num_reqs]
    else:
        # Request-indexed counts; a request without a row (-1) has computed nothing.
        counts = torch.tensor([int(a.num_computed_tokens[row]) if 0 <= row < a.num_computed_tokens.numel() else 0
                               for row in a.idx_mapping.tolist()], dtype=torch.int32, device=a.num_computed_tokens.device)
    request = request_of_each_token(a.query_start_loc, num_tokens)
    token = torch.arange(num_tokens, device=a.positions.device)
    # A token in no request (-1: only an invalid query_start_loc has one) gets position 0.
    first = counts.long() - a.query_start_loc[:num_reqs].long()
    in_request = request >= 0
    position = first[request.clamp(min=0)] + token if num_reqs else torch.zeros_like(token)
    a.positions[:num_tokens] = torch.where(in_request, position, 0).to(a.positions.dtype)
    a.positions[num_tokens:a.num_tokens_padded] = 0
    a.seq_lens[:num_reqs] = counts + (a.query_start_loc[1:] - a.query_start_loc[:-1])
    a.seq_lens[num_reqs:a.num_reqs_padded] = 0
