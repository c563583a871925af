"""advance_draft_steps: every draft pass's device metadata of a chain-drafting step in one op call.

Pass 1 runs on the target step's layout (padded drafting: the rejected tokens stay in); passes
k = 2..K have one token per request, whose position and seq_len are advance_draft_step's rule
applied k - 1 times. None of them depends on a draft token, so all K are written right after the
target step: positions, seq_lens, query starts, RoPE rows (the split rank's too), the CP-split
local query starts / seq_lens / start positions, and every group's slots and formatted slot
pairs, each pass in its own row of every output (docs/draft_loop.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.arguments import (
    check_allocated_elements,
    check_tensor,
    checked_int,
    checked_size,
    checked_tensor_list,
    group_settings,
    ints_per_group,
    max_model_len_arguments,
)
from specops.ops._op import SpecOp
from specops.ops.advance_draft_step import RULES
from specops.reference.advance_draft_steps import advance_draft_steps as _reference

__all__ = ["DraftSteps", "advance_draft_steps"]


class DraftSteps(NamedTuple):
    """The outputs, row k - 1 of each holding draft pass k."""

    positions: torch.Tensor  # int64 [>= K, P]: each pass's padded stream of positions
    seq_lens: torch.Tensor  # int32 [>= K, Rb]
    query_start_loc: torch.Tensor  # int32 [>= K, >= Rb + 1]
    cos_sin: torch.Tensor  # [>= K, P, rot_dim]: RoPE rows of the padded stream
    local_cos_sin: torch.Tensor  # [>= K, P / split_size, rot_dim]: the split rank's rows, zero past the real tokens
    local_query_start_loc: torch.Tensor  # int32 [>= K, >= Rb + 1]
    local_seq_lens: torch.Tensor  # int32 [>= K, >= Rb]
    start_pos: torch.Tensor  # int32 [>= K, >= Rb]
    slots: list[torch.Tensor]  # per group int64 / int32 [>= K, S]
    slot_pairs: list[torch.Tensor]  # per group int64 / int32 [>= K, S, 2]


def stream_rows(num_input_tokens: int, split_size: int) -> tuple[int, int]:
    """(rows per split rank, padded stream rows) of a pass of num_input_tokens tokens."""
    per_rank = -(-num_input_tokens // split_size)
    return per_rank, per_rank * split_size


def pass_extents(num_steps: int, num_input_tokens: int, num_reqs_padded: int, split_size: int) -> tuple[int, int, int]:
    """(stream rows, rows per split rank, slot entries) the outputs need for every pass."""
    per_rank, pad = stream_rows(num_input_tokens, split_size)
    slots = num_input_tokens
    if num_steps > 1:
        later_rank, later_pad = stream_rows(num_reqs_padded, split_size)
        per_rank, pad, slots = max(per_rank, later_rank), max(pad, later_pad), max(slots, num_reqs_padded)
    return pad, per_rank, slots


# The RoPE cache's dtypes (the op checks them; the wrapper allocates the cos/sin outputs in it).
ROPE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_OP = SpecOp("advance_draft_steps", _reference)


def _allocation_bounded(num_steps: int, num_input_tokens: int, num_reqs_padded: int, num_reqs: int, split_size: int,
                        positions: object, rope_cos_sin_cache: object) -> None:
    """The sizes and tensors the wrapper allocates the outputs from (positions' device, the
    cache's dtype and width), checked before it does (never a negative dimension, never
    gigabytes from an unchecked value, never an AttributeError for a None), in the op's words."""
    checked_size(num_steps, "num_steps", 1)
    checked_size(num_input_tokens, "num_input_tokens", 0)
    checked_size(split_size, "split_size", 1)
    checked_size(num_reqs_padded, "num_reqs_padded", num_reqs, f"R = token_indices.numel() = {num_reqs}")
    check_tensor(positions, "positions", [torch.int64, torch.int32], 1)
    check_tensor(rope_cos_sin_cache, "rope_cos_sin_cache", list(ROPE_DTYPES), 2, positions.device, "positions")
    rot_dim = rope_cos_sin_cache.size(1)
    pad, _, entries = pass_extents(num_steps, num_input_tokens, num_reqs_padded, split_size)
    check_allocated_elements(num_steps, max(pad * rot_dim, 2 * entries), "num_input_tokens",
                             "num_steps rows of the padded stream of num_input_tokens or num_reqs_padded tokens")
    check_allocated_elements(num_steps, num_reqs_padded + 1, "num_reqs_padded", "num_steps rows of its requests")


