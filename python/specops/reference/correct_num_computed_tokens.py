"""Reference for correct_num_computed_tokens (docs/async_accounting.md)."""

from __future__ import annotations

import torch


def continued_rows(prev_positions: torch.Tensor, num_previous_rows: int,
                   prev_num_draft_tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, continues) per current row: the previous row it continues, and whether it does.

    A row continues its previous row p when 0 <= p < num_previous_rows and that row drafted;
    otherwise it takes the host value (row is then 0, a placeholder that is never used).
    """
    previous = prev_positions.long()
    in_range = (previous >= 0) & (previous < num_previous_rows)
    rows = torch.where(in_range, previous, 0)
    continues = in_range & (gather_rows(prev_num_draft_tokens, rows) > 0)
    return rows, continues


def gather_rows(values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """values[rows], as a new tensor; zeros when values is empty (then no row is used)."""
    if values.numel() == 0:
        return torch.zeros(rows.shape, dtype=values.dtype, device=values.device)
    return values[rows]


def correct_num_computed_tokens(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_rows = a.prev_positions.numel()
    num_previous_rows = min(a.valid_sampled_token_count.numel(), a.prev_num_draft_tokens.numel(),
                            a.num_computed_tokens.numel())
    rows, continues = continued_rows(a.prev_positions, num_previous_rows, a.prev_num_draft_tokens)
    # Every value below is a new tensor, so all reads happen before the two stores, whichever
    # input aliases an output.
    # int64 valid or host counts enter the int32 arithmetic by their low 32 bits (the peer's `.int()`).
    valid = gather_rows(a.valid_sampled_token_count, rows).int()
    new_computed = torch.where(continues, gather_rows(a.num_computed_tokens, rows) + valid,
                               a.cpu_num_computed_tokens[:num_rows].int())
    new_accepted = torch.where(continues, valid, a.num_accepted_tokens[:num_rows])
    a.num_computed_tokens[:num_rows] = new_computed
    a.num_accepted_tokens[:num_rows] = new_accepted
