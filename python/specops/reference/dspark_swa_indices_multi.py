"""Reference for dspark_swa_indices_multi: every DSpark group built on its own."""

from __future__ import annotations

from types import SimpleNamespace

from specops.reference.dspark_swa_indices import dspark_swa_indices


def dspark_swa_indices_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    for g, block_table in enumerate(a.block_tables):
        dspark_swa_indices(SimpleNamespace(
            block_table=block_table, query_start_loc=a.query_start_loc, seq_lens=a.seq_lens, window=a.windows[g],
            num_speculative_tokens=a.num_speculative_tokens, block_size=a.block_sizes[g], num_tokens=a.num_tokens,
            width=a.widths[g], cp_size=a.cp_size, cp_rank=a.cp_rank, out=a.out[g], out_lens=a.out_lens[g]))
