"""How the step-bookkeeping ops' backends read their packed arguments: one reading, shared by
the torch references (python/specops/reference) and the Triton launchers (triton_kernels).

The draft ops (advance_draft_step, expand_parallel_draft_inputs) pack their integers as scalars
ending in the CP layout (cp_world_size, cp_rank, cp_interleave), then four ints per KV-cache
group (block size, blocks per KV block, CP-sharded, slot mapping on); see the wrappers'
pack_draft_step_sizes and pack_sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


class DraftGroupLayout(NamedTuple):
    block_size: int
    blocks_per_kv_block: int
    cp: tuple[int, int, int]  # (world size, rank, interleave); (1, 0, 1) for a group that is not CP-sharded
    enabled: bool  # False: every slot of the group is PAD


def draft_group_layouts(sizes: Sequence[int], first: int, num_groups: int) -> list[DraftGroupLayout]:
    """Each group's layout from a draft op's sizes: its four ints from `first` on, the CP
    layout in the three scalars before them."""
    world, rank, interleave = sizes[first - 3:first]
    layouts = []
    for g in range(num_groups):
        block_size, kv_blocks, sharded, enabled = sizes[first + 4 * g: first + 4 * (g + 1)]
        cp = (world, rank, interleave) if sharded else (1, 0, 1)
        layouts.append(DraftGroupLayout(block_size, kv_blocks, cp, enabled != 0))
    return layouts


def buffer_end(out: torch.Tensor, padded: int) -> int:
    """Where an output's padding ends: the op's *_padded argument, or (-1) the buffer's end."""
    return padded if padded >= 0 else out.numel()


class ParallelDraftSizes(NamedTuple):
    """expand_parallel_draft_inputs' scalars (its sizes before the groups)."""

    slots: int  # slots_per_request
    shift: int  # 1: shift_input_ids
    max_model_len: int
    draft_token: int  # parallel_drafting_token_id
    padding_token: int  # padding_token_id
    num_tokens_padded: int
    num_reqs_padded: int

    FIRST_GROUP = 10  # the first group's entry in sizes (after the CP layout)

    @classmethod
    def unpack(cls, sizes: Sequence[int]) -> ParallelDraftSizes:
        return cls(*sizes[:7])

    @property
    def new_tokens(self) -> int:
        """Outputs each request gets beyond its target tokens."""
        return self.slots - self.shift

    def num_out(self, num_tokens: int, num_reqs: int) -> int:
        """T': the draft's tokens."""
        return num_tokens + num_reqs * self.new_tokens


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
