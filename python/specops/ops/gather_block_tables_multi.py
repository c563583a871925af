"""gather_block_tables_multi: every KV-cache group's batch-indexed block table of this step, in one
op call (one launch on a device; docs/persistent_buffers.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.ops._checks import (
    check_int32_range,
    check_outputs_alias_nothing,
    check_rows_disjoint,
    check_tensor,
    checked_tensor_list,
    ints_per_group,
)
from specops.ops._op import SpecOp
from specops.reference.gather_block_tables_multi import gather_block_tables_multi as _reference


class GatherNames(NamedTuple):
    """The names errors give the source tables, the outputs and the padded row count: this op's,
    or another op's that gathers too (prepare_spec_decode_inputs: block_tables,
    gathered_block_tables, num_gathered_rows)."""

    src: str = "src_block_tables"
    out: str = "out"
    rows: str = "num_reqs_padded"


def check_gather_block_tables_multi(
    src_block_tables: Sequence[torch.Tensor],
    num_blocks: Sequence[torch.Tensor],
    idx_mapping: torch.Tensor,
    out: Sequence[torch.Tensor],
    num_reqs_padded: int,
    num_computed_tokens: torch.Tensor | None,
    sliding_window_reach: Sequence[int],
    block_sizes: Sequence[int],
    names: GatherNames = GatherNames(),
) -> None:
    """Mirrors csrc/cpu/gather_block_tables_checks.h (metadata only)."""
    src_name, out_name, rows_name = names
    num_groups = len(src_block_tables)
    for name, values in (("num_blocks", num_blocks), (out_name, out), ("sliding_window_reach", sliding_window_reach),
                         ("block_sizes", block_sizes)):
        if len(values) != num_groups:
            raise ValueError(f"{name} must have one entry per source table (len({src_name}) = {num_groups}), "
                             f"got {len(values)}")
    check_tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64], 1)
    device = idx_mapping.device
    num_reqs = idx_mapping.numel()
    if num_reqs_padded < num_reqs:
        raise ValueError(f"{rows_name} must be >= R = {num_reqs}, got {num_reqs_padded}")
    if num_computed_tokens is not None:
        check_tensor(num_computed_tokens, "num_computed_tokens", [torch.int32], 1, device, "idx_mapping")
    for g in range(num_groups):
        target = out[g]
        check_tensor(target, f"{out_name}[{g}]", [torch.int32], 2, device, "idx_mapping")
        check_rows_disjoint(target, f"{out_name}[{g}]")
        src = src_block_tables[g]
        check_tensor(src, f"{src_name}[{g}]", [torch.int32], 2, device, "idx_mapping")
        check_tensor(num_blocks[g], f"num_blocks[{g}]", [torch.int32], 1, device, "idx_mapping")
        src_rows = src.size(0)
        if num_blocks[g].numel() != src_rows:
            raise ValueError(f"num_blocks[{g}] must have one entry per {src_name}[{g}] row ({src_rows}), "
                             f"got {num_blocks[g].numel()}")
        if num_reqs_padded > target.size(0):
            raise ValueError(f"{rows_name} must be <= {out_name}[{g}].size(0) = {target.size(0)}, "
                             f"got {num_reqs_padded}")
        check_int32_range(sliding_window_reach[g], f"sliding_window_reach[{g}]", 0)
        check_int32_range(block_sizes[g], f"block_sizes[{g}]", 0)
        if sliding_window_reach[g] > 0 and block_sizes[g] < 1:
            raise ValueError(f"block_sizes[{g}] must be given (>= 1) when sliding_window_reach[{g}] > 0, "
                             f"got {block_sizes[g]}")
        if num_computed_tokens is not None and num_computed_tokens.numel() < src_rows:
            raise ValueError(f"num_computed_tokens must have at least {src_name}[{g}].size(0) = {src_rows} "
                             f"entries, got {num_computed_tokens.numel()}")
    # Every input is read while outputs are written, and each output is written by its own
    # programs on a device: an output may share memory with nothing else.
    inputs = [pair for g in range(num_groups)
              for pair in ((src_block_tables[g], f"{src_name}[{g}]"), (num_blocks[g], f"num_blocks[{g}]"))]
    inputs += [(idx_mapping, "idx_mapping"), (num_computed_tokens, "num_computed_tokens")]
    check_outputs_alias_nothing([(target, f"{out_name}[{g}]") for g, target in enumerate(out)], inputs)


_OP = SpecOp("gather_block_tables_multi", check_gather_block_tables_multi, _reference)


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
