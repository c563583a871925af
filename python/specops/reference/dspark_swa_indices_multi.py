"""Reference for dspark_swa_indices_multi: every DSpark group built on its own."""

from __future__ import annotations

import torch

from specops.reference.dspark_swa_indices import dspark_swa_indices


def dspark_swa_indices_multi(
    block_tables: list[torch.Tensor],
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    windows: list[int],
    num_speculative_tokens: int,
    block_sizes: list[int],
    num_tokens: int,
    widths: list[int],
    cp_size: int,
    cp_rank: int,
    out: list[torch.Tensor],
    out_lens: list[torch.Tensor],
) -> None:
    for g, block_table in enumerate(block_tables):
        dspark_swa_indices(block_table, query_start_loc, seq_lens, windows[g], num_speculative_tokens, block_sizes[g],
                           num_tokens, widths[g], cp_size, cp_rank, out[g], out_lens[g])
