"""Reference for count_sampled_and_rejected: what the sampler kept, per request."""

from __future__ import annotations

import torch


def count_sampled_and_rejected(
    num_sampled: torch.Tensor, seq_lens: torch.Tensor, cu_num_logits: torch.Tensor, idx_mapping: torch.Tensor,
    prefill_len: torch.Tensor, num_rejected: torch.Tensor, num_reqs_padded: int,
) -> None:
    num_reqs = idx_mapping.numel()
    row = idx_mapping.long()
    has_row = (row >= 0) & (row < prefill_len.numel())
    row_prefill = prefill_len.long()[row.where(has_row, 0)] if prefill_len.numel() else torch.zeros_like(row)
    counted = has_row & (seq_lens[:num_reqs].long() >= row_prefill)
    sampled = num_sampled[:num_reqs].long()
    num_logits = cu_num_logits[1:].long() - cu_num_logits[:-1].long()
    rejected = (num_logits - sampled).where(counted, 0)
    num_sampled[:num_reqs] = sampled.where(counted, 0).to(torch.int32)
    num_rejected[:num_reqs] = rejected.to(torch.int32)
    num_sampled[num_reqs:num_sampled.numel() if num_reqs_padded < 0 else num_reqs_padded] = 0
    num_rejected[num_reqs:num_rejected.numel() if num_reqs_padded < 0 else num_reqs_padded] = 0
