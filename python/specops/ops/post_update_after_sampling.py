"""post_update_after_sampling: the request state after a step (sampling or pooling mode)."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.post_update_after_sampling import post_update_after_sampling as _reference

__all__ = ["post_update_after_sampling"]

_SAMPLING_GROUP = ("sampled_tokens", "num_sampled", "num_rejected", "last_sampled_tokens", "all_token_ids", "total_len")


_OP = SpecOp("post_update_after_sampling", _reference)


def post_update_after_sampling(
    idx_mapping: torch.Tensor,
    num_computed_tokens: torch.Tensor,
    *,
    query_start_loc: torch.Tensor | None = None,
    sampled_tokens: torch.Tensor | None = None,
    num_sampled: torch.Tensor | None = None,
    num_rejected: torch.Tensor | None = None,
    last_sampled_tokens: torch.Tensor | None = None,
    all_token_ids: torch.Tensor | None = None,
    total_len: torch.Tensor | None = None,
    output_bin_counts: torch.Tensor | None = None,
    draft_tokens: torch.Tensor | None = None,
    draft_tokens_out: torch.Tensor | None = None,
) -> None:
    """Updates the request state of every batch row r with a request row (idx_mapping[r] >= 0).

    Sampling mode (sampled_tokens [R, S], num_sampled, num_rejected, last_sampled_tokens,
    all_token_ids [M, W] and total_len all given): the ns = num_sampled[r] kept tokens are
    appended to all_token_ids[row] at total_len[row] and counted in output_bin_counts (if given),
    the last one becomes last_sampled_tokens[row], total_len grows by ns, and
    num_computed_tokens[row] grows by the query length (0 without query_start_loc) minus
    num_rejected[r]; draft_tokens[r] is stored as draft_tokens_out[row] when given
    (draft_tokens_out alone, as vLLM's post_update passes it without drafts: nothing is stored). Pooling mode
    (those six None): num_computed_tokens[row] grows by the query length. The host op rejects a
    repeated request row, a kept count outside [0, S], tokens past W and, with bins, a kept token
    outside the vocabulary.
    """
    _OP.select()(idx_mapping, num_computed_tokens, query_start_loc, sampled_tokens, num_sampled, num_rejected,
        last_sampled_tokens, all_token_ids, total_len, output_bin_counts, draft_tokens, draft_tokens_out)
