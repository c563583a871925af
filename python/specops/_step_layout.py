"""How the step-bookkeeping ops' backends read their per-group arguments: one reading, shared by
the torch references (python/specops/reference) and the Triton launchers (triton_kernels).

The ops that map the slots of every KV-cache group (prepare_spec_decode_inputs,
advance_draft_step, advance_draft_steps, expand_parallel_draft_inputs) take four lists of one
entry per group (block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled) beside the
CP layout (cp_world_size, cp_rank, cp_interleave) that a CP-sharded group uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


class GroupLayout(NamedTuple):
    block_size: int
    blocks_per_kv_block: int
    cp: tuple[int, int, int]  # (world size, rank, interleave); (1, 0, 1) for a group that is not CP-sharded
    enabled: bool  # False: every slot of the group is PAD


def group_layouts(block_sizes: Sequence[int], blocks_per_kv_block: Sequence[int], cp_sharded: Sequence[bool],
                  slot_mapping_enabled: Sequence[bool], cp_world_size: int, cp_rank: int,
                  cp_interleave: int) -> list[GroupLayout]:
    """Each group's layout from an op's per-group lists and its CP layout."""
    cp = (cp_world_size, cp_rank, cp_interleave)
    return [GroupLayout(block_size, kv_blocks, cp if sharded else (1, 0, 1), bool(enabled))
            for block_size, kv_blocks, sharded, enabled in zip(block_sizes, blocks_per_kv_block, cp_sharded,
                                                               slot_mapping_enabled)]


def spec_decode_extents(positions: torch.Tensor, seq_lens: torch.Tensor, num_tokens_padded: int | None,
                        num_reqs_padded: int | None) -> tuple[int, int]:
    """prepare_spec_decode_inputs' padded extents: as given, or (None) positions.numel() and
    seq_lens.numel() (a tensor the checks then reject counts as empty)."""
    if num_tokens_padded is None:
        num_tokens_padded = positions.numel() if isinstance(positions, torch.Tensor) else 0
    if num_reqs_padded is None:
        num_reqs_padded = seq_lens.numel() if isinstance(seq_lens, torch.Tensor) else 0
    return num_tokens_padded, num_reqs_padded


def buffer_end(out: torch.Tensor, padded: int) -> int:
    """Where an output's padding ends: the op's *_padded argument, or (-1) the buffer's end."""
    return padded if padded >= 0 else out.numel()


def parallel_draft_tokens(num_tokens: int, num_reqs: int, slots_per_request: int, shift_input_ids: bool) -> int:
    """T': expand_parallel_draft_inputs' draft tokens (each request gets slots_per_request new
    ones beyond its target tokens, one fewer with shift_input_ids)."""
    return num_tokens + num_reqs * (slots_per_request - int(shift_input_ids))


def input_ids_request_rows(num_computed_tokens: torch.Tensor, prefill_len: torch.Tensor,
                           last_sampled_tokens: torch.Tensor, draft_tokens: torch.Tensor,
                           all_token_ids: torch.Tensor | None, next_prefill_tokens: torch.Tensor | None) -> int:
    """prepare_input_ids' request rows: the rows every request-indexed tensor holds (a row past
    them is no request on device paths)."""
    rows = min(num_computed_tokens.numel(), prefill_len.numel(), last_sampled_tokens.size(0), draft_tokens.size(0))
    if all_token_ids is not None:
        rows = min(rows, all_token_ids.size(0), next_prefill_tokens.size(1))
    return rows


def logits_ends(num_logits_padded: int, *outputs: torch.Tensor) -> list[int]:
    """Where each of prepare_input_ids' per-logit outputs ends (num_logits_padded, or -1: each buffer's end)."""
    return [buffer_end(out, num_logits_padded) for out in outputs]
