"""post_update_after_sampling: the request state after a step (sampling or pooling mode)."""

from __future__ import annotations

import torch

from specops.ops._checks import check_entries, check_outputs_alias_nothing, check_rows_disjoint, check_tensor
from specops.ops._op import SpecOp
from specops.reference.post_update_after_sampling import post_update_after_sampling as _reference

_SAMPLING_GROUP = ("sampled_tokens", "num_sampled", "num_rejected", "last_sampled_tokens", "all_token_ids", "total_len")


def _check(idx_mapping: torch.Tensor, num_computed_tokens: torch.Tensor, query_start_loc: torch.Tensor | None,
           sampled_tokens: torch.Tensor | None, num_sampled: torch.Tensor | None, num_rejected: torch.Tensor | None,
           last_sampled_tokens: torch.Tensor | None, all_token_ids: torch.Tensor | None,
           total_len: torch.Tensor | None, output_bin_counts: torch.Tensor | None,
           draft_tokens: torch.Tensor | None, draft_tokens_out: torch.Tensor | None) -> None:
    """Mirrors csrc/cpu/post_update_after_sampling.cpp (metadata only)."""
    check_tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64], 1)
    device = idx_mapping.device
    num_reqs = idx_mapping.numel()
    check_tensor(num_computed_tokens, "num_computed_tokens", [torch.int32], 1, device, "idx_mapping")
    group = (sampled_tokens, num_sampled, num_rejected, last_sampled_tokens, all_token_ids, total_len)
    given = sum(t is not None for t in group)
    if given not in (0, 6):
        raise ValueError(f"{', '.join(_SAMPLING_GROUP[:-1])} and {_SAMPLING_GROUP[-1]} must be given together "
                         f"(sampling mode) or not at all (pooling mode), got {given} of them")
    sampling = given == 6
    if query_start_loc is not None:
        check_tensor(query_start_loc, "query_start_loc", [torch.int32], 1, device, "idx_mapping")
        check_entries(query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = idx_mapping.numel())")
    elif not sampling:
        raise ValueError("query_start_loc is required in pooling mode (no sampled_tokens)")
    if sampling:
        check_tensor(sampled_tokens, "sampled_tokens", [torch.int32, torch.int64], 2, device, "idx_mapping")
        if sampled_tokens.size(0) < num_reqs:
            raise ValueError(f"sampled_tokens must have at least R = {num_reqs} rows, got {sampled_tokens.size(0)}")
        for tensor, name in ((num_sampled, "num_sampled"), (num_rejected, "num_rejected")):
            check_tensor(tensor, name, [torch.int32], 1, device, "idx_mapping")
            check_entries(tensor, name, num_reqs, "R = idx_mapping.numel()")
        if not (last_sampled_tokens.dim() == 1 or (last_sampled_tokens.dim() == 2 and last_sampled_tokens.size(1) == 1)):
            raise ValueError(f"last_sampled_tokens must be [M] or [M, 1], got shape {list(last_sampled_tokens.shape)}")
        check_tensor(last_sampled_tokens, "last_sampled_tokens", [torch.int32, torch.int64], last_sampled_tokens.dim(),
                     device, "idx_mapping")
        check_tensor(all_token_ids, "all_token_ids", [torch.int32], 2, device, "idx_mapping")
        check_rows_disjoint(all_token_ids, "all_token_ids")
        check_tensor(total_len, "total_len", [torch.int32], 1, device, "idx_mapping")
        if output_bin_counts is not None:
            check_tensor(output_bin_counts, "output_bin_counts", [torch.int32], 2, device, "idx_mapping")
            check_rows_disjoint(output_bin_counts, "output_bin_counts")
    elif output_bin_counts is not None or draft_tokens is not None or draft_tokens_out is not None:
        raise ValueError("output_bin_counts, draft_tokens and draft_tokens_out need sampling mode (sampled_tokens)")
    if draft_tokens is not None and draft_tokens_out is None:
        raise ValueError("draft_tokens needs draft_tokens_out (the buffer its rows are stored into)")
    if draft_tokens_out is not None and draft_tokens is None:
        # vLLM's post_update is handed its draft buffer on every call and the received drafts only
        # on a non-last pipeline rank: without drafts nothing is stored there.
        check_tensor(draft_tokens_out, "draft_tokens_out", [torch.int32, torch.int64], 2, device, "idx_mapping")
    if draft_tokens is not None:
        check_tensor(draft_tokens, "draft_tokens", [torch.int32, torch.int64], 2, device, "idx_mapping")
        check_tensor(draft_tokens_out, "draft_tokens_out", [draft_tokens.dtype], 2, device, "idx_mapping")
        check_rows_disjoint(draft_tokens_out, "draft_tokens_out")
        if draft_tokens.size(0) < num_reqs:
            raise ValueError(f"draft_tokens must have at least R = {num_reqs} rows, got {draft_tokens.size(0)}")
        if draft_tokens.size(1) != draft_tokens_out.size(1):
            raise ValueError(f"draft_tokens_out must have the {draft_tokens.size(1)} columns of draft_tokens, "
                             f"got {draft_tokens_out.size(1)}")
    check_outputs_alias_nothing(
        [(num_computed_tokens, "num_computed_tokens"), (last_sampled_tokens, "last_sampled_tokens"),
         (all_token_ids, "all_token_ids"), (total_len, "total_len"), (output_bin_counts, "output_bin_counts"),
         (draft_tokens_out, "draft_tokens_out")],
        [(idx_mapping, "idx_mapping"), (query_start_loc, "query_start_loc"), (sampled_tokens, "sampled_tokens"),
         (num_sampled, "num_sampled"), (num_rejected, "num_rejected"), (draft_tokens, "draft_tokens")])


_OP = SpecOp("post_update_after_sampling", _check, _reference)


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
