"""correct_num_computed_tokens: the device's token counts after async spec-decode (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens as _reference

__all__ = ["correct_num_computed_tokens"]

_OP = SpecOp("correct_num_computed_tokens", _reference)


def correct_num_computed_tokens(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
) -> None:
    """Corrects the device's token counts in place, moving rows to the new batch layout.

    For each row i < n = prev_positions.numel() with p = prev_positions[i]: if p is a row of the
    previous batch (0 <= p < len(valid_sampled_token_count), len(prev_num_draft_tokens),
    len(num_computed_tokens)) that drafted (prev_num_draft_tokens[p] > 0),
    num_computed_tokens[i] = old num_computed_tokens[p] + valid_sampled_token_count[p] and
    num_accepted_tokens[i] = valid_sampled_token_count[p]; otherwise num_computed_tokens[i] =
    cpu_num_computed_tokens[i] (the scheduler's count, on the op's device) and
    num_accepted_tokens[i] is unchanged. Every read sees the values from before the call, so
    inputs may alias the outputs; the two outputs must not overlap. The outputs and
    prev_num_draft_tokens are int32; prev_positions, valid_sampled_token_count (vllm-ascend's is
    int64) and cpu_num_computed_tokens int32 or int64, in any mix. An int64 count enters the
    int32 arithmetic by its low 32 bits, as the peer's `.int()` and its copy into the int32
    outputs take it.
    """
    _OP.select()(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
        prev_num_draft_tokens, cpu_num_computed_tokens)
