"""correct_optimistic_seq_lens: the host mirror of the count correction (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.correct_optimistic_seq_lens import correct_optimistic_seq_lens as _reference

__all__ = ["correct_optimistic_seq_lens"]



_OP = SpecOp("correct_optimistic_seq_lens", _reference)


def correct_optimistic_seq_lens(
    seq_lens_cpu: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
) -> None:
    """Gives back the rejected drafts the scheduler's seq_lens counted as accepted, in place.

    Rows i < n = prev_positions.numel() that continue a drafting row p of the previous batch
    (as in correct_num_computed_tokens, without the num_computed_tokens bound) get
    seq_lens_cpu[i] -= prev_num_draft_tokens[p] + 1 - valid_sampled_token_count[p]. seq_lens_cpu
    int32 or int64 (runners keep int64 host copies), valid_sampled_token_count int32 or int64
    (vllm-ascend's host copy is int64), prev_num_draft_tokens int32. The rejected count is
    computed in the valid counts' width and then taken in seq_lens_cpu's, both wrapping, as the
    peer's numpy does. On the host in a runner (any device works). Every read sees the values
    from before the call.
    """
    _OP.select()(seq_lens_cpu, prev_positions, valid_sampled_token_count, prev_num_draft_tokens)
