"""Reference for prepare_draft_prefill_inputs: the draft prefill's inputs after a target step (after
the post-update part's reference, when given)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from specops.reference.post_update_after_sampling import post_update_after_sampling


def prepare_draft_prefill_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    if a.sampled_tokens is not None:
        post_update_after_sampling(SimpleNamespace(
            idx_mapping=a.idx_mapping, num_computed_tokens=a.num_computed_tokens, query_start_loc=a.query_start_loc,
            sampled_tokens=a.sampled_tokens, num_sampled=a.num_sampled, num_rejected=a.num_rejected,
            last_sampled_tokens=a.last_sampled_tokens, all_token_ids=a.all_token_ids, total_len=a.total_len,
            output_bin_counts=a.output_bin_counts, draft_tokens=None, draft_tokens_out=None))
    num_reqs = a.idx_mapping.numel()
    device = a.idx_mapping.device
    qsl = a.query_start_loc[:num_reqs + 1].long()
    start = qsl[:-1]
    query_len = (qsl[1:] - start).clamp(min=0)
    kept = torch.minimum((query_len - a.num_rejected[:num_reqs].long()).clamp(min=0), query_len)
    row = a.idx_mapping.long()
    last_rows = a.last_sampled_tokens.size(0)
    prefill_row0 = a.next_prefill_tokens if a.next_prefill_tokens.dim() == 1 else a.next_prefill_tokens[0]
    num_rows = min(last_rows, prefill_row0.numel())
    has_row = (row >= 0) & (row < num_rows)
    safe_row = row.where(has_row, 0)
    sampled = a.last_sampled_tokens.reshape(-1)  # [M] or [M, 1]: row r's element
    if num_rows:
        from_sampled = sampled.long()[safe_row]
        from_prefill = prefill_row0.long()[safe_row]
    else:
        from_sampled = from_prefill = torch.zeros_like(row)
    next_token = from_sampled.where(a.num_sampled[:num_reqs] > 0, from_prefill)
    # vLLM casts the sampled token to int32; a row outside the request rows gets -1.
    next_token = next_token.to(torch.int32).long().where(has_row, -1)

    # Token j of request r sits at start + j, kept for j < kept. Only tokens inside some buffer can
    # be accessed: each request's j is walked over [lo, hi), its kept tokens in [0, bound), so an
    # invalid layout (the device paths' input) never enumerates more than the buffers hold.
    bound = max(a.target_input_ids.numel(), a.input_ids.numel(), a.target_positions.numel(), a.positions.numel())
    lo = torch.minimum((-start).clamp(min=0), kept)
    hi = torch.maximum(torch.minimum(kept, bound - start), lo)
    count = hi - lo
    request = torch.repeat_interleave(torch.arange(num_reqs, device=device), count)
    j = lo[request] + torch.arange(request.numel(), device=device) - torch.repeat_interleave(count.cumsum(0) - count,
                                                                                            count)
    t = start[request] + j
    # Shifted ids: target id t goes to t - 1 for 1 <= j (both inside their buffers: with start < 0,
    # t - 1 may be -1, which indexing would take as the last entry).
    shift = (j >= 1) & (t >= 1) & (t < a.target_input_ids.numel()) & (t - 1 < a.input_ids.numel())
    a.input_ids[t[shift] - 1] = a.target_input_ids[t[shift]].to(a.input_ids.dtype)
    last = start + kept - 1
    writes_next = (kept >= 1) & (last >= 0) & (last < a.input_ids.numel())
    a.input_ids[last[writes_next]] = next_token[writes_next].to(a.input_ids.dtype)
    copy = t < min(a.target_positions.numel(), a.positions.numel())
    a.positions[t[copy]] = a.target_positions[t[copy]].to(a.positions.dtype)
    a.last_token_indices[:num_reqs] = last.to(a.last_token_indices.dtype) if a.last_token_indices.dtype == torch.int64 \
        else _low32(last)
    a.last_token_indices[num_reqs:] = 0
    a.out_query_start_loc[:num_reqs] = a.query_start_loc[:num_reqs]
    a.out_query_start_loc[num_reqs:] = a.query_start_loc[num_reqs]
    a.out_seq_lens[:num_reqs] = a.seq_lens[:num_reqs]
    a.out_seq_lens[num_reqs:] = 0
    if a.current_draft_step is not None:
        a.current_draft_step.fill_(0)
    if a.request_idx_mapping is not None:
        a.request_idx_mapping[:num_reqs] = a.idx_mapping.to(a.request_idx_mapping.dtype)
        a.request_idx_mapping[num_reqs:] = -1


def _low32(values: torch.Tensor) -> torch.Tensor:
    """int64 values as an int32 store keeps them: the low 32 bits."""
    return ((values & 0xFFFFFFFF) ^ 0x80000000).sub(0x80000000).to(torch.int32)
