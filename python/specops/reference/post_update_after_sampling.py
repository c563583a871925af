"""Reference for post_update_after_sampling: request state after the step, row by row."""

from __future__ import annotations

import torch


def _int32(value: int) -> int:
    return (value + 2**31) % 2**32 - 2**31


def post_update_after_sampling(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    sampling = a.sampled_tokens is not None
    num_rows = a.num_computed_tokens.numel()
    if sampling:
        num_rows = min(num_rows, a.last_sampled_tokens.size(0), a.all_token_ids.size(0), a.total_len.numel())
        if a.output_bin_counts is not None:
            num_rows = min(num_rows, a.output_bin_counts.size(0))
        last = a.last_sampled_tokens.view(-1) if a.last_sampled_tokens.dim() == 1 else a.last_sampled_tokens[:, 0]
    if a.draft_tokens is not None:
        num_rows = min(num_rows, a.draft_tokens_out.size(0))
    for r in range(a.idx_mapping.numel()):
        row = int(a.idx_mapping[r])
        if not 0 <= row < num_rows:
            continue
        query_len = int(a.query_start_loc[r + 1]) - int(a.query_start_loc[r]) if a.query_start_loc is not None else 0
        computed = int(a.num_computed_tokens[row])
        if not sampling:
            a.num_computed_tokens[row] = _int32(computed + query_len)
            continue
        if a.draft_tokens is not None:
            a.draft_tokens_out[row] = a.draft_tokens[r]
        ns = min(max(int(a.num_sampled[r]), 0), a.sampled_tokens.size(1))
        n0 = int(a.total_len[row])
        if ns > 0:
            last[row] = a.sampled_tokens[r, ns - 1].to(last.dtype)
            a.total_len[row] = _int32(n0 + ns)
        for i in range(ns):
            token = int(a.sampled_tokens[r, i])
            if 0 <= n0 + i < a.all_token_ids.size(1):
                a.all_token_ids[row, n0 + i] = _int32(token)
            if a.output_bin_counts is not None and 0 <= token < a.output_bin_counts.size(1):
                a.output_bin_counts[row, token] += 1
        a.num_computed_tokens[row] = _int32(computed + query_len - int(a.num_rejected[r]))
