"""Reference for gather_block_tables_multi: every group gathered on its own."""

from __future__ import annotations

import torch

from specops.reference.gather_block_tables import gather_block_tables


def gather_block_tables_multi(
    src_block_tables: list[torch.Tensor],
    num_blocks: list[torch.Tensor],
    idx_mapping: torch.Tensor,
    out: list[torch.Tensor],
    num_reqs_padded: int,
    num_computed_tokens: torch.Tensor | None,
    sliding_window_reach: list[int],
    block_sizes: list[int],
) -> None:
    for g, src_block_table in enumerate(src_block_tables):
        gather_block_tables(src_block_table, num_blocks[g], idx_mapping, out[g], num_reqs_padded, num_computed_tokens,
                            sliding_window_reach[g], block_sizes[g])
