"""`PersistentMappings.advance_draft_step`: a later draft step on the mappings' own buffers.

The runner's draft loop calls it K times after `prepare_step`: the first call (with
`token_indices`, the sampled tokens' places in the target step) gathers the positions the
target step wrote into `PersistentMappings.draft_positions` and subtracts the rejected tokens
from `seq_lens`; each later call advances `draft_positions` and `seq_lens` in place. Every call
rewrites every group's captured slot mapping from the request-indexed source tables (read
through idx_mapping) with the group's own block size, CP sharding and slot-mapping switch, and
checks positions against each row's allocated blocks, as `prepare_step` does: one op call,
no allocation, no device-to-host copy.
"""

from __future__ import annotations

import torch

from specops.ops.advance_draft_step import RULES, DraftStep
from specops.ops.registry import OPS
from specops.persistent.captured import CapturedBuffers
from specops.persistent.checks import padded_extents

_DRAFT_STEP = OPS["advance_draft_step"]


def advance_draft_step(
    captured: CapturedBuffers,
    idx_mapping: torch.Tensor,
    *,
    max_model_len: int,
    past_max_model_len: str = "reset",
    token_indices: torch.Tensor | None = None,
    num_rejected_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    num_reqs_padded: int | None = None,
    num_tokens_padded: int | None = None,
) -> DraftStep:
    if past_max_model_len not in RULES:
        raise ValueError(f"past_max_model_len must be \"reset\" or \"clamp\", got {past_max_model_len!r}")
    if not isinstance(idx_mapping, torch.Tensor):
        raise ValueError(f"idx_mapping must be a tensor (batch row -> request row), got {type(idx_mapping).__name__}")
    num_reqs = idx_mapping.numel()
    num_reqs_padded, num_tokens_padded = padded_extents(captured, num_reqs, num_reqs_padded, num_reqs,
                                                        num_tokens_padded)
    draft_positions = captured.draft_positions[:num_reqs]
    # The first step gathers from the target step's positions; later steps advance in place.
    positions = captured.positions if token_indices is not None else draft_positions
    _DRAFT_STEP.select()(
        positions=positions, seq_lens=captured.seq_lens, block_tables=captured.source_block_tables,
        token_indices=token_indices, num_rejected_tokens=num_rejected_tokens, idx_mapping=idx_mapping,
        out_positions=draft_positions, slot_mappings=captured.slot_mappings, query_start_loc=query_start_loc,
        num_blocks=captured.num_blocks, max_model_len=max_model_len, past_max_model_len=RULES[past_max_model_len],
        num_tokens_padded=num_tokens_padded, num_reqs_padded=num_reqs_padded, **captured.layout.keywords)
    return DraftStep(draft_positions, captured.seq_lens[:num_reqs_padded], captured.slot_mappings, query_start_loc)
