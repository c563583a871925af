"""Reference for correct_optimistic_seq_lens (docs/async_accounting.md)."""

from __future__ import annotations

import torch

from specops.reference.correct_num_computed_tokens import continued_rows, gather_rows


def correct_optimistic_seq_lens(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_rows = a.prev_positions.numel()
    num_previous_rows = min(a.valid_sampled_token_count.numel(), a.prev_num_draft_tokens.numel())
    rows, continues = continued_rows(a.prev_positions, num_previous_rows, a.prev_num_draft_tokens)
    # The drafts the scheduler counted as accepted but the device rejected.
    rejected = gather_rows(a.prev_num_draft_tokens, rows) + 1 - gather_rows(a.valid_sampled_token_count, rows)
    seq_lens = a.seq_lens_cpu[:num_rows]
    a.seq_lens_cpu[:num_rows] = torch.where(continues, seq_lens - rejected, seq_lens)
