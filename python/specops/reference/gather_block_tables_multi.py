"""Reference for gather_block_tables_multi: every group gathered on its own."""

from __future__ import annotations

from types import SimpleNamespace

from specops.reference.gather_block_tables import gather_block_tables


def gather_block_tables_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    for g, src_block_table in enumerate(a.src_block_tables):
        gather_block_tables(SimpleNamespace(
            src_block_table=src_block_table, num_blocks=a.num_blocks[g], idx_mapping=a.idx_mapping, out=a.out[g],
            num_reqs_padded=a.num_reqs_padded, num_computed_tokens=a.num_computed_tokens,
            sliding_window_reach=a.sliding_window_reach[g], block_size=a.block_sizes[g]))
