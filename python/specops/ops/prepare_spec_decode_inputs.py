"""prepare_spec_decode_inputs: one call for the metadata of an async spec-decode step.

Equal to correct_num_computed_tokens, then prepare_positions_and_seq_lens, then
compute_slot_mapping for every KV-cache group (see docs/async_accounting.md). With
request_indexed_counts (a runner's own counts, as model runner V2 keeps them), no correction, and
optionally in the same call every group's block-table gather (gather_block_tables_multi), the
step's input ids (prepare_input_ids) and the DCP-local seq_lens (dcp_local_seq_lens).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops._fastpath import record_maker
from specops.arguments import checked_size, checked_tensor_list, group_settings, ints_per_group, padded_argument
from specops.ops._op import SpecOp
from specops.ops.prepare_positions_and_seq_lens import allocate_positions_and_seq_lens
from specops.reference.prepare_spec_decode_inputs import prepare_spec_decode_inputs as _reference

__all__ = ["SpecDecodeInputs", "prepare_spec_decode_inputs"]


class SpecDecodeInputs(NamedTuple):
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mappings: list[torch.Tensor]  # one per KV-cache group, in the order of block_tables


_OP = SpecOp("prepare_spec_decode_inputs", _reference)
_RESULT = record_maker(SpecDecodeInputs)


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
    input_ids: torch.Tensor | None = None,
    prefill_len: torch.Tensor | None = None,
    last_sampled_tokens: torch.Tensor | None = None,
    draft_tokens: torch.Tensor | None = None,
    cu_num_logits: torch.Tensor | None = None,
    num_new_sampled_tokens: int = 1,
    all_token_ids: torch.Tensor | None = None,
    next_prefill_tokens: torch.Tensor | None = None,
    logits_indices: torch.Tensor | None = None,
    expanded_idx_mapping: torch.Tensor | None = None,
    expanded_local_pos: torch.Tensor | None = None,
    num_logits_padded: int | None = None,
    dcp_local_seq_lens: torch.Tensor | None = None,
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

    The step's input ids (request-indexed mode, input_ids given): what prepare_input_ids(input_ids,
    idx_mapping, query_start_loc, num_computed_tokens, prefill_len, last_sampled_tokens,
    draft_tokens, cu_num_logits, num_new_sampled_tokens=..., all_token_ids=...,
    next_prefill_tokens=..., logits_indices=..., expanded_idx_mapping=..., expanded_local_pos=...,
    num_logits_padded=...) writes, in the same call (input_ids is not padded past T here:
    num_tokens_padded is the positions' and slot mappings'); its three logits outputs are given.
    It reads nothing the rest writes: every output of the call is kept apart from every input.

    dcp_local_seq_lens (int32, at least R entries): dcp_local_seq_lens(seq_lens[:R],
    cp_world_size, cp_rank, cp_interleave, out=dcp_local_seq_lens) of the seq_lens this call
    stores, 0 past R to its end, in the same call.
    """
    if idx_mapping is not None and (isinstance(idx_mapping, torch.Tensor) and isinstance(query_start_loc, torch.Tensor)
                                    and query_start_loc.dim() == 1
                                    and query_start_loc.numel() > idx_mapping.numel() + 1):
        # The peer passes num_reqs_padded + 1 entries padded with T; R = idx_mapping.numel(), and
        # the entries past R are never read (a view, no copy). Before the outputs are allocated:
        # they are sized from it.
        query_start_loc = query_start_loc[: idx_mapping.numel() + 1]
    block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled = group_settings(
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    gathered_block_tables = [] if gathered_block_tables is None else checked_tensor_list(
        gathered_block_tables, "gathered_block_tables")
    # 0 for every group is the schema's empty list (no window).
    sliding_window_reach = [] if isinstance(sliding_window_reach, int) and sliding_window_reach == 0 else \
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
    else:
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")  # the result's own list
    if num_gathered_rows is None:
        # Read by the op only with gathered tables (the batch mode's calls have none: no numel()).
        num_gathered_rows = 0 if not gathered_block_tables else seq_lens.numel() if num_reqs_padded is None else \
            num_reqs_padded
    num_blocks = [] if num_blocks is None else list(num_blocks)
    num_logits_padded = padded_argument(num_logits_padded, "num_logits_padded")
    _OP.select()(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
        prev_num_draft_tokens, cpu_num_computed_tokens, query_start_loc, positions, seq_lens, block_tables,
        slot_mappings, idx_mapping, num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave,
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_blocks, request_indexed_counts,
        gathered_block_tables, num_gathered_rows, sliding_window_reach, input_ids, prefill_len, last_sampled_tokens,
        draft_tokens, cu_num_logits, num_new_sampled_tokens, all_token_ids, next_prefill_tokens, logits_indices,
        expanded_idx_mapping, expanded_local_pos, num_logits_padded, dcp_local_seq_lens)
    return _RESULT((positions, seq_lens, slot_mappings))
