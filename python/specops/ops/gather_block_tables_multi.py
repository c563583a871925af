"""gather_block_tables_multi: every KV-cache group's batch-indexed block table of this step, in one
op call (one launch on a device; docs/persistent_buffers.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.arguments import checked_tensor_list, ints_per_group
from specops.ops._op import SpecOp
from specops.reference.gather_block_tables_multi import gather_block_tables_multi as _reference

__all__ = ["gather_block_tables_multi"]


class GatherNames(NamedTuple):
    """The names errors give the source tables, the outputs and the padded row count: this op's,
    or another op's that gathers too (prepare_spec_decode_inputs: block_tables,
    gathered_block_tables, num_gathered_rows)."""

    src: str = "src_block_tables"
    out: str = "out"
    rows: str = "num_reqs_padded"



_OP = SpecOp("gather_block_tables_multi", _reference)


def gather_block_tables_multi(
    src_block_tables: Sequence[torch.Tensor],
    num_blocks: Sequence[torch.Tensor],
    idx_mapping: torch.Tensor,
    out: Sequence[torch.Tensor],
    *,
    num_reqs_padded: int | None = None,
    num_computed_tokens: torch.Tensor | None = None,
    sliding_window_reach: int | Sequence[int] = 0,
    block_sizes: int | Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """gather_block_tables of every KV-cache group in one call: out[g] is exactly what
    gather_block_tables(src_block_tables[g], num_blocks[g], idx_mapping, out[g],
    num_reqs_padded=..., num_computed_tokens=..., sliding_window_reach=sliding_window_reach[g],
    block_size=block_sizes[g]) writes. The groups share the batch (idx_mapping, int32 or int64
    [R]; -1: no row), num_reqs_padded and the request-indexed num_computed_tokens (int32, at
    least as many entries as every source table has rows).

    src_block_tables: int32 [rows_g, cols_g] per group; num_blocks: int32 [rows_g] per group (a
    runner's [G, rows] counts: its rows, num_blocks.unbind(0)); out: int32 [>= num_reqs_padded,
    out_cols_g] per group, no two sharing memory; rows [0, num_reqs_padded) of each are
    rewritten. sliding_window_reach, block_sizes: one per group, or one int for all; a group of
    reach 0 is a full-attention group (its block size may be None or 0); block_sizes None: none
    given. num_reqs_padded defaults to the outputs' row count when they all have the same (R
    with no groups). Returns out as a list.
    """
    src_block_tables = checked_tensor_list(src_block_tables, "src_block_tables")
    num_groups = len(src_block_tables)
    num_blocks = checked_tensor_list(num_blocks, "num_blocks")
    out = checked_tensor_list(out, "out")
    sliding_window_reach = ints_per_group(sliding_window_reach, num_groups, "sliding_window_reach")
    block_sizes = [0] * num_groups if block_sizes is None else ints_per_group(block_sizes, num_groups, "block_sizes")
    if num_reqs_padded is None:
        rows = {t.size(0) if t.dim() else 0 for t in out}
        if len(rows) > 1:
            raise ValueError(f"num_reqs_padded must be given when the outputs differ in rows, got {sorted(rows)}")
        num_reqs_padded = rows.pop() if rows else (idx_mapping.numel() if isinstance(idx_mapping, torch.Tensor) else 0)
    _OP.select()(src_block_tables, num_blocks, idx_mapping, out, num_reqs_padded, num_computed_tokens,
        sliding_window_reach, block_sizes)
    return out