def advance_draft_steps(
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    token_indices: torch.Tensor,
    num_rejected_tokens: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    rope_cos_sin_cache: torch.Tensor,
    *,
    num_steps: int,
    num_actual_tokens: int,
    num_input_tokens: int,
    target_slot_mappings: Sequence[torch.Tensor],
    max_model_len: int | torch.Tensor | None = None,
    past_max_model_len: str = "reset",
    idx_mapping: torch.Tensor | None = None,
    num_blocks: Sequence[torch.Tensor] | None = None,
    storage_block_sizes: Sequence[int] | int | None = None,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    split_size: int = 1,
    split_rank: int = 0,
    num_reqs_padded: int | None = None,
    out: DraftSteps | None = None,
    max_model_len_tensor: torch.Tensor | None = None,
) -> DraftSteps:
    """Every draft pass k = 1..num_steps of a chain-drafting step, row k - 1 of each output.

    Pass 1: the target layout (query_start_loc [R + 1], positions [num_actual_tokens], seq_lens
    [R] before rejection, target_slot_mappings per group), padded to num_input_tokens. Passes
    k >= 2: one token per request, R = token_indices.numel(), padded to num_reqs_padded; request
    r continues from positions[token_indices[r]] with seq_lens[r] - num_rejected_tokens[r], each
    pass under advance_draft_step's rule ("reset" or "clamp") and its slots in every group
    (block_tables request-indexed through idx_mapping, or batch-indexed). The token split
    (split_size ranks, this one split_rank: the drafting layer's cp_size / cp_rank) pads each
    pass's stream to a multiple of split_size. `out`: the buffers to write (default: new ones,
    sized for this call, with Rb = num_reqs_padded request rows). The limit: max_model_len (an
    int), or a 0-D int32 / int64 tensor on positions' device (max_model_len_tensor, or
    max_model_len itself), read on the device as advance_draft_step reads it.
    """
    if past_max_model_len not in RULES:
        raise ValueError(f"past_max_model_len must be \"reset\" or \"clamp\", got {past_max_model_len!r}")
    block_tables = checked_tensor_list(block_tables, "block_tables")
    target_slot_mappings = checked_tensor_list(target_slot_mappings, "target_slot_mappings")
    num_groups = len(block_tables)
    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled = group_settings(
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    storage_block_sizes = block_sizes if storage_block_sizes is None else ints_per_group(
        storage_block_sizes, num_groups, "storage_block_sizes")
    num_reqs = token_indices.numel() if isinstance(token_indices, torch.Tensor) else 0
    num_reqs_padded = num_reqs if num_reqs_padded is None else num_reqs_padded
    if out is None:
        # The ints the outputs are sized from, taken as the schema takes them before the allocation.
        num_steps, num_input_tokens = checked_int(num_steps, "num_steps"), checked_int(num_input_tokens,
                                                                                      "num_input_tokens")
        split_size = checked_int(split_size, "split_size")
        num_reqs_padded = checked_int(num_reqs_padded, "num_reqs_padded")
        _allocation_bounded(num_steps, num_input_tokens, num_reqs_padded, num_reqs, split_size, positions,
                            rope_cos_sin_cache)
        out = empty_draft_steps(num_steps, num_input_tokens, num_reqs_padded, num_reqs_padded, split_size,
                                rope_cos_sin_cache, [t.dtype for t in target_slot_mappings],
                                positions.device if isinstance(positions, torch.Tensor) else None)
    max_model_len, max_model_len_tensor = max_model_len_arguments(max_model_len, max_model_len_tensor)
    num_blocks = [] if num_blocks is None else list(num_blocks)
    out_positions, out_seq_lens, out_query_start_loc = out.positions, out.seq_lens, out.query_start_loc
    out_cos_sin, out_local_cos_sin, out_start_pos = out.cos_sin, out.local_cos_sin, out.start_pos
    out_local_query_start_loc, out_local_seq_lens = out.local_query_start_loc, out.local_seq_lens
    out_slots, out_slot_pairs = list(out.slots), list(out.slot_pairs)
    past_max_model_len = RULES[past_max_model_len]
    _OP.select()(query_start_loc, positions, seq_lens, token_indices, num_rejected_tokens, idx_mapping, block_tables,
        num_blocks, target_slot_mappings, rope_cos_sin_cache, out_positions, out_seq_lens, out_query_start_loc,
        out_cos_sin, out_local_cos_sin, out_local_query_start_loc, out_local_seq_lens, out_start_pos, out_slots,
        out_slot_pairs, num_steps, num_actual_tokens, num_input_tokens, num_reqs_padded, max_model_len,
        past_max_model_len, split_size, split_rank, cp_world_size, cp_rank, cp_interleave, block_sizes,
        blocks_per_kv_block, cp_sharded, slot_mapping_enabled, storage_block_sizes, max_model_len_tensor)
    return out


def empty_draft_steps(num_steps: int, num_input_tokens: int, num_reqs_padded: int, max_num_reqs: int,
                      split_size: int, rope_cos_sin_cache: torch.Tensor, slot_dtypes: Sequence[torch.dtype],
                      device: torch.device, pair_dtypes: Sequence[torch.dtype] | None = None) -> DraftSteps:
    """Zeroed outputs for num_steps passes: pass 1 of num_input_tokens tokens, the others of
    num_reqs_padded, max_num_reqs request rows; one slot and one pair buffer per slot dtype."""
    pad, per_rank, slot_entries = pass_extents(num_steps, num_input_tokens, num_reqs_padded, split_size)
    int32 = dict(dtype=torch.int32, device=device)
    rot_dim = rope_cos_sin_cache.size(1)
    rope = dict(dtype=rope_cos_sin_cache.dtype, device=device)
    pair_dtypes = slot_dtypes if pair_dtypes is None else pair_dtypes
    return DraftSteps(
        positions=torch.zeros((num_steps, pad), dtype=torch.int64, device=device),
        seq_lens=torch.zeros((num_steps, max_num_reqs), **int32),
        query_start_loc=torch.zeros((num_steps, max_num_reqs + 1), **int32),
        cos_sin=torch.zeros((num_steps, pad, rot_dim), **rope),
        local_cos_sin=torch.zeros((num_steps, per_rank, rot_dim), **rope),
        local_query_start_loc=torch.zeros((num_steps, max_num_reqs + 1), **int32),
        local_seq_lens=torch.zeros((num_steps, max_num_reqs), **int32),
        start_pos=torch.zeros((num_steps, max_num_reqs), **int32),
        slots=[torch.zeros((num_steps, slot_entries), dtype=dtype, device=device) for dtype in slot_dtypes],
        slot_pairs=[torch.zeros((num_steps, slot_entries, 2), dtype=dtype, device=device) for dtype in pair_dtypes])
