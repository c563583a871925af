"""prepare_spec_decode_inputs: one call for the metadata of an async spec-decode step.

Equal to correct_num_computed_tokens, then prepare_positions_and_seq_lens, then
compute_slot_mapping for every KV-cache group (see docs/async_accounting.md). With
request_indexed_counts (a runner's own counts, as model runner V2 keeps them), no correction, and
optionally every group's block-table gather (gather_block_tables_multi) in the same call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops._backend import _current_backend
from specops._fastpath import new_tuple as _new_tuple
from specops._step_layout import spec_decode_extents
from specops.ops._accounting_checks import check_count_correction, check_positions_and_seq_lens
from specops.ops._checks import (
    bools_per_group,
    check_idx_mapping,
    check_outputs_alias_nothing,
    check_positive,
    checked_size,
    checked_tensor_list,
    ints_per_group,
)
from specops.ops._op import SpecOp
from specops.ops._slot_mapping_checks import (
    SlotMappingArgNames,
    check_group_settings,
    check_num_blocks,
    check_slot_mapping_args,
    group_cp,
)
from specops.ops.gather_block_tables_multi import GatherNames, check_gather_block_tables_multi
from specops.ops.prepare_positions_and_seq_lens import allocate_positions_and_seq_lens
from specops.reference.prepare_spec_decode_inputs import prepare_spec_decode_inputs as _reference


# The schema's trailing arguments for the batch-indexed mode without a gather (positional callers
# below the wrapper): request_indexed_counts, gathered_block_tables, num_gathered_rows,
# sliding_window_reach.
BATCH_COUNTS = (False, [], 0, [])
# The gather's arguments as this op names them.
_GATHER_NAMES = GatherNames("block_tables", "gathered_block_tables", "num_gathered_rows")


class SpecDecodeInputs(NamedTuple):
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mappings: list[torch.Tensor]  # one per KV-cache group, in the order of block_tables


def _check(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    slot_mappings: Sequence[torch.Tensor],
    idx_mapping: torch.Tensor | None,
    num_tokens_padded: int | None,
    num_reqs_padded: int | None,
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    block_sizes: Sequence[int],
    blocks_per_kv_block: Sequence[int],
    cp_sharded: Sequence[bool],
    slot_mapping_enabled: Sequence[bool],
    num_blocks: Sequence[torch.Tensor] = (),
    request_indexed_counts: bool = False,
    gathered_block_tables: Sequence[torch.Tensor] = (),
    num_gathered_rows: int = 0,
    sliding_window_reach: Sequence[int] = (),
) -> None:
    """Mirrors csrc/cpu/prepare_spec_decode_inputs.cpp (metadata only)."""
    num_groups = len(block_tables)
    check_group_settings(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    num_tokens_padded, num_reqs_padded = spec_decode_extents(positions, seq_lens, num_tokens_padded, num_reqs_padded)
    check_count_correction(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                           prev_num_draft_tokens, cpu_num_computed_tokens)
    check_positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, num_tokens_padded,
                                 num_reqs_padded, request_indexed=request_indexed_counts)
    device = num_computed_tokens.device
    check_target_step_mode(prev_positions, idx_mapping, block_tables, blocks_per_kv_block, num_blocks,
                           request_indexed_counts, gathered_block_tables, sliding_window_reach)
    check_positive(cp_world_size, "cp_world_size")
    if not 0 <= cp_rank < cp_world_size:
        raise ValueError(f"cp_rank must be in [0, cp_world_size = {cp_world_size}), got {cp_rank}")
    check_positive(cp_interleave, "cp_interleave")
    if len(slot_mappings) != num_groups:
        raise ValueError(
            f"slot_mappings must have one tensor per block table (len(block_tables) = {num_groups}), "
            f"got {len(slot_mappings)}")
    for g in range(num_groups):
        # The token count is a value (query_start_loc[R]); only the CPU op checks it against the padding.
        check_slot_mapping_args(block_tables[g], block_sizes[g], slot_mappings[g], blocks_per_kv_block[g],
                                *group_cp(cp_sharded[g], cp_world_size, cp_rank, cp_interleave), 0, num_tokens_padded,
                                device, SlotMappingArgNames.of_group(g), device_of="num_computed_tokens")
    if len(num_blocks) not in (0, num_groups):
        raise ValueError(f"num_blocks must be empty or hold one tensor per block table (len(block_tables) = "
                         f"{num_groups}), got {len(num_blocks)}")
    for g, counts in enumerate(num_blocks):
        check_num_blocks(counts, f"num_blocks[{g}]", block_tables[g], f"block_tables[{g}]", device,
                         device_of="num_computed_tokens")
    check_idx_mapping(idx_mapping, query_start_loc.numel() - 1, device, device_of="num_computed_tokens")
    if gathered_block_tables:
        check_gather_block_tables_multi(block_tables, num_blocks, idx_mapping, gathered_block_tables, num_gathered_rows,
                                        num_computed_tokens, sliding_window_reach or [0] * num_groups, block_sizes,
                                        names=_GATHER_NAMES)
    # The correction's four inputs are read in full before the first store (every backend
    # gathers first), so they may alias any output; the rest is read while storing.
    outputs = [(num_computed_tokens, "num_computed_tokens"), (num_accepted_tokens, "num_accepted_tokens"),
               (positions, "positions"), (seq_lens, "seq_lens")]
    outputs += [(out, f"slot_mappings[{g}]") for g, out in enumerate(slot_mappings)]
    outputs += [(out, f"gathered_block_tables[{g}]") for g, out in enumerate(gathered_block_tables)]
    read_while_storing = [(query_start_loc, "query_start_loc"), (idx_mapping, "idx_mapping")]
    read_while_storing += [(table, f"block_tables[{g}]") for g, table in enumerate(block_tables)]
    read_while_storing += [(counts, f"num_blocks[{g}]") for g, counts in enumerate(num_blocks)]
    check_outputs_alias_nothing(outputs, read_while_storing)


def check_target_step_mode(
    prev_positions: torch.Tensor,
    idx_mapping: torch.Tensor | None,
    block_tables: Sequence[torch.Tensor],
    blocks_per_kv_block: Sequence[int],
    num_blocks: Sequence[torch.Tensor],
    request_indexed_counts: bool,
    gathered_block_tables: Sequence[torch.Tensor],
    sliding_window_reach: Sequence[int],
) -> None:
    """The request-indexed mode's and the gather's own conditions (mirrors check_target_step_mode
    in csrc/cpu/prepare_spec_decode_inputs.cpp)."""
    num_groups = len(block_tables)
    if request_indexed_counts:
        if idx_mapping is None:
            raise ValueError("idx_mapping must be given with request_indexed_counts (it indexes num_computed_tokens)")
        if prev_positions.numel() != 0:
            raise ValueError(f"prev_positions must be empty with request_indexed_counts (a runner's request-indexed "
                             f"counts have no rows to correct), got {prev_positions.numel()} entries")
    if len(sliding_window_reach) not in (0, num_groups):
        raise ValueError(f"sliding_window_reach must be empty or hold one entry per block table (len(block_tables) = "
                         f"{num_groups}), got {len(sliding_window_reach)}")
    if not gathered_block_tables:
        return
    if not request_indexed_counts:
        raise ValueError("gathered_block_tables needs request_indexed_counts (the gather reads the counts by row)")
    if len(gathered_block_tables) != num_groups:
        raise ValueError(f"gathered_block_tables must be empty or hold one tensor per block table (len(block_tables) = "
                         f"{num_groups}), got {len(gathered_block_tables)}")
    if len(num_blocks) != num_groups:
        raise ValueError(f"num_blocks must hold one tensor per block table (len(block_tables) = {num_groups}) with "
                         f"gathered_block_tables, got {len(num_blocks)}")
    for g, reach in enumerate(sliding_window_reach):
        if reach > 0 and blocks_per_kv_block[g] != 1:
            raise ValueError(f"blocks_per_kv_block[{g}] must be 1 where sliding_window_reach[{g}] > 0 (the window "
                             f"is masked in blocks of block_sizes[{g}]), got {blocks_per_kv_block[g]}")


_OP = SpecOp("prepare_spec_decode_inputs", _check, _reference)
_TENSOR = torch.Tensor
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_torch_compiler = torch.compiler


def prepare_spec_decode_inputs(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    *,
    positions: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    slot_mappings: Sequence[torch.Tensor] | None = None,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    idx_mapping: torch.Tensor | None = None,
    num_tokens_padded: int | None = None,
    num_reqs_padded: int | None = None,
    num_blocks: Sequence[torch.Tensor] | None = None,
    request_indexed_counts: bool = False,
    gathered_block_tables: Sequence[torch.Tensor] | None = None,
    num_gathered_rows: int | None = None,
    sliding_window_reach: Sequence[int] | int = 0,
) -> SpecDecodeInputs:
    """Correction, positions and seq_lens, and every group's slot mapping, in one op call.

    Equal to correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions,
    valid_sampled_token_count, prev_num_draft_tokens, cpu_num_computed_tokens), then
    prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc, ...), then for each
    group g compute_slot_mapping(query_start_loc, positions[:T], block_tables[g], block_sizes[g],
    out=slot_mappings[g], blocks_per_kv_block=blocks_per_kv_block[g], idx_mapping=idx_mapping,
    num_tokens_padded=num_tokens_padded) with the CP arguments when cp_sharded[g] (else W = 1).
    block_sizes, blocks_per_kv_block, cp_sharded and slot_mapping_enabled take one value per group
    or one for all; a group with slot_mapping_enabled False gets PAD for every token in
    [0, num_tokens_padded) and its block table is never read (nor checked against the positions).
    Outputs absent are allocated: positions int64 and slot mappings int64 of num_tokens_padded
    (default: positions.numel(), else query_start_loc[R], a host read), seq_lens int32 of
    num_reqs_padded (default R). On the CPU a rejected call writes nothing. Given idx_mapping,
    R = idx_mapping.numel() and query_start_loc may have more than R + 1 entries (the peer's
    num_reqs_padded + 1, padded with T): those past R are never read.

    num_blocks: one int32 tensor per group (or None), the blocks allocated to each row of its
    table, as compute_slot_mapping takes it: a position past its row's allocated blocks is a
    ValueError naming the request, the position and the count on the host, PAD on device paths.

    request_indexed_counts: num_computed_tokens is a runner's own request-indexed counts (model
    runner V2's), read as num_computed_tokens[idx_mapping[r]] (a row of -1 counts 0), and nothing
    is corrected: idx_mapping is required and prev_positions empty (the other correction inputs
    are only checked). Then gathered_block_tables (int32 [>= num_gathered_rows, cols], one per
    group) receive exactly what gather_block_tables_multi(block_tables, num_blocks, idx_mapping,
    gathered_block_tables, num_reqs_padded=num_gathered_rows, num_computed_tokens=
    num_computed_tokens, sliding_window_reach=..., block_sizes=block_sizes) writes, in the same
    call (one launch on a device); num_blocks is required with them, num_gathered_rows defaults
    to num_reqs_padded's value, and sliding_window_reach takes one value per group or one for all
    (a group with a reach needs blocks_per_kv_block 1).
    """
    if idx_mapping is not None and (isinstance(idx_mapping, torch.Tensor) and isinstance(query_start_loc, torch.Tensor)
                                    and query_start_loc.dim() == 1
                                    and query_start_loc.numel() > idx_mapping.numel() + 1):
        # The peer passes num_reqs_padded + 1 entries padded with T; R = idx_mapping.numel(), and
        # the entries past R are never read (a view, no copy). Before the outputs are allocated:
        # they are sized from it.
        query_start_loc = query_start_loc[: idx_mapping.numel() + 1]
    # The usual forms pass as given, tested inline (each helper call costs about as much as the
    # op's checks of one group): lists of tensors, a list per group (FastOp and the op's checks
    # judge their entries and lengths), one int or bool for every group.
    if type(block_tables) is not list:
        block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    if type(block_sizes) is not list:
        block_sizes = [block_sizes] * num_groups if type(block_sizes) is int else \
            ints_per_group(block_sizes, num_groups, "block_sizes")
    if type(blocks_per_kv_block) is not list:
        blocks_per_kv_block = [blocks_per_kv_block] * num_groups if type(blocks_per_kv_block) is int else \
            ints_per_group(blocks_per_kv_block, num_groups, "blocks_per_kv_block")
    if type(cp_sharded) is not list:
        cp_sharded = [cp_sharded] * num_groups if type(cp_sharded) is bool else \
            bools_per_group(cp_sharded, num_groups, "cp_sharded")
    if type(slot_mapping_enabled) is not list:
        slot_mapping_enabled = [slot_mapping_enabled] * num_groups if type(slot_mapping_enabled) is bool else \
            bools_per_group(slot_mapping_enabled, num_groups, "slot_mapping_enabled")
    if gathered_block_tables is None and type(sliding_window_reach) is int and sliding_window_reach == 0:
        # No gather and no window (the batch mode's calls): the schema's empty values, nothing to
        # normalize; num_gathered_rows is then not read.
        gathered_block_tables, sliding_window_reach = [], []
        if num_gathered_rows is None:
            num_gathered_rows = 0
    else:
        gathered_block_tables = [] if gathered_block_tables is None else checked_tensor_list(
            gathered_block_tables, "gathered_block_tables")
        if type(sliding_window_reach) is not list:
            # 0 for all groups is the schema's empty list (no window), with nothing to expand.
            sliding_window_reach = [] if sliding_window_reach == 0 else \
                ints_per_group(sliding_window_reach, num_groups, "sliding_window_reach")
    # Given both outputs, the padded extents None are the op's (their numel), else the allocation's.
    if positions is None or seq_lens is None:
        positions, seq_lens, num_tokens_padded, num_reqs_padded = allocate_positions_and_seq_lens(
            query_start_loc, positions, seq_lens, num_tokens_padded, num_reqs_padded)
    if slot_mappings is None:
        if num_tokens_padded is None:
            num_tokens_padded = positions.numel()
        num_tokens_padded = checked_size(num_tokens_padded, "num_tokens_padded", 0)
        slot_mappings = [torch.empty(num_tokens_padded, dtype=torch.int64, device=positions.device)
                         for _ in range(num_groups)]
    elif type(slot_mappings) is list:
        slot_mappings = slot_mappings[:]  # the result's own list, which the caller's may not change
    else:
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    if num_gathered_rows is None:
        num_gathered_rows = seq_lens.numel() if num_reqs_padded is None else num_reqs_padded
    # _OP.select()'s eager native case without its frame (its Dynamo test first: Dynamo cannot
    # trace the backend's ContextVar). Every other case asks select(), and has no FastOp to name
    # a list entry that is not a tensor: checked here.
    op = _OP.native_entry
    if op is None or _is_dynamo_compiling() or _torch_compiler._is_compiling_flag or _current_backend.get() != "native":
        op = _OP.select()
        block_tables = checked_tensor_list(block_tables, "block_tables")
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    op(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count, prev_num_draft_tokens,
       cpu_num_computed_tokens, query_start_loc, positions, seq_lens, block_tables, slot_mappings, idx_mapping,
       num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block,
       cp_sharded, slot_mapping_enabled, [] if num_blocks is None else list(num_blocks), request_indexed_counts,
       gathered_block_tables, num_gathered_rows, sliding_window_reach)
    # The NamedTuple without its Python-level __new__ frame.
    return _new_tuple(SpecDecodeInputs, (positions, seq_lens, slot_mappings))
