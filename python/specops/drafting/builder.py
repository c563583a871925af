"""One KV-cache group's builder: what the group's metadata needs that stays fixed (its windows,
its sas_metadata arguments, its DSpark row width, its cache entry names) and its persistent
buffers per draft index. The step (step.py) computes; the builder holds."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import torch

from specops.drafting.buffers import DraftBuffers
from specops.drafting.cache import StepCache
from specops.drafting.configs import (
    SLOT_MAPPING_FORMATS, CommonDraftInputs, DraftAttnMetadata, GroupConfig, ModelConfig, checked_draft_index)
from specops.drafting.platform import DraftPlatform, resolved_draft_platform
from specops.drafting.step import build_step, step_fingerprints
from specops.ops._checks import check_allocated_elements, checked_size
from specops.ops.dspark_swa_indices import default_width
from specops.sas_family_layout import LI_HEADS
from specops.sas_layout import CMP_TOPKS

if TYPE_CHECKING:
    from specops.drafting.plan import StepPlan


class SasArguments(NamedTuple):
    """The fixed arguments of a group's sas_metadata for one kind of step (step.py's _run_sas
    adds the step's batch)."""

    num_heads_q: int
    head_dim: int
    ori_win_left: int
    ori_win_right: int
    num_cube_cores: int
    num_vector_cores: int
    ascend950: bool
    cmp_ratio: int = 1  # the group's compress ratio; 1: no compressed KV
    cmp_topk: int = 0  # C4: the indexer's top-k (SCFA); C128: 0 (CFA)
    has_cmp_kv: bool = False
    a5: bool = False  # kv_quant_sas_metadata (the builder's platform.sas_variant "a5")


