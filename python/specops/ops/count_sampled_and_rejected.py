"""count_sampled_and_rejected: what the sampler kept, per request of the step."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import checked_size, padded_argument
from specops.ops._op import SpecOp
from specops.reference.count_sampled_and_rejected import count_sampled_and_rejected as _reference

__all__ = ["SampledCounts", "count_sampled_and_rejected"]


class SampledCounts(NamedTuple):
    num_sampled: torch.Tensor
    num_rejected: torch.Tensor



_OP = SpecOp("count_sampled_and_rejected", _reference)


def count_sampled_and_rejected(
    num_sampled: torch.Tensor,
    seq_lens: torch.Tensor,
    cu_num_logits: torch.Tensor,
    idx_mapping: torch.Tensor,
    prefill_len: torch.Tensor,
    *,
    num_rejected: torch.Tensor | None = None,
    num_reqs_padded: int | None = None,
) -> SampledCounts:
    """What the sampler kept, per request: `num_sampled` (int32 [>= R], R = idx_mapping.numel(),
    the tokens the sampler or rejection sampler kept) is zeroed in place for a request still
    prefilling (`seq_lens[r] < prefill_len[idx_mapping[r]]`, strictly, or no request row), and
    `num_rejected[r] = (cu_num_logits[r+1] - cu_num_logits[r]) - num_sampled[r]` for the others
    (0 for a prefilling one). seq_lens int32 batch-indexed; prefill_len int32 request-indexed;
    cu_num_logits int32 [R + 1]. Both outputs are 0 in [R, num_reqs_padded) (default: each
    buffer's end); num_rejected is allocated [num_reqs_padded or R] when absent. The host op
    rejects a kept count outside [0, logits of the request] and a row past prefill_len.
    """
    if num_rejected is None:
        size = (checked_size(num_reqs_padded, "num_reqs_padded", 0) if num_reqs_padded is not None
                else idx_mapping.numel() if isinstance(idx_mapping, torch.Tensor) else 0)
        num_rejected = torch.empty(size, dtype=torch.int32, device=num_sampled.device)
    num_reqs_padded = padded_argument(num_reqs_padded, "num_reqs_padded")
    _OP.select()(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len, num_rejected, num_reqs_padded)
    return SampledCounts(num_sampled, num_rejected)
