"""advance_draft_step: one later draft step of every request (position + 1, seq_len + 1, and the
new position's slot in every KV-cache group), in one op call, under either max_model_len rule,
with the step's token bookkeeping when asked (the drafts' store, input ids, sampling keys, hidden
rows: model runner V2's speculator does these in kernels of their own)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.arguments import (
    check_tensor,
    checked_size,
    checked_tensor_list,
    group_settings,
    max_model_len_arguments,
    padded_argument,
)
from specops.ops._op import SpecOp
from specops.reference.advance_draft_step import advance_draft_step as _reference

__all__ = ["DraftStep", "advance_draft_step"]

# past_max_model_len as the schema takes it.
RULES = {"reset": 0, "clamp": 1}


class DraftStep(NamedTuple):
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mappings: list[torch.Tensor]  # one per KV-cache group, in the order of block_tables
    query_start_loc: torch.Tensor | None


_OP = SpecOp("advance_draft_step", _reference)


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
    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled = group_settings(
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    num_reqs = token_indices.numel() if isinstance(token_indices, torch.Tensor) else (
        positions.numel() if isinstance(positions, torch.Tensor) else 0)
    if out_positions is None or slot_mappings is None:
        # What the outputs are allocated beside (positions' device), checked in the op's words first.
        check_tensor(positions, "positions", [torch.int64, torch.int32], 1)
    device = positions.device if isinstance(positions, torch.Tensor) else None
    if out_positions is None:
        out_positions = positions if token_indices is None else torch.empty(num_reqs, dtype=torch.int64,
                                                                            device=device)
    if slot_mappings is None:
        size = checked_size(num_tokens_padded, "num_tokens_padded", 0) if num_tokens_padded is not None else num_reqs
        slot_mappings = [torch.empty(size, dtype=torch.int64, device=device) for _ in range(num_groups)]
    else:
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    max_model_len, max_model_len_tensor = max_model_len_arguments(max_model_len, max_model_len_tensor)
    num_blocks = [] if num_blocks is None else list(num_blocks)
    past_max_model_len = RULES[past_max_model_len]
    num_tokens_padded = padded_argument(num_tokens_padded, "num_tokens_padded")
    num_reqs_padded = padded_argument(num_reqs_padded, "num_reqs_padded")
    num_draft_steps = -1 if num_draft_steps is None else checked_size(num_draft_steps, "num_draft_steps", 0)
    _OP.select()(positions, seq_lens, block_tables, token_indices, num_rejected_tokens, idx_mapping, out_positions,
        slot_mappings, query_start_loc, num_blocks, max_model_len, past_max_model_len, num_tokens_padded,
        num_reqs_padded, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded,
        slot_mapping_enabled, target_seq_lens, input_ids, draft_tokens, sampled_tokens, draft_step, num_draft_steps,
        sample_positions, hidden_states, next_hidden_states, max_model_len_tensor)
    return DraftStep(out_positions, seq_lens, slot_mappings, query_start_loc)
