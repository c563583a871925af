"""What a runner's step hands the drafting layer, defined below both the persistent buffers
(`PersistentMappings.draft_inputs` makes one) and the drafting layer (every group reads one)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch


@dataclasses.dataclass
class CommonDraftInputs:
    """What the runner hands every group of one draft step.

    query_start_loc int32 [>= R + 1] and seq_lens int32 [>= R] on the device;
    query_start_loc_cpu int32 [>= R + 1] and seq_lens_cpu (or None; int32 or int64) their host copies;
    positions int64/int32 [>= T]; block_tables[name] int32 [>= R, cols] and
    slot_mappings[name] int64/int32 [>= T] of each group. Longer tensors (persistent buffers)
    are read up to R / T. T = num_actual_tokens real tokens, num_input_tokens the padded count.
    is_prefilling (or None) bool [>= R] on the host: a request still in its prompt is a prefill
    whatever its query length (vllm-ascend's split_decodes_and_prefills with is_prefilling).
    """

    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    seq_lens_cpu: torch.Tensor | None
    positions: torch.Tensor
    num_reqs: int
    num_actual_tokens: int
    num_input_tokens: int
    causal: bool = True
    block_tables: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    slot_mappings: Mapping[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    is_prefilling: torch.Tensor | None = None
