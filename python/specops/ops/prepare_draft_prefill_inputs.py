"""prepare_draft_prefill_inputs: the draft model's prefill inputs after a target step (model runner
V2's speculator), with the drafter's copy of the request mapping fused in, and optionally the
request state's update after sampling (post_update_after_sampling) before it in the same call."""

from __future__ import annotations

import torch

from specops.ops._op import SpecOp
from specops.reference.prepare_draft_prefill_inputs import prepare_draft_prefill_inputs as _reference

__all__ = ["prepare_draft_prefill_inputs"]

_WHAT_R = "R = idx_mapping.numel()"
_WHAT_R1 = "R + 1 (R = idx_mapping.numel())"
_IDS = [torch.int32, torch.int64]
_POSITIONS = [torch.int64, torch.int32]


_OP = SpecOp("prepare_draft_prefill_inputs", _reference)


def prepare_draft_prefill_inputs(
    target_input_ids: torch.Tensor,
    target_positions: torch.Tensor,
    idx_mapping: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    num_sampled: torch.Tensor,
    num_rejected: torch.Tensor,
    last_sampled_tokens: torch.Tensor,
    next_prefill_tokens: torch.Tensor,
    *,
    input_ids: torch.Tensor,
    positions: torch.Tensor,
    out_query_start_loc: torch.Tensor,
    out_seq_lens: torch.Tensor,
    last_token_indices: torch.Tensor,
    current_draft_step: torch.Tensor | None = None,
    request_idx_mapping: torch.Tensor | None = None,
    num_computed_tokens: torch.Tensor | None = None,
    sampled_tokens: torch.Tensor | None = None,
    all_token_ids: torch.Tensor | None = None,
    total_len: torch.Tensor | None = None,
    output_bin_counts: torch.Tensor | None = None,
) -> None:
    """The draft model's prefill inputs, written into the drafter's persistent buffers (all given:
    their sizes are the runner's max_num_tokens and max_num_reqs, which no argument here names).

    For each of the R = idx_mapping.numel() requests, with s = query_start_loc[r] and
    q = query_start_loc[r+1] - s - num_rejected[r] kept tokens: input_ids[s : s+q-1] =
    target_input_ids[s+1 : s+q] and input_ids[s+q-1] = the next token (int32: last_sampled_tokens[row]
    if num_sampled[r] > 0, else next_prefill_tokens[row], row 0 of an [L, M] one; row =
    idx_mapping[r]); positions[s : s+q] = target_positions[s : s+q]; last_token_indices[r] =
    s + q - 1; out_query_start_loc[r] = s; out_seq_lens[r] = seq_lens[r]. Past R, to each
    buffer's end: out_query_start_loc = query_start_loc[R], out_seq_lens and last_token_indices 0.
    current_draft_step (0-D or [1]) is set to 0 and request_idx_mapping to idx_mapping, -1 past R,
    when given. The rejected tokens' entries and those past query_start_loc[R] are left as they
    were. The host op rejects a request keeping no token (num_rejected outside [0, query length -
    1]), a row outside last_sampled_tokens or next_prefill_tokens, query_start_loc not from 0 or
    decreasing, and query_start_loc[R] past a token buffer; the device paths clamp the kept count
    into [0, query length], write -1 as a bad row's next token and access no token outside its
    buffer.

    The post-update part (sampled_tokens given, with num_computed_tokens, all_token_ids and
    total_len; output_bin_counts optional): first what post_update_after_sampling(idx_mapping,
    num_computed_tokens, query_start_loc=query_start_loc, sampled_tokens=sampled_tokens,
    num_sampled=num_sampled, num_rejected=num_rejected, last_sampled_tokens=last_sampled_tokens,
    all_token_ids=all_token_ids, total_len=total_len, output_bin_counts=output_bin_counts) writes,
    then the prefill's inputs from the last_sampled_tokens it leaves, in the same call (one launch
    on a device: each request's prefill reads only its own row's update). Every output of the call
    is kept apart from every input and every other output; the host op checks both parts' values
    before writing anything.
    """
    _OP.select()(target_input_ids, target_positions, idx_mapping, query_start_loc, seq_lens, num_sampled, num_rejected,
        last_sampled_tokens, next_prefill_tokens, input_ids, positions, out_query_start_loc, out_seq_lens,
        last_token_indices, current_draft_step, request_idx_mapping, num_computed_tokens, sampled_tokens,
        all_token_ids, total_len, output_bin_counts)
