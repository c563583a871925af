"""Reference for prepare_draft_prefill_inputs: the draft prefill's inputs after a target step."""

from __future__ import annotations

import torch


def prepare_draft_prefill_inputs(
    target_input_ids: torch.Tensor, target_positions: torch.Tensor, idx_mapping: torch.Tensor,
    query_start_loc: torch.Tensor, seq_lens: torch.Tensor, num_sampled: torch.Tensor, num_rejected: torch.Tensor,
    last_sampled_tokens: torch.Tensor, next_prefill_tokens: torch.Tensor, input_ids: torch.Tensor,
    positions: torch.Tensor, out_query_start_loc: torch.Tensor, out_seq_lens: torch.Tensor,
    last_token_indices: torch.Tensor, current_draft_step: torch.Tensor | None,
    request_idx_mapping: torch.Tensor | None,
) -> None:
    num_reqs = idx_mapping.numel()
    device = idx_mapping.device
    qsl = query_start_loc[:num_reqs + 1].long()
    start = qsl[:-1]
    query_len = (qsl[1:] - start).clamp(min=0)
    kept = torch.minimum((query_len - num_rejected[:num_reqs].long()).clamp(min=0), query_len)
    row = idx_mapping.long()
    last_rows = last_sampled_tokens.size(0)
    prefill_row0 = next_prefill_tokens if next_prefill_tokens.dim() == 1 else next_prefill_tokens[0]
    num_rows = min(last_rows, prefill_row0.numel())
    has_row = (row >= 0) & (row < num_rows)
    safe_row = row.where(has_row, 0)
    sampled = last_sampled_tokens.reshape(-1)  # [M] or [M, 1]: row r's element
    if num_rows:
        from_sampled = sampled.long()[safe_row]
        from_prefill = prefill_row0.long()[safe_row]
    else:
        from_sampled = from_prefill = torch.zeros_like(row)
    next_token = from_sampled.where(num_sampled[:num_reqs] > 0, from_prefill)
    # vLLM casts the sampled token to int32; a row outside the request rows gets -1.
    next_token = next_token.to(torch.int32).long().where(has_row, -1)

    # Token j of request r sits at start + j, kept for j < kept. Only tokens inside some buffer can
    # be accessed: each request's j is walked over [lo, hi), its kept tokens in [0, bound), so an
    # invalid layout (the device paths' input) never enumerates more than the buffers hold.
    bound = max(target_input_ids.numel(), input_ids.numel(), target_positions.numel(), positions.numel())
    lo = torch.minimum((-start).clamp(min=0), kept)
    hi = torch.maximum(torch.minimum(kept, bound - start), lo)
    count = hi - lo
    request = torch.repeat_interleave(torch.arange(num_reqs, device=device), count)
    j = lo[request] + torch.arange(request.numel(), device=device) - torch.repeat_interleave(count.cumsum(0) - count,
                                                                                            count)
    t = start[request] + j
    # Shifted ids: target id t goes to t - 1 for 1 <= j (both inside their buffers: with start < 0,
    # t - 1 may be -1, which indexing would take as the last entry).
    shift = (j >= 1) & (t >= 1) & (t < target_input_ids.numel()) & (t - 1 < input_ids.numel())
    input_ids[t[shift] - 1] = target_input_ids[t[shift]].to(input_ids.dtype)
    last = start + kept - 1
    writes_next = (kept >= 1) & (last >= 0) & (last < input_ids.numel())
    input_ids[last[writes_next]] = next_token[writes_next].to(input_ids.dtype)
    copy = t < min(target_positions.numel(), positions.numel())
    positions[t[copy]] = target_positions[t[copy]].to(positions.dtype)
    last_token_indices[:num_reqs] = last.to(last_token_indices.dtype) if last_token_indices.dtype == torch.int64 \
        else _low32(last)
    last_token_indices[num_reqs:] = 0
    out_query_start_loc[:num_reqs] = query_start_loc[:num_reqs]
    out_query_start_loc[num_reqs:] = query_start_loc[num_reqs]
    out_seq_lens[:num_reqs] = seq_lens[:num_reqs]
    out_seq_lens[num_reqs:] = 0
    if current_draft_step is not None:
        current_draft_step.fill_(0)
    if request_idx_mapping is not None:
        request_idx_mapping[:num_reqs] = idx_mapping.to(request_idx_mapping.dtype)
        request_idx_mapping[num_reqs:] = -1


def _low32(values: torch.Tensor) -> torch.Tensor:
    """int64 values as an int32 store keeps them: the low 32 bits."""
    return ((values & 0xFFFFFFFF) ^ 0x80000000).sub(0x80000000).to(torch.int32)
