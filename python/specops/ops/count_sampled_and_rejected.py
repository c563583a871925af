"""count_sampled_and_rejected: what the sampler kept, per request of the step."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.ops._checks import check_entries, check_outputs_alias_nothing, check_tensor, checked_size
from specops.ops._op import SpecOp
from specops.ops._step_checks import padded_argument, padded_end
from specops.reference.count_sampled_and_rejected import count_sampled_and_rejected as _reference


class SampledCounts(NamedTuple):
    num_sampled: torch.Tensor
    num_rejected: torch.Tensor


def _check(num_sampled: torch.Tensor, seq_lens: torch.Tensor, cu_num_logits: torch.Tensor, idx_mapping: torch.Tensor,
           prefill_len: torch.Tensor, num_rejected: torch.Tensor, num_reqs_padded: int) -> None:
    """Mirrors csrc/cpu/count_sampled_and_rejected.cpp (metadata only)."""
    check_tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64], 1)
    device = idx_mapping.device
    num_reqs = idx_mapping.numel()
    for tensor, name in ((num_sampled, "num_sampled"), (seq_lens, "seq_lens"), (cu_num_logits, "cu_num_logits"),
                         (prefill_len, "prefill_len"), (num_rejected, "num_rejected")):
        check_tensor(tensor, name, [torch.int32], 1, device, "idx_mapping")
    for tensor, name in ((num_sampled, "num_sampled"), (seq_lens, "seq_lens"), (num_rejected, "num_rejected")):
        check_entries(tensor, name, num_reqs, "R = idx_mapping.numel()")
    if cu_num_logits.numel() != num_reqs + 1:
        raise ValueError(f"cu_num_logits must have R + 1 = {num_reqs + 1} entries (R = idx_mapping.numel()), "
                         f"got {cu_num_logits.numel()}")
    if num_reqs_padded >= 0:
        padded_end(num_sampled, "num_sampled", num_reqs_padded, "num_reqs_padded", num_reqs, "R")
        padded_end(num_rejected, "num_rejected", num_reqs_padded, "num_reqs_padded", num_reqs, "R")
    check_outputs_alias_nothing(
        [(num_sampled, "num_sampled"), (num_rejected, "num_rejected")],
        [(seq_lens, "seq_lens"), (cu_num_logits, "cu_num_logits"), (idx_mapping, "idx_mapping"),
         (prefill_len, "prefill_len")])


_OP = SpecOp("count_sampled_and_rejected", _check, _reference)


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
    _OP.select()(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len, num_rejected,
                 padded_argument(num_reqs_padded, "num_reqs_padded"))
    return SampledCounts(num_sampled, num_rejected)
