"""expand_parallel_draft_inputs: the parallel-drafting first pass (the target step's tokens
rewritten into the draft's buffers with slots_per_request new slots per request, their
positions, masks, sample indices, hidden-state mapping, every group's slots and the extended
query layout), in one op call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.ops._checks import (
    check_allocated_elements,
    check_cp_rank,
    check_entries,
    check_outputs_alias_nothing,
    check_positive,
    check_tensor,
    checked_bool,
    checked_int,
)
from specops.ops._op import SpecOp
from specops.ops._step_checks import check_draft_groups, group_settings, group_tensors, padded_argument, padded_end
from specops.reference.expand_parallel_draft_inputs import expand_parallel_draft_inputs as _reference

INT32_MAX = 2**31 - 1


class ParallelDraftInputs(NamedTuple):
    num_tokens: int  # T' = T + R N, the real draft tokens
    input_ids: torch.Tensor
    positions: torch.Tensor
    is_rejected_token_mask: torch.Tensor
    is_masked_token_mask: torch.Tensor
    token_indices_to_sample: torch.Tensor
    hidden_state_mapping: torch.Tensor | None  # with shift_input_ids only
    slot_mappings: list[torch.Tensor]  # one per KV-cache group, in the order of block_tables
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor | None  # with seq_lens only


def check_slots_bound(slots: int) -> None:
    """slots_per_request at most 2^31 - 1: every product of it with a count stays in int64."""
    if slots > INT32_MAX:
        raise ValueError(f"slots_per_request must be <= 2^31 - 1, got {slots}")


def _check(target_token_ids: torch.Tensor, target_positions: torch.Tensor, next_token_ids: torch.Tensor,
           query_start_loc: torch.Tensor, block_tables: Sequence[torch.Tensor], num_rejected_tokens: torch.Tensor | None,
           seq_lens: torch.Tensor | None, idx_mapping: torch.Tensor | None, num_blocks: Sequence[torch.Tensor],
           input_ids: torch.Tensor, positions: torch.Tensor, is_rejected_token_mask: torch.Tensor,
           is_masked_token_mask: torch.Tensor, token_indices_to_sample: torch.Tensor,
           hidden_state_mapping: torch.Tensor | None, slot_mappings: Sequence[torch.Tensor],
           out_query_start_loc: torch.Tensor, out_seq_lens: torch.Tensor | None, slots_per_request: int,
           shift_input_ids: bool, max_model_len: int, parallel_drafting_token_id: int, padding_token_id: int,
           num_tokens_padded: int, num_reqs_padded: int, cp_world_size: int, cp_rank: int, cp_interleave: int,
           block_sizes: Sequence[int], blocks_per_kv_block: Sequence[int], cp_sharded: Sequence[bool],
           slot_mapping_enabled: Sequence[bool]) -> None:
    """Mirrors csrc/cpu/expand_parallel_draft_inputs.cpp (metadata only)."""
    slots, shift = slots_per_request, int(shift_input_ids)
    world, rank, interleave = cp_world_size, cp_rank, cp_interleave
    check_positive(slots, "slots_per_request")
    check_slots_bound(slots)
    if slots - shift < 1:
        raise ValueError("slots_per_request must be >= 2 with shift_input_ids (N = slots_per_request - 1 new tokens "
                         f"per request must be >= 1), got {slots}")
    check_positive(max_model_len, "max_model_len")
    check_cp_rank(world, rank, "cp_world_size")
    check_positive(interleave, "cp_interleave")
    check_tensor(target_token_ids, "target_token_ids", [torch.int32, torch.int64], 1)
    device = target_token_ids.device
    num_tokens = target_token_ids.numel()

    def tensor(t: torch.Tensor, name: str, dtypes: list[torch.dtype]) -> None:
        check_tensor(t, name, dtypes, 1, device, "target_token_ids")

    tensor(target_positions, "target_positions", [torch.int64, torch.int32])
    check_entries(target_positions, "target_positions", num_tokens, "T = target_token_ids.numel()")
    tensor(next_token_ids, "next_token_ids", [torch.int32, torch.int64])
    num_reqs = next_token_ids.numel()
    tensor(query_start_loc, "query_start_loc", [torch.int32])
    check_entries(query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = next_token_ids.numel())")
    if num_rejected_tokens is not None:
        tensor(num_rejected_tokens, "num_rejected_tokens", [torch.int32])
        if num_rejected_tokens.numel() != num_reqs:
            raise ValueError(f"num_rejected_tokens must have R = {num_reqs} entries (R = next_token_ids.numel()), "
                             f"got {num_rejected_tokens.numel()}")
    if seq_lens is not None:
        tensor(seq_lens, "seq_lens", [torch.int32])
        check_entries(seq_lens, "seq_lens", num_reqs, "R = next_token_ids.numel()")
    if idx_mapping is not None:
        tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64])
        if idx_mapping.numel() != num_reqs:
            raise ValueError(f"idx_mapping must have R = {num_reqs} entries (R = next_token_ids.numel()), "
                             f"got {idx_mapping.numel()}")
    num_out = num_tokens + num_reqs * (slots - shift)
    if num_out > INT32_MAX:
        raise ValueError(f"T' = T + R * N must be < 2^31, got {num_out}")
    for out, name, dtypes in ((input_ids, "input_ids", [torch.int32, torch.int64]),
                              (positions, "positions", [torch.int64, torch.int32]),
                              (is_rejected_token_mask, "is_rejected_token_mask", [torch.bool]),
                              (is_masked_token_mask, "is_masked_token_mask", [torch.bool])):
        tensor(out, name, dtypes)
        check_entries(out, name, num_out, "T' = T + R * N")
    for out, name in ((input_ids, "input_ids"), (positions, "positions"),
                      (is_rejected_token_mask, "is_rejected_token_mask"), (is_masked_token_mask, "is_masked_token_mask")):
        padded_end(out, name, num_tokens_padded, "num_tokens_padded", num_out, "T'")
    if 0 <= num_reqs_padded < num_reqs:
        raise ValueError(f"num_reqs_padded must be >= R = {num_reqs}, got {num_reqs_padded}")
    tensor(token_indices_to_sample, "token_indices_to_sample", [torch.int32])
    check_entries(token_indices_to_sample, "token_indices_to_sample", num_reqs * slots, "R * slots_per_request")
    if num_reqs_padded >= 0:
        check_entries(token_indices_to_sample, "token_indices_to_sample", num_reqs_padded * slots,
                      "num_reqs_padded * slots_per_request")
    if hidden_state_mapping is not None:
        if shift != 1:
            raise ValueError("hidden_state_mapping is computed with shift_input_ids only")
        tensor(hidden_state_mapping, "hidden_state_mapping", [torch.int32])
        check_entries(hidden_state_mapping, "hidden_state_mapping", num_tokens, "T = target_token_ids.numel()")
    tensor(out_query_start_loc, "out_query_start_loc", [torch.int32])
    end = num_reqs_padded + 1 if num_reqs_padded >= 0 else out_query_start_loc.numel()
    if out_query_start_loc.numel() < max(end, num_reqs + 1):
        raise ValueError(f"out_query_start_loc must have at least num_reqs_padded + 1 = {max(end, num_reqs + 1)} "
                         f"entries, got {out_query_start_loc.numel()}")
    if out_seq_lens is not None:
        if seq_lens is None:
            raise ValueError("out_seq_lens needs seq_lens")
        tensor(out_seq_lens, "out_seq_lens", [torch.int32])
        check_entries(out_seq_lens, "out_seq_lens", num_reqs, "R = next_token_ids.numel()")
        padded_end(out_seq_lens, "out_seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R")
    check_draft_groups(block_tables, slot_mappings, num_blocks, block_sizes, blocks_per_kv_block, cp_sharded,
                       slot_mapping_enabled, (world, rank, interleave), num_out, num_tokens_padded, device,
                       "target_token_ids")
    outputs = [(input_ids, "input_ids"), (positions, "positions"), (is_rejected_token_mask, "is_rejected_token_mask"),
               (is_masked_token_mask, "is_masked_token_mask"), (token_indices_to_sample, "token_indices_to_sample"),
               (hidden_state_mapping, "hidden_state_mapping"), (out_query_start_loc, "out_query_start_loc"),
               (out_seq_lens, "out_seq_lens")]
    inputs = [(target_token_ids, "target_token_ids"), (target_positions, "target_positions"),
              (next_token_ids, "next_token_ids"), (query_start_loc, "query_start_loc"),
              (num_rejected_tokens, "num_rejected_tokens"), (seq_lens, "seq_lens"), (idx_mapping, "idx_mapping")]
    group_outputs, group_inputs = group_tensors(slot_mappings, block_tables, num_blocks)
    outputs += group_outputs
    inputs += group_inputs
    check_outputs_alias_nothing(outputs, inputs)


_OP = SpecOp("expand_parallel_draft_inputs", _check, _reference)


def expand_parallel_draft_inputs(
    target_token_ids: torch.Tensor,
    target_positions: torch.Tensor,
    next_token_ids: torch.Tensor,
    query_start_loc: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    *,
    slots_per_request: int,
    max_model_len: int,
    parallel_drafting_token_id: int,
    shift_input_ids: bool = True,
    padding_token_id: int = 0,
    num_rejected_tokens: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    idx_mapping: torch.Tensor | None = None,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    num_blocks: Sequence[torch.Tensor] | None = None,
    input_ids: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
    is_rejected_token_mask: torch.Tensor | None = None,
    is_masked_token_mask: torch.Tensor | None = None,
    token_indices_to_sample: torch.Tensor | None = None,
    hidden_state_mapping: torch.Tensor | None = None,
    slot_mappings: Sequence[torch.Tensor] | None = None,
    out_query_start_loc: torch.Tensor | None = None,
    out_seq_lens: torch.Tensor | None = None,
    num_tokens_padded: int | None = None,
    num_reqs_padded: int | None = None,
) -> ParallelDraftInputs:
    """The parallel-drafting first pass for every KV-cache group at once.

    R = next_token_ids.numel(), T = target_token_ids.numel() = query_start_loc[R], S =
    slots_per_request, N = S - 1 with shift_input_ids (Eagle) else S (draft model), T' = T + R N.
    Request r's q target tokens (less its num_rejected_tokens[r] and, with the shift, the first)
    are copied to the draft's tokens q0 + r N + j, followed by next_token_ids[r] (the bonus),
    S - 1 tokens of parallel_drafting_token_id (is_masked_token_mask) and the rejected tokens
    as padding_token_id (is_rejected_token_mask, position 0, slot PAD). Output j is at position
    target_positions[q0] + j; its slot per group as compute_slot_mapping (PAD at or past
    max_model_len). token_indices_to_sample [R S]: where the S new tokens are;
    hidden_state_mapping [T] (shift only): where each target token's hidden state goes;
    query_start_loc: qsl + r N; seq_lens: seq_lens + N (given seq_lens). Outputs left out are
    allocated (at num_tokens_padded / num_reqs_padded when given); padding: ids, positions 0,
    masks False, slots PAD in [T', num_tokens_padded). The host op rejects a query of no
    token, rejected counts outside [0, q - 1], target positions that are not consecutive and a
    kept position past its row's table.
    """
    num_groups = len(block_tables)
    slots_per_request = checked_int(slots_per_request, "slots_per_request")
    check_slots_bound(slots_per_request)  # before any output is sized from it
    shift = checked_bool(shift_input_ids, "shift_input_ids")  # sizes the outputs: T' = T + R (S - shift)
    per_group = group_settings(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    tokens_padded = padded_argument(num_tokens_padded, "num_tokens_padded")
    reqs_padded = padded_argument(num_reqs_padded, "num_reqs_padded")
    num_tokens = target_token_ids.numel() if isinstance(target_token_ids, torch.Tensor) else 0
    num_reqs = next_token_ids.numel() if isinstance(next_token_ids, torch.Tensor) else 0
    device = target_token_ids.device if isinstance(target_token_ids, torch.Tensor) else None
    num_out = num_tokens + num_reqs * max(slots_per_request - (1 if shift else 0), 0)
    token_size = max(tokens_padded, 0) if tokens_padded >= 0 else num_out
    req_size = reqs_padded if reqs_padded >= 0 else num_reqs
    # Every size an output is allocated from, checked first (docs/hardening.md): T' and the
    # sample indices grow with slots_per_request.
    if token_size > INT32_MAX:
        raise ValueError(f"slots_per_request = {slots_per_request} makes T' = T + R * N = {num_out}, past the "
                         "2^31 - 1 tokens an output can index")
    check_allocated_elements(req_size, max(slots_per_request, 0),
                             "num_reqs_padded" if reqs_padded >= 0 else "slots_per_request",
                             "token_indices_to_sample: num_reqs_padded or R times slots_per_request")
    # An optional output that its inputs do not turn on is None and not computed
    # (docs/step_bookkeeping.md, "Optional outputs"):
    # out_seq_lens without seq_lens, hidden_state_mapping without the shift.
    if seq_lens is None:
        out_seq_lens = None
    if not shift:
        hidden_state_mapping = None

    def new(size: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(size, dtype=dtype, device=device)

    input_ids = new(token_size, torch.int32) if input_ids is None else input_ids
    positions = new(token_size, torch.int64) if positions is None else positions
    if is_rejected_token_mask is None:
        is_rejected_token_mask = new(token_size, torch.bool)
    if is_masked_token_mask is None:
        is_masked_token_mask = new(token_size, torch.bool)
    if token_indices_to_sample is None:
        token_indices_to_sample = new(req_size * max(slots_per_request, 0), torch.int32)
    if hidden_state_mapping is None and shift:
        hidden_state_mapping = new(num_tokens, torch.int32)
    if slot_mappings is None:
        slot_mappings = [new(token_size, torch.int64) for _ in range(num_groups)]
    if out_query_start_loc is None:
        out_query_start_loc = new(req_size + 1, torch.int32)
    if out_seq_lens is None and seq_lens is not None:
        out_seq_lens = new(req_size, torch.int32)
    block_tables = list(block_tables)
    slot_mappings = list(slot_mappings)
    _OP.select()(target_token_ids, target_positions, next_token_ids, query_start_loc, block_tables,
                 num_rejected_tokens, seq_lens, idx_mapping, [] if num_blocks is None else list(num_blocks), input_ids,
                 positions, is_rejected_token_mask, is_masked_token_mask, token_indices_to_sample, hidden_state_mapping,
                 slot_mappings, out_query_start_loc, out_seq_lens, slots_per_request, shift, max_model_len,
                 parallel_drafting_token_id, padding_token_id, tokens_padded, reqs_padded, cp_world_size, cp_rank,
                 cp_interleave, *per_group)
    return ParallelDraftInputs(num_out, input_ids, positions, is_rejected_token_mask, is_masked_token_mask,
                               token_indices_to_sample, hidden_state_mapping, slot_mappings, out_query_start_loc,
                               out_seq_lens)
