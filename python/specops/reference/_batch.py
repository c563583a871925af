"""Batch helpers shared by the references."""

from __future__ import annotations

import torch


def request_of_each_token(query_start_loc: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """int64 [num_tokens]: the index of the request each token belongs to, -1 for a token in no
    request (num_tokens need not be query_start_loc[R]: a fused op may cut the batch at its
    padded size, and an invalid call may claim more tokens than its requests hold)."""
    boundaries = query_start_loc.long()
    token = torch.arange(num_tokens, device=query_start_loc.device)
    request = torch.searchsorted(boundaries[1:], token, right=True)
    inside = (request < boundaries.numel() - 1) & (token >= boundaries[:1])
    return torch.where(inside, request, -1)
