"""A group's setup: the frozen record of what one KV-cache group's metadata needs that stays
fixed (its configs, sizes, device and platform, its windows, its sas_metadata arguments, its
DSpark row width, its cache entry names), worked out and checked once when its
DraftMetadataBuilder is made (`group_setup`).

The modules below the builder (plan, invariant, compressed, loop_schedules, calls) read a group
through this record, never through the builder: the builder holds the record and the group's
buffers, and is itself only named by the modules that take builders from the caller (step's
`build_draft_attn_metadata`, loop_plan's DraftLoopPlan).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

import torch

from specops.drafting.configs import GroupConfig, ModelConfig
from specops.drafting.platform import DraftPlatform, resolved_draft_platform
from specops.arguments import check_allocated_elements, checked_size
from specops.ops.dspark_swa_indices import default_width
from specops.sas_family_layout import LI_HEADS
from specops.sas_layout import CMP_TOPKS


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
    a5: bool = False  # kv_quant_sas_metadata (the group's platform.sas_variant "a5")


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class GroupSetup:
    """What one group's metadata needs that stays fixed, for every step and draft index.

    Compared and hashed by identity (it holds tensors, through `model`). The mappings are
    read-only views: a setup is never changed after `group_setup` made it.
    """

    model: ModelConfig
    group: GroupConfig
    max_num_reqs: int  # bounds num_reqs of every step
    max_num_tokens: int  # bounds num_input_tokens of every step
    device: torch.device  # where the group's buffers live
    platform: DraftPlatform  # the core counts, SoC and sas variant its schedules are planned for
    step_windows: Mapping[bool, tuple[int, int]]  # per kind of step (causal or not), its window
    dspark_width: int | None  # a DSpark group's index row width; None for the others
    sas_arguments: Mapping[bool, SasArguments] | None  # per kind of step; None without a sliding window
    invariant_name: str  # the StepCache name of its group-invariant entry
    sas_names: Mapping[bool, str] | None  # per kind of step, of its sas_metadata entry
    qli_name: str | None  # a C4 group's lightning-indexer schedule entry; None for the others


def group_setup(model: ModelConfig, group: GroupConfig, max_num_reqs: int, max_num_tokens: int,
                device: torch.device | str | None) -> GroupSetup:
    """A group's setup, every argument checked (DraftMetadataBuilder's arguments: a ValueError
    names the one refused, before anything is allocated)."""
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a ModelConfig, got {type(model).__name__}")
    if not isinstance(group, GroupConfig):
        raise ValueError(f"group must be a GroupConfig, got {type(group).__name__}")
    # The sizes its buffers are allocated from: bounded first (docs/hardening.md, "Sizes an op
    # allocates from").
    max_num_reqs = checked_size(max_num_reqs, "max_num_reqs", 1)
    max_num_tokens = checked_size(max_num_tokens, "max_num_tokens", 1)
    device = torch.device(device) if device is not None else torch.get_default_device()
    if model.rope_cos_sin_cache.device != device:
        raise ValueError(f"rope_cos_sin_cache must be on the builder's device {device}, "
                         f"got {model.rope_cos_sin_cache.device}")
    # Before anything is made: a platform that cannot be resolved leaves nothing built.
    platform = resolved_draft_platform(model, device)
    num_speculative_tokens = model.num_speculative_tokens
    # The window of each kind of step (GroupConfig.step_window): a DSpark group's non-causal
    # step sees its whole draft block past the sliding window.
    step_windows = {causal: group.step_window(causal, num_speculative_tokens) for causal in (True, False)}
    dspark_width = None
    if group.dspark:
        least = group.sliding_window + num_speculative_tokens
        if group.dspark_index_width is None:
            dspark_width = default_width(group.sliding_window, num_speculative_tokens)
        elif group.dspark_index_width < least:
            raise ValueError(
                f"dspark_index_width of group {group.name!r} must be >= sliding_window + num_speculative_tokens "
                f"= {least}, got {group.dspark_index_width}")
        else:
            dspark_width = group.dspark_index_width
        check_allocated_elements(max_num_tokens, dspark_width, "max_num_tokens",
                                 f"rows of group {group.name!r}'s DSpark indices, {dspark_width} wide")
    # A C4 group's schedules take the indexer settings as their own arguments (index_topk the
    # sparse-attention schedule's cmp_topk, index_n_heads the lightning indexer's query heads):
    # what they refuse is rejected here, naming what the caller passed, not by the first build.
    if group.compress_ratio == 4 and model.index_topk not in CMP_TOPKS:
        raise ValueError(f"index_topk must be one of {list(CMP_TOPKS)} for group {group.name!r} (compress_ratio "
                         f"4: the sparse-attention schedule's cmp_topk; 0: no top-k), got {model.index_topk}")
    if group.compress_ratio == 4 and model.index_n_heads != LI_HEADS:
        raise ValueError(f"index_n_heads must be {LI_HEADS} for group {group.name!r} (compress_ratio 4: the "
                         f"lightning indexer's query heads), got {model.index_n_heads}")
    # Builders of models with these values (and the same RoPE cache tensor) share entries.
    # Names are strings: their hash is computed once, and they read well in the debug log.
    model_key = (f"rope={id(model.rope_cos_sin_cache):#x} k={num_speculative_tokens} "
                 f"cp={model.cp_rank}/{model.cp_size} device={device}")
    # A group with a sliding window gets the sas_metadata vllm-ascend's draft builders pass to
    # the sparse attention kernel, per kind of step (causal or not); full attention gets None.
    # Groups with the same arguments share one result: the name holds every argument that is
    # not a group-invariant input.
    sas_arguments = sas_names = None
    if group.sliding_window is not None:
        # A compressed group's schedule adds its compressed KV: C4 through the indexer's top-k
        # (SCFA), C128 every compressed token (CFA). At most three per step: one per ratio.
        ratio = group.compress_ratio
        compressed = dict(cmp_ratio=ratio, cmp_topk=model.index_topk if ratio == 4 else 0, has_cmp_kv=ratio > 1,
                          a5=platform.sas_variant == "a5")
        sas_arguments = MappingProxyType({
            causal: SasArguments(num_heads_q=model.num_heads_q, head_dim=model.head_dim, ori_win_left=left,
                                 ori_win_right=right, num_cube_cores=platform.num_cube_cores,
                                 num_vector_cores=platform.num_vector_cores, ascend950=platform.ascend950,
                                 **compressed)
            for causal, (left, right) in step_windows.items()
        })
        sas_names = MappingProxyType({
            causal: (f"sas_metadata[{model_key} heads={model.num_heads_q} head_dim={model.head_dim} "
                     f"window={window} cores={platform.num_cube_cores}/{platform.num_vector_cores} "
                     f"soc={platform.soc_version} variant={platform.sas_variant} "
                     f"cmp={compressed['cmp_ratio']}/{compressed['cmp_topk']}]")
            for causal, window in step_windows.items()
        })
    # C4 groups share one lightning-indexer schedule per step (its name holds every argument
    # that is not a group-invariant input).
    qli_name = None
    if group.compress_ratio == 4:
        qli_name = (f"lightning_indexer_metadata[{model_key} heads={model.index_n_heads} "
                    f"head_dim={model.index_head_dim} topk={model.index_topk} "
                    f"cores={platform.num_cube_cores}/{platform.num_vector_cores} "
                    f"soc={platform.soc_version}]")
    return GroupSetup(
        model=model, group=group, max_num_reqs=max_num_reqs, max_num_tokens=max_num_tokens, device=device,
        platform=platform, step_windows=MappingProxyType(step_windows), dspark_width=dspark_width,
        sas_arguments=sas_arguments, invariant_name=f"group_invariant[{model_key}]", sas_names=sas_names,
        qli_name=qli_name)
