"""expand_parallel_draft_inputs: the parallel-drafting first pass (the target step's tokens
rewritten into the draft's buffers with slots_per_request new slots per request, their
positions, masks, sample indices, hidden-state mapping, every group's slots and the extended
query layout), in one op call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.arguments import (
    INT32_MAX,
    check_allocated_elements,
    checked_bool,
    checked_int,
    group_settings,
    padded_argument,
)
from specops.ops._op import SpecOp
from specops.reference.expand_parallel_draft_inputs import expand_parallel_draft_inputs as _reference

__all__ = ["ParallelDraftInputs", "expand_parallel_draft_inputs"]



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


_OP = SpecOp("expand_parallel_draft_inputs", _reference)


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
    # The shift sizes the outputs: T' = T + R (S - shift).
    shift_input_ids = checked_bool(shift_input_ids, "shift_input_ids")
    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled = group_settings(
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    num_tokens_padded = padded_argument(num_tokens_padded, "num_tokens_padded")
    num_reqs_padded = padded_argument(num_reqs_padded, "num_reqs_padded")
    num_tokens = target_token_ids.numel() if isinstance(target_token_ids, torch.Tensor) else 0
    num_reqs = next_token_ids.numel() if isinstance(next_token_ids, torch.Tensor) else 0
    device = target_token_ids.device if isinstance(target_token_ids, torch.Tensor) else None
    num_out = num_tokens + num_reqs * max(slots_per_request - (1 if shift_input_ids else 0), 0)
    token_size = max(num_tokens_padded, 0) if num_tokens_padded >= 0 else num_out
    req_size = num_reqs_padded if num_reqs_padded >= 0 else num_reqs
    # Every size an output is allocated from, checked first (docs/hardening.md): T' and the
    # sample indices grow with slots_per_request.
    if token_size > INT32_MAX:
        raise ValueError(f"slots_per_request = {slots_per_request} makes T' = T + R * N = {num_out}, past the "
                         "2^31 - 1 tokens an output can index")
    check_allocated_elements(req_size, max(slots_per_request, 0),
                             "num_reqs_padded" if num_reqs_padded >= 0 else "slots_per_request",
                             "token_indices_to_sample: num_reqs_padded or R times slots_per_request")
    # An optional output that its inputs do not turn on is None and not computed
    # (docs/step_bookkeeping.md, "Optional outputs"):
    # out_seq_lens without seq_lens, hidden_state_mapping without the shift.
    if seq_lens is None:
        out_seq_lens = None
    if not shift_input_ids:
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
    if hidden_state_mapping is None and shift_input_ids:
        hidden_state_mapping = new(num_tokens, torch.int32)
    if slot_mappings is None:
        slot_mappings = [new(token_size, torch.int64) for _ in range(num_groups)]
    if out_query_start_loc is None:
        out_query_start_loc = new(req_size + 1, torch.int32)
    if out_seq_lens is None and seq_lens is not None:
        out_seq_lens = new(req_size, torch.int32)
    block_tables = list(block_tables)
    slot_mappings = list(slot_mappings)
    num_blocks = [] if num_blocks is None else list(num_blocks)
    _OP.select()(target_token_ids, target_positions, next_token_ids, query_start_loc, block_tables, num_rejected_tokens,
        seq_lens, idx_mapping, num_blocks, input_ids, positions, is_rejected_token_mask, is_masked_token_mask,
        token_indices_to_sample, hidden_state_mapping, slot_mappings, out_query_start_loc, out_seq_lens,
        slots_per_request, shift_input_ids, max_model_len, parallel_drafting_token_id, padding_token_id,
        num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block,
        cp_sharded, slot_mapping_enabled)
    return ParallelDraftInputs(num_out, input_ids, positions, is_rejected_token_mask, is_masked_token_mask,
                               token_indices_to_sample, hidden_state_mapping, slot_mappings, out_query_start_loc,
                               out_seq_lens)
