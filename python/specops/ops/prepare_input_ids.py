"""prepare_input_ids: the step's input ids (prompt chunk, last sampled token, drafts) and its
logits indices, in one op call."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import checked_size, padded_argument
from specops.ops._op import SpecOp
from specops.reference.prepare_input_ids import prepare_input_ids as _reference

__all__ = ["StepInputIds", "prepare_input_ids"]


class StepInputIds(NamedTuple):
    logits_indices: torch.Tensor
    expanded_idx_mapping: torch.Tensor
    expanded_local_pos: torch.Tensor


_OP = SpecOp("prepare_input_ids", _reference)


def prepare_input_ids(
    input_ids: torch.Tensor,
    idx_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    num_computed_tokens: torch.Tensor,
    prefill_len: torch.Tensor,
    last_sampled_tokens: torch.Tensor,
    draft_tokens: torch.Tensor,
    cu_num_logits: torch.Tensor,
    *,
    num_new_sampled_tokens: int = 1,
    all_token_ids: torch.Tensor | None = None,
    next_prefill_tokens: torch.Tensor | None = None,
    logits_indices: torch.Tensor | None = None,
    expanded_idx_mapping: torch.Tensor | None = None,
    expanded_local_pos: torch.Tensor | None = None,
    num_logits: int | None = None,
    num_logits_padded: int | None = None,
    num_tokens_padded: int | None = None,
) -> StepInputIds:
    """The verify pass's input ids, written into `input_ids`, and its logits indices.

    For batch row r (request row `idx_mapping[r]`, -1: none) with query [q0, q1) and
    n_log = cu_num_logits[r+1] - cu_num_logits[r] logits: logits_indices[cu[r] + j] =
    q1 - n_log + j, expanded_idx_mapping[...] = row, expanded_local_pos[...] = j. A prefilling
    request (num_computed_tokens < prefill_len, with all_token_ids and next_prefill_tokens given)
    copies its prompt chunk and its next prompt tokens (next_prefill_tokens[k, row], lookahead-
    major); a request with generated tokens (num_computed_tokens + query length > prefill_len)
    then puts its last sampled token at q1 - n_log (num_new_sampled_tokens = 1, that position past
    the prefill) and its n_log - num_new_sampled_tokens drafts after it. input_ids is zeroed in
    [T, num_tokens_padded) (default: nothing past T = query_start_loc[R]); the logits outputs are
    0 (expanded_idx_mapping -1) in [cu[R], num_logits_padded) (default: each buffer's end).
    Absent logits outputs are allocated with num_logits entries (docs/step_bookkeeping.md,
    "Optional outputs"; default cu[R], a host read), whatever num_logits_padded says (it then
    stops their padding, at most there).
    The host op rejects every read the formulas would make out of bounds.
    """
    if logits_indices is None or expanded_idx_mapping is None or expanded_local_pos is None:
        if num_logits is not None:
            size = checked_size(num_logits, "num_logits", 0)
        else:
            size = max(int(cu_num_logits[-1]), 0) if cu_num_logits.numel() else 0
        padded = padded_argument(num_logits_padded, "num_logits_padded")
        if padded > size:
            # Said here, naming what the caller passed, not later as "past logits_indices".
            default = "" if num_logits is not None else " (default cu_num_logits[R])"
            raise ValueError(f"num_logits_padded must be <= num_logits = {size}{default}: absent logits outputs are "
                             f"allocated with num_logits entries, got {padded}")
        device = input_ids.device
        if logits_indices is None:
            logits_indices = torch.empty(size, dtype=torch.int64, device=device)
        if expanded_idx_mapping is None:
            expanded_idx_mapping = torch.empty(size, dtype=idx_mapping.dtype, device=device)
        if expanded_local_pos is None:
            expanded_local_pos = torch.empty(size, dtype=torch.int32, device=device)
    num_logits_padded = padded_argument(num_logits_padded, "num_logits_padded")
    num_tokens_padded = padded_argument(num_tokens_padded, "num_tokens_padded")
    _OP.select()(input_ids, idx_mapping, query_start_loc, num_computed_tokens, prefill_len, last_sampled_tokens,
        draft_tokens, cu_num_logits, num_new_sampled_tokens, all_token_ids, next_prefill_tokens, logits_indices,
        expanded_idx_mapping, expanded_local_pos, num_logits_padded, num_tokens_padded)
    return StepInputIds(logits_indices, expanded_idx_mapping, expanded_local_pos)
