"""Benchmark of the drafting layer (docs/drafting.md): per-group build time of one draft step with and
without the shared StepCache, and each later group's cost relative to the first.

Groups, in this order: a sliding-window group (window 128), a full-attention group, in the
4-group mix a full-attention group with a 4x smaller storage block (compressed), and a DSpark
group (window 128). Decode batches: every request has 1 + k query tokens (k speculative).

What a group costs inside a step is measured as the step grows: `step g0` runs
build_draft_attn_metadata over the first group, `step g0-g1` over the first two, ..., `step
shared` over all; group K's cost is step(g0..gK) - step(g0..gK-1), timed in the same
interleaved rounds. `own ops gK` runs only the ops group K cannot share: its slot-mapping
format, its sas_metadata when no earlier group has its (heads, head_dim, window), its DSpark
indices. `no-cache gK` is group K building alone (build_for_drafting without a cache), and
`step no-cache` every group building alone. `write floor gK` fills the DSpark group's
[tokens, 1, width] int32 indices with one `fill_` (one aten call, about 1 µs of it dispatch): what
merely writing the layout docs/context_parallel.md asks for costs on this machine, the part of the group's cost
that no implementation avoids.

Extras: `gK/g0` = group K's cost in the step / step g0; `gK layer/g0` = the same minus own ops
gK: what the layer itself (fingerprint, lookups, metadata object) costs a later group;
`gK floor/g0` = write floor gK / step g0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import specops
from specops.bench._harness import Case
from specops.drafting import (
    CommonDraftInputs,
    DraftMetadataBuilder,
    GroupConfig,
    ModelConfig,
    build_draft_attn_metadata,
)

MAX_NUM_REQS = 256
MAX_NUM_TOKENS = 2048
MAX_CONTEXT = 8192
WINDOW = 128
DRAFT_INDEX = 1

GROUPS_3 = (
    GroupConfig("swa", block_size=128, storage_block_size=128, sliding_window=WINDOW),
    GroupConfig("full", block_size=128, storage_block_size=128, sliding_window=None),
    GroupConfig("dspark", block_size=128, storage_block_size=128, sliding_window=WINDOW, dspark=True),
)
COMPRESSED = GroupConfig("c4", block_size=128, storage_block_size=32, sliding_window=None)
GROUPS_4 = (*GROUPS_3[:2], COMPRESSED, GROUPS_3[2])

# (groups, requests, speculative tokens, CP size)
SHAPES = (
    [(GROUPS_4, num_reqs, k, 1) for num_reqs in (16, 64, 256) for k in (1, 7)]
    + [(GROUPS_4, num_reqs, 7, 4) for num_reqs in (64, 256)]
    + [(GROUPS_3, 64, 7, 1), (GROUPS_3, 64, 7, 4)]
)
QUICK_SHAPES = [(GROUPS_3, 8, 1, 1)]


def make_model(num_speculative_tokens: int, cp_size: int, device: torch.device) -> ModelConfig:
    """A DeepSeek-style draft layer: 64 query heads on one KV head of 512 dims, 64 RoPE dims."""
    generator = torch.Generator().manual_seed(1)
    cache = torch.randn(MAX_CONTEXT + 64, 64, generator=generator).to(device)
    return ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=cache,
                       num_speculative_tokens=num_speculative_tokens, cp_size=cp_size, cp_rank=cp_size - 1)


def make_decode_inputs(groups, num_reqs: int, query_len: int, device: torch.device, seed: int = 0) -> CommonDraftInputs:
    """num_reqs decodes of query_len tokens after random contexts, a block table and slot
    mapping per group; host copies of query_start_loc and seq_lens as a runner keeps them."""
    generator = torch.Generator().manual_seed(seed)
    context = torch.randint(0, MAX_CONTEXT - query_len, (num_reqs,), generator=generator)
    seq_lens = (context + query_len).to(torch.int32)
    query_start_loc = torch.arange(num_reqs + 1, dtype=torch.int32) * query_len
    positions = context.repeat_interleave(query_len) + torch.arange(query_len).repeat(num_reqs)
    num_tokens = num_reqs * query_len
    cols = -(-MAX_CONTEXT // 128)
    block_tables = {
        g.name: torch.randint(1, 1 << 20, (num_reqs, cols), dtype=torch.int32, generator=generator).to(device)
        for g in groups
    }
    slot_mappings = {g.name: torch.randint(0, 1 << 27, (num_tokens,), generator=generator).to(device) for g in groups}
    return CommonDraftInputs(
        query_start_loc=query_start_loc.to(device), query_start_loc_cpu=query_start_loc,
        seq_lens=seq_lens.to(device), seq_lens_cpu=seq_lens, positions=positions.to(device),
        num_reqs=num_reqs, num_actual_tokens=num_tokens, num_input_tokens=num_tokens, causal=True,
        block_tables=block_tables, slot_mappings=slot_mappings,
    )


def _builders(model: ModelConfig, groups, device: torch.device) -> list[DraftMetadataBuilder]:
    return [DraftMetadataBuilder(model, g, MAX_NUM_REQS, MAX_NUM_TOKENS, device=device) for g in groups]


def _own_ops(model: ModelConfig, groups, index: int, common: CommonDraftInputs,
             device: torch.device) -> Callable[[], object]:
    """The ops of group `index` that no cache can share, called directly on buffers of its own."""
    builder = _builders(model, groups[index:index + 1], device)[0]
    meta = builder.build_for_drafting(common, DRAFT_INDEX)
    group = groups[index]
    slot_mapping = common.slot_mappings[group.name]
    own_sas = all(earlier.window != group.window for earlier in groups[:index])
    local_qsl, local_seq_lens, sas = meta.cp.local_query_start_loc, meta.cp.local_seq_lens, meta.sas_metadata
    window_left, window_right = group.window

    def run() -> None:
        specops.format_slot_mapping_blocks(slot_mapping, group.storage_block_size, out=meta.slot_mapping)
        if own_sas:
            specops.sas_metadata(local_qsl, local_seq_lens, num_heads_q=model.num_heads_q,
                                 num_heads_kv=model.num_heads_kv, head_dim=model.head_dim, window_left=window_left,
                                 window_right=window_right, num_cube_cores=model.num_cube_cores,
                                 num_vector_cores=model.num_vector_cores, out=sas)
        if group.dspark:
            specops.dspark_swa_indices(
                common.block_tables[group.name], common.query_start_loc, common.seq_lens, window=group.sliding_window,
                num_speculative_tokens=model.num_speculative_tokens, block_size=group.block_size,
                num_tokens=common.num_input_tokens, width=builder.dspark_width, cp_size=model.cp_size,
                cp_rank=model.cp_rank, out=meta.dspark_swa_indices, out_lens=meta.dspark_swa_lens)

    return run


def _write_floor(model: ModelConfig, group: GroupConfig, common: CommonDraftInputs,
                 device: torch.device) -> Callable[[], object]:
    """Fills the DSpark indices of `group` as a build sizes them, computing nothing."""
    indices = _builders(model, (group,), device)[0].build_for_drafting(common, DRAFT_INDEX).dspark_swa_indices
    return lambda: indices.fill_(-1)


def _impl_name(mode: str, index: int, group: GroupConfig) -> str:
    return f"{mode} g{index} {group.name}"


def _step_name(groups, count: int) -> str:
    return "step shared" if count == len(groups) else ("step g0" if count == 1 else f"step g0-g{count - 1}")


def _ratios(groups) -> Callable[[dict[str, float]], dict[str, float]]:
    def derive(medians: dict[str, float]) -> dict[str, float]:
        first = medians[_step_name(groups, 1)]
        ratios, layer = {}, {}
        for index, group in enumerate(groups[1:], 1):
            cost = medians[_step_name(groups, index + 1)] - medians[_step_name(groups, index)]
            ratios[f"g{index}/g0"] = cost / first
            layer[f"g{index} layer/g0"] = (cost - medians[_impl_name("own ops", index, group)]) / first
            floor = medians.get(_impl_name("write floor", index, group))
            if floor is not None:
                layer[f"g{index} floor/g0"] = floor / first
        return {**ratios, "max later/first": max(ratios.values()), **layer}

    return derive


def _case(groups, num_reqs: int, num_speculative_tokens: int, cp_size: int, device: torch.device) -> Case:
    model = make_model(num_speculative_tokens, cp_size, device)
    common = make_decode_inputs(groups, num_reqs, 1 + num_speculative_tokens, device)
    step_builders = _builders(model, groups, device)
    impls: dict[str, Callable[[], object]] = {}
    for count in range(1, len(groups) + 1):
        impls[_step_name(groups, count)] = (
            lambda prefix=step_builders[:count]: build_draft_attn_metadata(prefix, common, DRAFT_INDEX))
    for index in range(1, len(groups)):
        impls[_impl_name("own ops", index, groups[index])] = _own_ops(model, groups, index, common, device)
        if groups[index].dspark:
            impls[_impl_name("write floor", index, groups[index])] = _write_floor(model, groups[index], common, device)
    alone = _builders(model, groups, device)
    for index, builder in enumerate(alone):
        impls[_impl_name("no-cache", index, groups[index])] = (
            lambda b=builder: b.build_for_drafting(common, DRAFT_INDEX))
    impls["step no-cache"] = lambda: [b.build_for_drafting(common, DRAFT_INDEX) for b in alone]
    label = f"G={len(groups)} R={num_reqs} k={num_speculative_tokens} C={cp_size}"
    return Case("drafting", label, num_reqs, common.num_actual_tokens, impls, subject="step shared",
                baselines=("step no-cache",), family=f"G={len(groups)} C={cp_size}",
                derive=_ratios(groups), plotted=("step shared", "step no-cache"),
                references=tuple(name for name in impls if name.startswith("write floor")))


def cases(device: torch.device, quick: bool) -> list[Case]:
    shapes = QUICK_SHAPES if quick else SHAPES
    return [_case(groups, num_reqs, k, cp_size, device) for groups, num_reqs, k, cp_size in shapes]
