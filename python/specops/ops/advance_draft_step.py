"""advance_draft_step: one later draft step of every request (position + 1, seq_len + 1, and the
new position's slot in every KV-cache group), in one op call, under either max_model_len rule,
with the step's token bookkeeping when asked (the drafts' store, input ids, sampling keys, hidden
rows: model runner V2's speculator does these in kernels of their own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.ops._checks import (
    check_entries,
    check_no_overlap,
    check_outputs_alias_nothing,
    check_positive,
    check_rows_disjoint,
    check_tensor,
    checked_size,
    checked_tensor_list,
)
from specops.ops._op import SpecOp
from specops.ops._step_checks import (
    check_draft_groups,
    check_max_model_len,
    group_settings,
    group_tensors,
    max_model_len_arguments,
    padded_argument,
    padded_end,
)
from specops.reference.advance_draft_step import advance_draft_step as _reference

# past_max_model_len as the schema takes it.
RULES = {"reset": 0, "clamp": 1}
# The schema's last nine arguments for a step without token bookkeeping (num_draft_steps -1: none).
NO_DRAFT_INPUTS = (None, None, None, None, None, -1, None, None, None)
HIDDEN_DTYPES = [torch.bfloat16, torch.float16, torch.float32]


class DraftStep(NamedTuple):
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mappings: list[torch.Tensor]  # one per KV-cache group, in the order of block_tables
    query_start_loc: torch.Tensor | None


def _same_span(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    return (a.device == b.device and a.dtype == b.dtype and a.numel() == b.numel()
            and a.untyped_storage()._cdata == b.untyped_storage()._cdata and a.storage_offset() == b.storage_offset())


def _check_per_request(tensor: torch.Tensor | None, name: str, dtypes: list[torch.dtype], num_reqs: int, what: str,
                       device: torch.device) -> None:
    """An optional 1-D tensor of exactly one entry per request."""
    if tensor is None:
        return
    check_tensor(tensor, name, dtypes, 1, device, "positions")
    if tensor.numel() != num_reqs:
        raise ValueError(f"{name} must have {what} = {num_reqs} entries, got {tensor.numel()}")


def _check(positions: torch.Tensor, seq_lens: torch.Tensor, block_tables: Sequence[torch.Tensor],
           token_indices: torch.Tensor | None, num_rejected_tokens: torch.Tensor | None,
           idx_mapping: torch.Tensor | None, out_positions: torch.Tensor, slot_mappings: Sequence[torch.Tensor],
           query_start_loc: torch.Tensor | None, num_blocks: Sequence[torch.Tensor], max_model_len: int,
           past_max_model_len: int, num_tokens_padded: int, num_reqs_padded: int, cp_world_size: int, cp_rank: int,
           cp_interleave: int, block_sizes: Sequence[int], blocks_per_kv_block: Sequence[int],
           cp_sharded: Sequence[bool], slot_mapping_enabled: Sequence[bool], target_seq_lens: torch.Tensor | None,
           input_ids: torch.Tensor | None, draft_tokens: torch.Tensor | None, sampled_tokens: torch.Tensor | None,
           draft_step: torch.Tensor | None, num_draft_steps: int, sample_positions: torch.Tensor | None,
           hidden_states: torch.Tensor | None, next_hidden_states: torch.Tensor | None,
           max_model_len_tensor: torch.Tensor | None = None) -> None:
    """Mirrors csrc/cpu/advance_draft_step.cpp (metadata only)."""
    rule, world, rank, interleave = past_max_model_len, cp_world_size, cp_rank, cp_interleave
    check_max_model_len(max_model_len, max_model_len_tensor, positions)
    if rule not in (0, 1):
        raise ValueError(f"past_max_model_len must be \"reset\" (0) or \"clamp\" (1), got {rule}")
    check_positive(world, "cp_world_size")
    if not 0 <= rank < world:
        raise ValueError(f"cp_rank must be in [0, cp_world_size = {world}), got {rank}")
    check_positive(interleave, "cp_interleave")
    check_tensor(positions, "positions", [torch.int64, torch.int32], 1)
    device = positions.device
    if token_indices is not None:
        check_tensor(token_indices, "token_indices", [torch.int32, torch.int64], 1, device, "positions")
    num_reqs = token_indices.numel() if token_indices is not None else positions.numel()
    what = "R = token_indices.numel()" if token_indices is not None else "R = positions.numel()"
    check_tensor(seq_lens, "seq_lens", [torch.int32], 1, device, "positions")
    check_entries(seq_lens, "seq_lens", num_reqs, what)
    padded_end(seq_lens, "seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R")
    _check_per_request(num_rejected_tokens, "num_rejected_tokens", [torch.int32], num_reqs, what, device)
    _check_per_request(idx_mapping, "idx_mapping", [torch.int32, torch.int64], num_reqs, what, device)
    check_tensor(out_positions, "out_positions", [torch.int64, torch.int32], 1, device, "positions")
    check_entries(out_positions, "out_positions", num_reqs, what)
    if out_positions.numel() > num_reqs and num_tokens_padded >= 0 and not (
            num_reqs <= num_tokens_padded <= out_positions.numel()):
        raise ValueError(f"num_tokens_padded must be in [R = {num_reqs}, out_positions.numel() = "
                         f"{out_positions.numel()}], got {num_tokens_padded}")
    if query_start_loc is not None:
        check_tensor(query_start_loc, "query_start_loc", [torch.int32], 1, device, "positions")
        end = num_reqs_padded + 1 if num_reqs_padded >= 0 else query_start_loc.numel()
        if not num_reqs + 1 <= end <= query_start_loc.numel():
            raise ValueError(f"query_start_loc must have at least num_reqs_padded + 1 = {max(end, num_reqs + 1)} "
                             f"entries, got {query_start_loc.numel()}")
    _check_inputs(num_reqs, what, device, target_seq_lens, input_ids, draft_tokens, sampled_tokens, draft_step,
                  num_draft_steps, sample_positions, hidden_states, next_hidden_states)
    check_draft_groups(block_tables, slot_mappings, num_blocks, block_sizes, blocks_per_kv_block, cp_sharded,
                       slot_mapping_enabled, (world, rank, interleave), num_reqs, num_tokens_padded, device,
                       "positions")
    if token_indices is not None or not _same_span(out_positions, positions):
        check_no_overlap(out_positions, "out_positions", positions, "positions")
    outputs = [(seq_lens, "seq_lens"), (out_positions, "out_positions"), (query_start_loc, "query_start_loc"),
               (input_ids, "input_ids"), (draft_tokens, "draft_tokens"), (sample_positions, "sample_positions"),
               (next_hidden_states, "next_hidden_states")]
    inputs = [(token_indices, "token_indices"), (num_rejected_tokens, "num_rejected_tokens"),
              (idx_mapping, "idx_mapping"), (target_seq_lens, "target_seq_lens"), (sampled_tokens, "sampled_tokens"),
              (draft_step, "draft_step"), (hidden_states, "hidden_states"),
              (max_model_len_tensor, "max_model_len_tensor")]
    group_outputs, group_inputs = group_tensors(slot_mappings, block_tables, num_blocks)
    outputs += group_outputs
    inputs += group_inputs
    check_outputs_alias_nothing(outputs, inputs)
    for out, name in outputs:
        if out is not None and out is not out_positions:
            check_no_overlap(out, name, positions, "positions")


def _check_inputs(num_reqs: int, what: str, device: torch.device, target_seq_lens: torch.Tensor | None,
                  input_ids: torch.Tensor | None, draft_tokens: torch.Tensor | None,
                  sampled_tokens: torch.Tensor | None, draft_step: torch.Tensor | None, num_draft_steps: int,
                  sample_positions: torch.Tensor | None, hidden_states: torch.Tensor | None,
                  next_hidden_states: torch.Tensor | None) -> None:
    """The token bookkeeping's tensors; draft_step's value is the host op's to check (reading it
    here would sync a device)."""
    _check_per_request(target_seq_lens, "target_seq_lens", [torch.int32], num_reqs, what, device)
    _check_per_request(sampled_tokens, "sampled_tokens", [torch.int64, torch.int32], num_reqs, what, device)
    if draft_tokens is not None:
        check_tensor(draft_tokens, "draft_tokens", [torch.int64, torch.int32], 2, device, "positions")
        if draft_tokens.size(0) < num_reqs:
            raise ValueError(f"draft_tokens must have at least {what} = {num_reqs} rows, got {draft_tokens.size(0)}")
        check_rows_disjoint(draft_tokens, "draft_tokens")
    if sampled_tokens is not None and draft_tokens is None:
        raise ValueError("sampled_tokens needs draft_tokens (the buffer it is stored in)")
    if input_ids is not None:
        check_tensor(input_ids, "input_ids", [torch.int32, torch.int64], 1, device, "positions")
        check_entries(input_ids, "input_ids", num_reqs, what)
        if draft_tokens is None:
            raise ValueError("input_ids needs draft_tokens (the tokens it receives)")
    if draft_step is not None:
        if not isinstance(draft_step, torch.Tensor):
            raise ValueError(f"draft_step must be a tensor, got {type(draft_step).__name__}")
        if draft_step.device != device:
            raise ValueError(f"draft_step must be on {device} like positions, got {draft_step.device}")
        if draft_step.dtype not in (torch.int64, torch.int32):
            dtype = str(draft_step.dtype).removeprefix("torch.")
            raise ValueError(f"draft_step must have dtype int64 or int32, got {dtype}")
        if draft_step.dim() != 0:
            raise ValueError(f"draft_step must be 0-D, got shape {list(draft_step.shape)}")
    elif draft_tokens is not None and draft_tokens.size(1) < 1:
        raise ValueError("draft_tokens must have at least 1 column (step 0), got 0")
    if num_draft_steps >= 0:
        if draft_step is None:
            raise ValueError("num_draft_steps needs draft_step (the step it is compared with)")
        check_positive(num_draft_steps, "num_draft_steps")
    if sample_positions is not None:
        check_tensor(sample_positions, "sample_positions", [torch.int64, torch.int32], 1, device, "positions")
        check_entries(sample_positions, "sample_positions", num_reqs, what)
    if (hidden_states is None) != (next_hidden_states is None):
        given = "hidden_states" if hidden_states is not None else "next_hidden_states"
        raise ValueError(f"hidden_states and next_hidden_states come together, got only {given}")
    if hidden_states is not None:
        check_tensor(hidden_states, "hidden_states", HIDDEN_DTYPES, 2, device, "positions")
        if isinstance(next_hidden_states, torch.Tensor) and next_hidden_states.dtype != hidden_states.dtype:
            raise ValueError(f"next_hidden_states must have dtype {str(hidden_states.dtype).removeprefix('torch.')} "
                             f"like hidden_states, got {str(next_hidden_states.dtype).removeprefix('torch.')}")
        check_tensor(next_hidden_states, "next_hidden_states", [hidden_states.dtype], 2, device, "positions")
        for tensor, name in ((hidden_states, "hidden_states"), (next_hidden_states, "next_hidden_states")):
            if tensor.size(0) < num_reqs:
                raise ValueError(f"{name} must have at least {what} = {num_reqs} rows, got {tensor.size(0)}")
        if next_hidden_states.size(1) != hidden_states.size(1):
            raise ValueError(f"next_hidden_states must have {hidden_states.size(1)} columns like hidden_states, got "
                             f"{next_hidden_states.size(1)}")
        check_rows_disjoint(next_hidden_states, "next_hidden_states")


_OP = SpecOp("advance_draft_step", _check, _reference)


def advance_draft_step(
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    *,
    max_model_len: int | torch.Tensor | None = None,
    past_max_model_len: str = "reset",
    token_indices: torch.Tensor | None = None,
    num_rejected_tokens: torch.Tensor | None = None,
    idx_mapping: torch.Tensor | None = None,
    out_positions: torch.Tensor | None = None,
    slot_mappings: Sequence[torch.Tensor] | None = None,
    query_start_loc: torch.Tensor | None = None,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    num_blocks: Sequence[torch.Tensor] | None = None,
    num_tokens_padded: int | None = None,
    num_reqs_padded: int | None = None,
    target_seq_lens: torch.Tensor | None = None,
    input_ids: torch.Tensor | None = None,
    draft_tokens: torch.Tensor | None = None,
    sampled_tokens: torch.Tensor | None = None,
    draft_step: torch.Tensor | None = None,
    num_draft_steps: int | None = None,
    sample_positions: torch.Tensor | None = None,
    hidden_states: torch.Tensor | None = None,
    next_hidden_states: torch.Tensor | None = None,
    max_model_len_tensor: torch.Tensor | None = None,
) -> DraftStep:
    """One draft decode step (one token per request) for every KV-cache group at once.

    R = token_indices.numel() if given (request r continues from positions[token_indices[r]],
    the first draft step's gather) else positions.numel(). p = that position + 1; base =
    seq_lens[r] - num_rejected_tokens[r] (first step) or seq_lens[r]. "reset" (V1 Eagle,
    vllm-ascend): a request with p >= max_model_len gets position 0, seq_len 1 and PAD slots;
    else position p and seq_len min(base + 1, max_model_len). "clamp" (MRV2): position
    min(p, max_model_len - 1), seq_len min(base + 1, max_model_len), and its slot. Slots as
    compute_slot_mapping, per group (block_tables[g] batch-indexed, or request-indexed through
    idx_mapping; block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_blocks:
    one per group or one for all), PAD in [R, num_tokens_padded). seq_lens is updated in place
    (0 in [R, num_reqs_padded)); out_positions defaults to positions itself without
    token_indices, else a new int64 [R]; query_start_loc, when given, receives min(i, R) for
    i <= num_reqs_padded. The host op rejects a position past its row's table or blocks.

    The limit is max_model_len (an int), or a 0-D int32 / int64 tensor on positions' device,
    given as max_model_len_tensor or as max_model_len itself (vLLM 0.34's `max_model_len_gpu`):
    read on the device, never on the host, so a captured graph reads its value at each replay.
    The host op rejects a value below 1; a device kernel takes it as 1.

    The step's token bookkeeping (model runner V2's prepare_decode_inputs and
    update_draft_inputs, in the same launch), with step = draft_step (a 0-D tensor, read
    on the device; 0 when not given): sampled_tokens [R] is stored at draft_tokens[r, step]; with
    num_draft_steps, a step >= num_draft_steps - 1 is the last and writes nothing else;
    otherwise input_ids[r] receives sampled_tokens[r] (else draft_tokens[r, step]),
    sample_positions[r] += 1, next_hidden_states[r] = hidden_states[r], and target_seq_lens [R],
    when given, is read in place of seq_lens for the base (seq_lens still receives the result).
    """
    if past_max_model_len not in RULES:
        raise ValueError(f"past_max_model_len must be \"reset\" or \"clamp\", got {past_max_model_len!r}")
    block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    per_group = group_settings(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    num_reqs = token_indices.numel() if isinstance(token_indices, torch.Tensor) else (
        positions.numel() if isinstance(positions, torch.Tensor) else 0)
    if out_positions is None or slot_mappings is None:
        # What the outputs are allocated beside (positions' device), checked in the op's words first.
        check_tensor(positions, "positions", [torch.int64, torch.int32], 1)
    if out_positions is None:
        out_positions = positions if token_indices is None else torch.empty(num_reqs, dtype=torch.int64,
                                                                            device=positions.device)
    if slot_mappings is None:
        size = checked_size(num_tokens_padded, "num_tokens_padded", 0) if num_tokens_padded is not None else num_reqs
        slot_mappings = [torch.empty(size, dtype=torch.int64, device=positions.device) for _ in range(num_groups)]
    else:
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    max_model_len, max_model_len_tensor = max_model_len_arguments(max_model_len, max_model_len_tensor)
    _OP.select()(positions, seq_lens, block_tables, token_indices, num_rejected_tokens, idx_mapping, out_positions,
                 slot_mappings, query_start_loc, [] if num_blocks is None else list(num_blocks), max_model_len,
                 RULES[past_max_model_len], padded_argument(num_tokens_padded, "num_tokens_padded"),
                 padded_argument(num_reqs_padded, "num_reqs_padded"), cp_world_size, cp_rank, cp_interleave,
                 *per_group, target_seq_lens, input_ids, draft_tokens, sampled_tokens, draft_step,
                 -1 if num_draft_steps is None else checked_size(num_draft_steps, "num_draft_steps", 0),
                 sample_positions, hidden_states, next_hidden_states, max_model_len_tensor)
    return DraftStep(out_positions, seq_lens, slot_mappings, query_start_loc)
