"""Benchmark of the drafting layer: one draft step over 2, 4 and 8 KV-cache groups, with the
four figures of the layer's performance contract, each printed with its goal.

Groups, in this order (the first 2, 4 or all 8): `swa` (sliding window 128), `dspark` (DSpark,
window 128), `c4` (full attention, storage block 32), `full`, `swa64` (window 128, storage block
64: shares everything with swa), `c128` (full attention, storage block 8), `dspark64` (a second
DSpark group, block size 64), `c16` (full attention, storage block 16). Decode batches of R
requests with 1 + k query tokens each; causal and non-causal steps (only non-causal steps build
DSpark indices, and there a DSpark group's window widens by the draft block).

Timed, in interleaved rounds (host tensors, native ops):
- `step g0`, `step g0-g1`, ..., `step shared`: build_draft_attn_metadata over the first 1, 2, ...
  groups. Group K costs step(g0..gK) - step(g0..gK-1).
- `ops g0`, ..., `ops g0-gK`: only the ops those groups run for themselves, called as the step
  calls them: one format_slot_mapping_blocks_multi over the prefix, one
  dspark_swa_indices_multi over its DSpark groups (non-causal steps), each distinct
  sas_metadata. Group K's own ops cost ops(g0..gK) - ops(g0..gK-1): its share of the shared
  launches, plus any launch it is the first to need.
- `first build`: build_draft_attn_metadata over every group after the builders dropped every
  view they made for a batch shape (`_forget_shapes`), so the step meets its shape as if for the
  first time (the dropping, a few dict clears, is timed with it); `repeat build` is the same step
  with the views kept. Same inputs, same work: only the per-shape setup differs.
- `empty-op`: one aten op on an empty tensor (the cost floor of one dispatcher call).
- `step no-cache`: every group building alone (build_for_drafting without a cache).

Figures (extras of `step shared`), goal in brackets, met or not:
- (a) `shared later/first`: the costliest later group that shares everything (no sas_metadata,
  no DSpark indices of its own this step) over step g0 [<= 0.15];
- (b) `layer/empty-op`: the largest, over later groups, of what the layer adds beyond the
  group's own ops, (step(K) - step(K-1)) - (ops(K) - ops(K-1)), over one empty op [<= 1.0];
- (c) `launches`: op launches of the whole step, counted with a TorchDispatchMode (views and
  the host-only cp_local_max_lens not counted), and `extra launches`: that count minus the
  count of a step over one group of each kind (same sas_metadata arguments and DSpark or not)
  [0: the count does not grow with groups that share arguments];
- (d) `first/repeat`: first build over repeat build [<= 1.5].
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specops.bench._harness import Case, empty_op_call
from specops.drafting import (
    CommonDraftInputs,
    DraftAttnMetadata,
    DraftMetadataBuilder,
    GroupConfig,
    ModelConfig,
    build_draft_attn_metadata,
)
from specops.ops.dspark_swa_indices_multi import _OP as DSPARK_MULTI
from specops.ops.format_slot_mapping_blocks_multi import _OP as FORMAT_MULTI
from specops.ops.sas_metadata import sas_metadata

MAX_NUM_REQS = 256
MAX_NUM_TOKENS = 2048
MAX_CONTEXT = 8192
WINDOW = 128
DRAFT_INDEX = 1

GROUPS = (
    GroupConfig("swa", block_size=128, storage_block_size=128, sliding_window=WINDOW),
    GroupConfig("dspark", block_size=128, storage_block_size=128, sliding_window=WINDOW, dspark=True),
    GroupConfig("c4", block_size=128, storage_block_size=32, sliding_window=None),
    GroupConfig("full", block_size=128, storage_block_size=128, sliding_window=None),
    GroupConfig("swa64", block_size=128, storage_block_size=64, sliding_window=WINDOW),
    GroupConfig("c128", block_size=128, storage_block_size=8, sliding_window=None),
    GroupConfig("dspark64", block_size=64, storage_block_size=64, sliding_window=WINDOW, dspark=True),
    GroupConfig("c16", block_size=128, storage_block_size=16, sliding_window=None),
)

GOALS = {"a": 0.15, "b": 1.0, "c": 0, "d": 1.5}

# (groups, requests, speculative tokens, causal, CP size)
SHAPES = (
    [(num_groups, num_reqs, k, causal, 1) for num_groups in (2, 4, 8) for num_reqs in (64, 256) for k in (1, 7)
     for causal in (True, False)]
    + [(4, 256, 7, causal, 4) for causal in (True, False)]
)
QUICK_SHAPES = [(2, 8, 1, False, 1)]


def make_model(num_speculative_tokens: int, cp_size: int, device: torch.device) -> ModelConfig:
    """A DeepSeek-style draft layer: 64 query heads on one KV head of 512 dims, 64 RoPE dims."""
    generator = torch.Generator().manual_seed(1)
    cache = torch.randn(MAX_CONTEXT + 64, 64, generator=generator).to(device)
    return ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=cache,
                       num_speculative_tokens=num_speculative_tokens, cp_size=cp_size, cp_rank=cp_size - 1)


def make_decode_inputs(groups, num_reqs: int, query_len: int, device: torch.device, seed: int = 0, *,
                       causal: bool = True, padding: int = 0) -> CommonDraftInputs:
    """num_reqs decodes of query_len tokens after random contexts, a block table and slot
    mapping per group; host copies of query_start_loc and seq_lens as a runner keeps them."""
    generator = torch.Generator().manual_seed(seed)
    context = torch.randint(0, MAX_CONTEXT - query_len, (num_reqs,), generator=generator)
    seq_lens = (context + query_len).to(torch.int32)
    query_start_loc = torch.arange(num_reqs + 1, dtype=torch.int32) * query_len
    positions = context.repeat_interleave(query_len) + torch.arange(query_len).repeat(num_reqs)
    num_tokens = num_reqs * query_len
    block_tables = {}
    for g in groups:
        cols = -(-MAX_CONTEXT // g.block_size)
        block_tables[g.name] = torch.randint(1, 1 << 20, (num_reqs, cols), dtype=torch.int32,
                                             generator=generator).to(device)
    slot_mappings = {g.name: torch.randint(0, 1 << 27, (num_tokens,), generator=generator).to(device) for g in groups}
    return CommonDraftInputs(
        query_start_loc=query_start_loc.to(device), query_start_loc_cpu=query_start_loc,
        seq_lens=seq_lens.to(device), seq_lens_cpu=seq_lens, positions=positions.to(device),
        num_reqs=num_reqs, num_actual_tokens=num_tokens, num_input_tokens=num_tokens + padding, causal=causal,
        block_tables=block_tables, slot_mappings=slot_mappings,
    )


def _builders(model: ModelConfig, groups, device: torch.device) -> list[DraftMetadataBuilder]:
    return [DraftMetadataBuilder(model, g, MAX_NUM_REQS, MAX_NUM_TOKENS, device=device) for g in groups]


class LaunchCounter(TorchDispatchMode):
    """Counts the ops a block runs that a device would launch: every op but views and the
    host-only helper (cp_local_max_lens reads the host copies; on a device it is host work).
    A minimal counter for this benchmark; it records the op names in order."""

    HOST_ONLY = ("specops.cp_local_max_lens.default",)

    def __init__(self) -> None:
        super().__init__()
        self.launches: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if not func.is_view and name not in self.HOST_ONLY:
            self.launches.append(name)
        return func(*args, **(kwargs or {}))


def count_launches(step: Callable[[], object]) -> list[str]:
    step()  # warm: views and buffers of this shape exist
    with LaunchCounter() as counter:
        step()
    return counter.launches


def _kind(group: GroupConfig, builder: DraftMetadataBuilder, causal: bool) -> tuple:
    """What decides whether a group needs launches of its own: its sas_metadata arguments, and
    DSpark indices on non-causal steps."""
    return (builder._sas_names[causal], group.dspark and not causal)


def _own_ops(builders: list[DraftMetadataBuilder], metas: list[DraftAttnMetadata],
             common: CommonDraftInputs) -> Callable[[], None]:
    """The ops these groups run for themselves, called as build_draft_attn_metadata calls them
    (on the same buffers): one format over all, one DSpark call over the DSpark groups, one
    sas_metadata per distinct argument set."""
    model = builders[0].model
    slot_mappings = [common.slot_mappings[b.group.name] for b in builders]
    block_sizes = [b.group.storage_block_size for b in builders]
    outputs = [meta.slot_mapping for meta in metas]
    dspark = [(b, meta) for b, meta in zip(builders, metas) if meta.dspark_swa_indices is not None]
    sas_calls, seen = [], set()
    for builder, meta in zip(builders, metas):
        if meta.sas_metadata.data_ptr() not in seen:
            seen.add(meta.sas_metadata.data_ptr())
            sas_calls.append((meta.cp.local_query_start_loc, meta.cp.local_seq_lens, meta.window, meta.sas_metadata))
    num_reqs = common.num_reqs
    query_start_loc, seq_lens = common.query_start_loc[:num_reqs + 1], common.seq_lens[:num_reqs]
    dspark_args = None
    if dspark:
        groups = [b.group for b, _ in dspark]
        dspark_args = ([common.block_tables[g.name] for g in groups], query_start_loc, seq_lens,
                       [g.sliding_window for g in groups], model.num_speculative_tokens,
                       [g.block_size for g in groups], common.num_input_tokens, [b.dspark_width for b, _ in dspark],
                       model.cp_size, model.cp_rank, [m.dspark_swa_indices for _, m in dspark],
                       [m.dspark_swa_lens for _, m in dspark])
    num_tokens = common.num_actual_tokens

    def run() -> None:
        FORMAT_MULTI.select()(slot_mappings, block_sizes, num_tokens, outputs)
        if dspark_args is not None:
            DSPARK_MULTI.select()(*dspark_args)
        for local_qsl, local_seq_lens, (left, right), out in sas_calls:
            sas_metadata(local_qsl, local_seq_lens, num_heads_q=model.num_heads_q, num_heads_kv=model.num_heads_kv,
                         head_dim=model.head_dim, window_left=left, window_right=right,
                         num_cube_cores=model.num_cube_cores, num_vector_cores=model.num_vector_cores, out=out)

    return run


def _step_name(count: int, num_groups: int) -> str:
    return "step shared" if count == num_groups else ("step g0" if count == 1 else f"step g0-g{count - 1}")


def _ops_name(count: int) -> str:
    return "ops g0" if count == 1 else f"ops g0-g{count - 1}"


def _verdict(name: str, value: float, goal: float) -> tuple[str, float]:
    met = "met" if value <= goal else "NOT MET"
    return f"{name} [goal <= {goal}: {met}]", value


def _derive(num_groups: int, shares_everything: list[bool]) -> Callable[[dict[str, float]], dict[str, float]]:
    def derive(medians: dict[str, float]) -> dict[str, float]:
        first = medians[_step_name(1, num_groups)]
        empty = medians["empty-op"]
        shared_ratios, layer = [], []
        for k in range(1, num_groups):
            cost = medians[_step_name(k + 1, num_groups)] - medians[_step_name(k, num_groups)]
            own = medians[_ops_name(k + 1)] - medians[_ops_name(k)]
            layer.append((cost - own) / empty)
            if shares_everything[k]:
                shared_ratios.append(cost / first)
        figures = {}
        if shared_ratios:
            figures.update([_verdict("(a) shared later/first", max(shared_ratios), GOALS["a"])])
        else:
            figures["(a) shared later/first [no later group shares everything]"] = float("nan")
        figures.update([_verdict("(b) layer/empty-op", max(layer), GOALS["b"]),
                        _verdict("(d) first/repeat", medians["first build"] / medians["repeat build"], GOALS["d"])])
        for k, value in enumerate(layer, 1):
            figures[f"(b) g{k}"] = value
        return figures

    return derive


def _first_build(builders: list[DraftMetadataBuilder], common: CommonDraftInputs) -> Callable[[], object]:
    def run() -> object:
        for builder in builders:
            builder._forget_shapes()
        return build_draft_attn_metadata(builders, common, DRAFT_INDEX)

    return run


def _case(num_groups: int, num_reqs: int, num_speculative_tokens: int, causal: bool, cp_size: int,
          device: torch.device) -> Case:
    groups = GROUPS[:num_groups]
    model = make_model(num_speculative_tokens, cp_size, device)
    query_len = 1 + num_speculative_tokens
    common = make_decode_inputs(groups, num_reqs, query_len, device, causal=causal)
    step_builders = _builders(model, groups, device)
    impls: dict[str, Callable[[], object]] = {"empty-op": empty_op_call(device)}
    metas = build_draft_attn_metadata(step_builders, common, DRAFT_INDEX)
    for count in range(1, num_groups + 1):
        impls[_step_name(count, num_groups)] = (
            lambda prefix=step_builders[:count]: build_draft_attn_metadata(prefix, common, DRAFT_INDEX))
        impls[_ops_name(count)] = _own_ops(step_builders[:count], metas[:count], common)

    impls["first build"] = _first_build(_builders(model, groups, device), common)
    repeat_builders = _builders(model, groups, device)
    impls["repeat build"] = lambda: build_draft_attn_metadata(repeat_builders, common, DRAFT_INDEX)
    alone = _builders(model, groups, device)
    impls["step no-cache"] = lambda: [b.build_for_drafting(common, DRAFT_INDEX) for b in alone]

    kinds = [_kind(g, b, causal) for g, b in zip(groups, step_builders)]
    shares_everything = [index > 0 and kinds[index] in kinds[:index] for index in range(num_groups)]
    one_per_kind = [b for index, b in enumerate(_builders(model, groups, device)) if kinds[index] not in kinds[:index]]
    launches = count_launches(lambda: build_draft_attn_metadata(step_builders, common, DRAFT_INDEX))
    kind_launches = count_launches(lambda: build_draft_attn_metadata(one_per_kind, common, DRAFT_INDEX))
    extra = len(launches) - len(kind_launches)
    extras = {"(c) launches": float(len(launches)),
              f"(c) extra launches [goal 0: {'met' if extra <= GOALS['c'] else 'NOT MET'}]": float(extra)}

    cp = f" C={cp_size}" if cp_size > 1 else ""
    label = f"G={num_groups} R={num_reqs} k={num_speculative_tokens} {'causal' if causal else 'non-causal'}{cp}"
    return Case("drafting", label, num_reqs, common.num_actual_tokens, impls, subject="step shared",
                baselines=("step no-cache",), extras=extras, family=f"G={num_groups}{cp}",
                derive=_derive(num_groups, shares_everything), plotted=("step shared", "step no-cache"))


def cases(device: torch.device, quick: bool) -> list[Case]:
    shapes = QUICK_SHAPES if quick else SHAPES
    return [_case(*shape, device) for shape in shapes]
