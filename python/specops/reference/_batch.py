"""Batch helpers shared by the references."""

from __future__ import annotations

import torch


def request_of_each_token(query_start_loc: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """int64 [num_tokens]: the index of the request each token belongs to."""
    num_reqs = query_start_loc.numel() - 1
    query_lens = (query_start_loc[1:] - query_start_loc[:-1]).long()
    requests = torch.arange(num_reqs, device=query_start_loc.device)
    return torch.repeat_interleave(requests, query_lens, output_size=num_tokens)
