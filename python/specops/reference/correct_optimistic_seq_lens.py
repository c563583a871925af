"""Reference for correct_optimistic_seq_lens (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.reference.correct_num_computed_tokens import continued_rows, gather_rows


def correct_optimistic_seq_lens(
    seq_lens_cpu: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
) -> None:
    num_rows = prev_positions.numel()
    num_previous_rows = min(valid_sampled_token_count.numel(), prev_num_draft_tokens.numel())
    rows, continues = continued_rows(prev_positions, num_previous_rows, prev_num_draft_tokens)
    # The drafts the scheduler counted as accepted but the device rejected.
    rejected = gather_rows(prev_num_draft_tokens, rows) + 1 - gather_rows(valid_sampled_token_count, rows)
    seq_lens = seq_lens_cpu[:num_rows]
    seq_lens_cpu[:num_rows] = torch.where(continues, seq_lens - rejected, seq_lens)
