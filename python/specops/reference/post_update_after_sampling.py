"""Reference for post_update_after_sampling: request state after the step, row by row."""

from __future__ import annotations

import torch


def _int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def post_update_after_sampling(
    idx_mapping: torch.Tensor, num_computed_tokens: torch.Tensor, query_start_loc: torch.Tensor | None,
    sampled_tokens: torch.Tensor | None, num_sampled: torch.Tensor | None, num_rejected: torch.Tensor | None,
    last_sampled_tokens: torch.Tensor | None, all_token_ids: torch.Tensor | None, total_len: torch.Tensor | None,
    output_bin_counts: torch.Tensor | None, draft_tokens: torch.Tensor | None,
    draft_tokens_out: torch.Tensor | None,
) -> None:
    sampling = sampled_tokens is not None
    num_rows = num_computed_tokens.numel()
    if sampling:
        num_rows = min(num_rows, last_sampled_tokens.size(0), all_token_ids.size(0), total_len.numel())
        if output_bin_counts is not None:
            num_rows = min(num_rows, output_bin_counts.size(0))
        last = last_sampled_tokens.view(-1) if last_sampled_tokens.dim() == 1 else last_sampled_tokens[:, 0]
    if draft_tokens is not None:
        num_rows = min(num_rows, draft_tokens_out.size(0))
    for r in range(idx_mapping.numel()):
        row = int(idx_mapping[r])
        if not 0 <= row < num_rows:
            continue
        query_len = int(query_start_loc[r + 1]) - int(query_start_loc[r]) if query_start_loc is not None else 0
        computed = int(num_computed_tokens[row])
        if not sampling:
            num_computed_tokens[row] = _int32(computed + query_len)
            continue
        if draft_tokens is not None:
            draft_tokens_out[row] = draft_tokens[r]
        ns = min(max(int(num_sampled[r]), 0), sampled_tokens.size(1))
        n0 = int(total_len[row])
        if ns > 0:
            last[row] = sampled_tokens[r, ns - 1].to(last.dtype)
            total_len[row] = _int32(n0 + ns)
        for i in range(ns):
            token = int(sampled_tokens[r, i])
            if 0 <= n0 + i < all_token_ids.size(1):
                all_token_ids[row, n0 + i] = _int32(token)
            if output_bin_counts is not None and 0 <= token < output_bin_counts.size(1):
                output_bin_counts[row, token] += 1
        num_computed_tokens[row] = _int32(computed + query_len - int(num_rejected[r]))
