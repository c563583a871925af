"""prepare_next_token_ids: the drafter's next token of every request, its valid sampled count,
and for the padded drafting path its rejected count and the token index to sample from."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import checked_size, padded_argument
from specops.ops._op import SpecOp
from specops.reference.prepare_next_token_ids import prepare_next_token_ids as _reference

__all__ = ["NextTokens", "prepare_next_token_ids"]


class NextTokens(NamedTuple):
    next_token_ids: torch.Tensor
    valid_sampled_token_count: torch.Tensor
    num_rejected_tokens: torch.Tensor | None  # with cu_num_draft_tokens and query_start_loc only
    token_indices_to_sample: torch.Tensor | None


_OP = SpecOp("prepare_next_token_ids", _reference)


def prepare_next_token_ids(
    sampled_token_ids: torch.Tensor,
    vocab_size: int,
    *,
    discard_request_mask: torch.Tensor | None = None,
    backup_next_token_ids: torch.Tensor | None = None,
    token_ids: torch.Tensor | None = None,
    num_tokens_no_spec: torch.Tensor | None = None,
    cu_num_draft_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    next_token_ids: torch.Tensor | None = None,
    valid_sampled_token_count: torch.Tensor | None = None,
    num_rejected_tokens: torch.Tensor | None = None,
    token_indices_to_sample: torch.Tensor | None = None,
    num_reqs_padded: int | None = None,
) -> NextTokens:
    """The drafter's next token of each of the R = sampled_token_ids.size(0) requests.

    A token is valid when 0 <= x < vocab_size. count[r] = the valid tokens of row r (0 for a
    discarded request); next[r] = the valid token of the highest column, or the backup when the
    request is discarded or has none. The backup is backup_next_token_ids[r], or gathered on the
    device: token_ids[r, num_tokens_no_spec[r] - 1] (-1 when that is outside the row). With
    cu_num_draft_tokens (inclusive prefix sums of the drafts per request) and query_start_loc,
    also num_rejected_tokens[r] = d + 1 - count[r] for a request with d > 0 drafts (else 0) and
    token_indices_to_sample[r] = max(qsl[r+1] - 1 - rejected, qsl[r]). Outputs int32, 0 in
    [R, num_reqs_padded) (default: each buffer's end), allocated [num_reqs_padded or R].
    """
    size = None

    def allocated() -> torch.Tensor:
        nonlocal size
        if size is None:
            size = (checked_size(num_reqs_padded, "num_reqs_padded", 0) if num_reqs_padded is not None
                    else sampled_token_ids.size(0) if isinstance(sampled_token_ids, torch.Tensor) else 0)
        return torch.empty(size, dtype=torch.int32, device=sampled_token_ids.device)

    if next_token_ids is None:
        next_token_ids = allocated()
    if valid_sampled_token_count is None:
        valid_sampled_token_count = allocated()
    if cu_num_draft_tokens is None and query_start_loc is None:
        # An optional output that its inputs do not turn on is None and not computed
        # (docs/step_bookkeeping.md, "Optional outputs"):
        # a runner's persistent buffers passed on a step without drafts.
        num_rejected_tokens = token_indices_to_sample = None
    if cu_num_draft_tokens is not None and query_start_loc is not None:
        if num_rejected_tokens is None:
            num_rejected_tokens = allocated()
        if token_indices_to_sample is None:
            token_indices_to_sample = allocated()
    num_reqs_padded = padded_argument(num_reqs_padded, "num_reqs_padded")
    _OP.select()(sampled_token_ids, vocab_size, discard_request_mask, backup_next_token_ids, token_ids,
        num_tokens_no_spec, cu_num_draft_tokens, query_start_loc, next_token_ids, valid_sampled_token_count,
        num_rejected_tokens, token_indices_to_sample, num_reqs_padded)
    return NextTokens(next_token_ids, valid_sampled_token_count, num_rejected_tokens, token_indices_to_sample)
