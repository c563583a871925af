"""One KV-cache group's builder: the group's setup (drafting/setup.py: what its metadata needs
that stays fixed, checked once here), its persistent buffers per draft index, and the plans of
the steps it is the first group of. The step (step.py) computes; the builder holds."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from specops.drafting.buffers import DraftBuffers
from specops.drafting.cache import StepCache
from specops.drafting.configs import (
    SLOT_MAPPING_FORMATS,
    CommonDraftInputs,
    DraftAttnMetadata,
    GroupConfig,
    ModelConfig,
    checked_draft_index,
)
from specops.drafting.plan import StepPlans
from specops.drafting.platform import DraftPlatform
from specops.drafting.setup import GroupSetup, SasArguments, group_setup
from specops.drafting.step import build_step, step_fingerprints


class DraftMetadataBuilder:
    """Builds one KV-cache group's DraftAttnMetadata for each draft step.

    max_num_reqs / max_num_tokens bound num_reqs and num_input_tokens of every step. device:
    where the buffers live (default torch.get_default_device()); the inputs and the RoPE cache
    must be there too (the host copies on the CPU).

    `setup`: the group's GroupSetup, made once here; what the layer's modules read. Its fields
    are also read-only attributes of the builder: `model`, `group`, `max_num_reqs`,
    `max_num_tokens`, `device`, `platform` (the core counts, SoC and sas variant its schedules
    are planned for: ModelConfig's, any left None read from the NPU `device`; off the NPU the
    config must give them all: drafting/platform.py), `step_windows[causal]` (the window of each
    kind of step), `sas_arguments[causal]` (the group's sas_metadata arguments, None without a
    sliding window) and `dspark_width`. `step_plans`: the StepPlans owning the plans of the steps
    this builder is the first group of (drafting/plan.py).

    Not thread-safe: a builder owns persistent buffers that every build rewrites, so two threads
    building with one builder (or sharing one StepCache) corrupt each other's results. A runner
    has one set of builders per thread that drafts.
    """

    def __init__(self, model: ModelConfig, group: GroupConfig, max_num_reqs: int, max_num_tokens: int,
                 device: torch.device | str | None = None):
        self.setup: GroupSetup = group_setup(model, group, max_num_reqs, max_num_tokens, device)
        self._buffers: dict[int, DraftBuffers] = {}
        self.step_plans = StepPlans()

    # The setup's fields, read-only (the setup is the one record of them).
    @property
    def model(self) -> ModelConfig:
        return self.setup.model

    @property
    def group(self) -> GroupConfig:
        return self.setup.group

    @property
    def max_num_reqs(self) -> int:
        return self.setup.max_num_reqs

    @property
    def max_num_tokens(self) -> int:
        return self.setup.max_num_tokens

    @property
    def device(self) -> torch.device:
        return self.setup.device

    @property
    def platform(self) -> DraftPlatform:
        return self.setup.platform

    @property
    def step_windows(self) -> Mapping[bool, tuple[int, int]]:
        return self.setup.step_windows

    @property
    def sas_arguments(self) -> Mapping[bool, SasArguments] | None:
        return self.setup.sas_arguments

    @property
    def dspark_width(self) -> int | None:
        return self.setup.dspark_width

    @property
    def window(self) -> tuple[int, int]:
        return self.setup.group.window

    def buffers(self, draft_index: int) -> DraftBuffers:
        """The persistent buffers of draft_index, allocated on its first use."""
        setup = self.setup
        draft_index = checked_draft_index(draft_index, setup.model.num_speculative_tokens)
        buffers = self._buffers.get(draft_index)
        if buffers is None:
            buffers = DraftBuffers(setup.model, setup.max_num_reqs, setup.max_num_tokens, setup.device,
                                   setup.dspark_width, draft_index, setup.invariant_name, setup.sas_names,
                                   SLOT_MAPPING_FORMATS[setup.group.slot_mapping_format], setup.qli_name)
            self._buffers[draft_index] = buffers
        return buffers

    def forget_shapes(self) -> None:
        """Drops every view made for a batch shape by the steps this builder is the first group
        of (which hold all of a step's per-shape state), as if no shape had been seen: the next
        such step at any shape makes them again. The benchmark's first builds use it."""
        self.step_plans.forget_shapes()
        for buffers in self._buffers.values():
            buffers.forget_shapes()

    def build_for_drafting(self, common: CommonDraftInputs, draft_index: int,
                           shared: StepCache | None = None) -> DraftAttnMetadata:
        """This group's metadata for draft step draft_index (in [1, num_speculative_tokens]).
        With `shared`, group-invariant results stored there for the same inputs are reused (the
        same tensors, not copies) and the ones computed here are stored; without it everything
        is computed here."""
        draft_index = checked_draft_index(draft_index, self.setup.model.num_speculative_tokens)
        fingerprints = None if shared is None else step_fingerprints((self,), common)
        if fingerprints is None:
            return build_step((self,), common, draft_index, None, {})[0]
        return build_step((self,), common, draft_index, shared, fingerprints)[0]
