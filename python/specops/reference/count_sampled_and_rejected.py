"""Reference for count_sampled_and_rejected: what the sampler kept, per request."""

from __future__ import annotations

import torch


def count_sampled_and_rejected(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_reqs = a.idx_mapping.numel()
    row = a.idx_mapping.long()
    has_row = (row >= 0) & (row < a.prefill_len.numel())
    row_prefill = a.prefill_len.long()[row.where(has_row, 0)] if a.prefill_len.numel() else torch.zeros_like(row)
    counted = has_row & (a.seq_lens[:num_reqs].long() >= row_prefill)
    sampled = a.num_sampled[:num_reqs].long()
    num_logits = a.cu_num_logits[1:].long() - a.cu_num_logits[:-1].long()
    rejected = (num_logits - sampled).where(counted, 0)
    a.num_sampled[:num_reqs] = sampled.where(counted, 0).to(torch.int32)
    a.num_rejected[:num_reqs] = rejected.to(torch.int32)
    a.num_sampled[num_reqs:a.num_sampled.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded] = 0
    a.num_rejected[num_reqs:a.num_rejected.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded] = 0