class DraftMetadataBuilder:
    """Builds one KV-cache group's DraftAttnMetadata for each draft step.

    max_num_reqs / max_num_tokens bound num_reqs and num_input_tokens of every step. device:
    where the buffers live (default torch.get_default_device()); the inputs and the RoPE cache
    must be there too (the host copies on the CPU).

    Read by the layer's step, not meant to be changed: `platform`, the core counts, SoC and sas
    variant its schedules are planned for (ModelConfig's, any left None read from the NPU
    `device`; off the NPU the config must give them all: drafting/platform.py);
    `step_windows[causal]`, the window of each kind of step; `sas_arguments[causal]`, the
    group's sas_metadata arguments (None without a sliding window); `step_plans`, the plans of
    the steps this builder is the first group of.

    Not thread-safe: a builder owns persistent buffers that every build rewrites, so two threads
    building with one builder (or sharing one StepCache) corrupt each other's results. A runner
    has one set of builders per thread that drafts.
    """

    def __init__(self, model: ModelConfig, group: GroupConfig, max_num_reqs: int, max_num_tokens: int,
                 device: torch.device | str | None = None):
        if not isinstance(model, ModelConfig):
            raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
        if not isinstance(group, GroupConfig):
            raise ValueError(f"group must be a GroupConfig, got {type(group).__name__}")
        # The sizes its buffers are allocated from: bounded first (docs/hardening.md, "Sizes an op
        # allocates from").
        max_num_reqs, max_num_tokens = checked_size(max_num_reqs, "max_num_reqs", 1), checked_size(max_num_tokens,
                                                                                                   "max_num_tokens", 1)
        self.model = model
        self.group = group
        self.max_num_reqs = max_num_reqs
        self.max_num_tokens = max_num_tokens
        self.device = torch.device(device) if device is not None else torch.get_default_device()
        if model.rope_cos_sin_cache.device != self.device:
            raise ValueError(f"rope_cos_sin_cache must be on the builder's device {self.device}, "
                             f"got {model.rope_cos_sin_cache.device}")
        # Before anything is made: a platform that cannot be resolved leaves nothing built.
        self.platform: DraftPlatform = resolved_draft_platform(model, self.device)
        platform = self.platform
        self.window = group.window
        num_speculative_tokens = model.num_speculative_tokens
        # The window of each kind of step (GroupConfig.step_window): a DSpark group's non-causal
        # step sees its whole draft block past the sliding window.
        self.step_windows = {causal: group.step_window(causal, num_speculative_tokens) for causal in (True, False)}
        self.dspark_width = None
        if group.dspark:
            least = group.sliding_window + num_speculative_tokens
            if group.dspark_index_width is None:
                self.dspark_width = default_width(group.sliding_window, num_speculative_tokens)
            elif group.dspark_index_width < least:
                raise ValueError(
                    f"dspark_index_width of group {group.name!r} must be >= sliding_window + num_speculative_tokens "
                    f"= {least}, got {group.dspark_index_width}")
            else:
                self.dspark_width = group.dspark_index_width
            check_allocated_elements(max_num_tokens, self.dspark_width, "max_num_tokens",
                                     f"rows of group {group.name!r}'s DSpark indices, {self.dspark_width} wide")
        # A C4 group's schedules take the indexer settings as their own arguments (index_topk the
        # sparse-attention schedule's cmp_topk, index_n_heads the lightning indexer's query heads):
        # what they refuse is rejected here, naming what the caller passed, not by the first build.
        if group.compress_ratio == 4 and model.index_topk not in CMP_TOPKS:
            raise ValueError(f"index_topk must be one of {list(CMP_TOPKS)} for group {group.name!r} (compress_ratio "
                             f"4: the sparse-attention schedule's cmp_topk; 0: no top-k), got {model.index_topk}")
        if group.compress_ratio == 4 and model.index_n_heads != LI_HEADS:
            raise ValueError(f"index_n_heads must be {LI_HEADS} for group {group.name!r} (compress_ratio 4: the "
                             f"lightning indexer's query heads), got {model.index_n_heads}")
        self._buffers: dict[int, DraftBuffers] = {}
        self.step_plans: dict[tuple, StepPlan] = {}
        # Builders of models with these values (and the same RoPE cache tensor) share entries.
        # Names are strings: their hash is computed once, and they read well in the debug log.
        model_key = (f"rope={id(model.rope_cos_sin_cache):#x} k={num_speculative_tokens} "
                     f"cp={model.cp_rank}/{model.cp_size} device={self.device}")
        self._invariant_name = f"group_invariant[{model_key}]"
        # A group with a sliding window gets the sas_metadata vllm-ascend's draft builders pass to
        # the sparse attention kernel, per kind of step (causal or not); full attention gets None.
        # Groups with the same arguments share one result: the name holds every argument that is
        # not a group-invariant input.
        self.sas_arguments: dict[bool, SasArguments] | None = None
        self._sas_names = None
        if group.sliding_window is not None:
            # A compressed group's schedule adds its compressed KV: C4 through the indexer's top-k
            # (SCFA), C128 every compressed token (CFA). At most three per step: one per ratio.
            ratio = group.compress_ratio
            compressed = dict(cmp_ratio=ratio, cmp_topk=model.index_topk if ratio == 4 else 0, has_cmp_kv=ratio > 1,
                              a5=platform.sas_variant == "a5")
            self.sas_arguments = {
                causal: SasArguments(num_heads_q=model.num_heads_q, head_dim=model.head_dim, ori_win_left=left,
                                     ori_win_right=right, num_cube_cores=platform.num_cube_cores,
                                     num_vector_cores=platform.num_vector_cores, ascend950=platform.ascend950,
                                     **compressed)
                for causal, (left, right) in self.step_windows.items()
            }
            self._sas_names = {
                causal: (f"sas_metadata[{model_key} heads={model.num_heads_q} head_dim={model.head_dim} "
                         f"window={window} cores={platform.num_cube_cores}/{platform.num_vector_cores} "
                         f"soc={platform.soc_version} variant={platform.sas_variant} "
                         f"cmp={compressed['cmp_ratio']}/{compressed['cmp_topk']}]")
                for causal, window in self.step_windows.items()
            }
        # C4 groups share one lightning-indexer schedule per step (its name holds every argument
        # that is not a group-invariant input).
        self._qli_name = None
        if group.compress_ratio == 4:
            self._qli_name = (f"lightning_indexer_metadata[{model_key} heads={model.index_n_heads} "
                              f"head_dim={model.index_head_dim} topk={model.index_topk} "
                              f"cores={platform.num_cube_cores}/{platform.num_vector_cores} "
                              f"soc={platform.soc_version}]")

    def buffers(self, draft_index: int) -> DraftBuffers:
        """The persistent buffers of draft_index, allocated on its first use."""
        draft_index = checked_draft_index(draft_index, self.model.num_speculative_tokens)
        buffers = self._buffers.get(draft_index)
        if buffers is None:
            buffers = DraftBuffers(self.model, self.max_num_reqs, self.max_num_tokens, self.device, self.dspark_width,
                                   draft_index, self._invariant_name, self._sas_names,
                                   SLOT_MAPPING_FORMATS[self.group.slot_mapping_format], self._qli_name)
            self._buffers[draft_index] = buffers
        return buffers

    def forget_shapes(self) -> None:
        """Drops every view made for a batch shape by the steps this builder is the first group
        of (which hold all of a step's per-shape state), as if no shape had been seen: the next
        such step at any shape makes them again. The benchmark's first builds use it."""
        for plan in self.step_plans.values():
            plan.forget_shapes()
        for buffers in self._buffers.values():
            buffers.invariant_views.clear()

    def build_for_drafting(self, common: CommonDraftInputs, draft_index: int,
                           shared: StepCache | None = None) -> DraftAttnMetadata:
        """This group's metadata for draft step draft_index (in [1, num_speculative_tokens]).
        With `shared`, group-invariant results stored there for the same inputs are reused (the
        same tensors, not copies) and the ones computed here are stored; without it everything
        is computed here."""
        draft_index = checked_draft_index(draft_index, self.model.num_speculative_tokens)
        fingerprints = None if shared is None else step_fingerprints((self,), common)
        if fingerprints is None:
            return build_step((self,), common, draft_index, None, {})[0]
        return build_step((self,), common, draft_index, shared, fingerprints)[0]
