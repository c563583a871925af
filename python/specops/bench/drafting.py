"""Benchmark of the drafting layer: one draft step over 2, 4 and 8 KV-cache groups, with the
four figures of the layer's performance contract, each printed with its goal.

Groups, in this order (the first 2, 4 or all 8): `swa` (sliding window 128), `dspark` (DSpark,
window 128), `c4` (full attention, storage block 32), `full`, `swa64` (window 128, storage block
64: shares everything with swa), `c128` (full attention, storage block 8), `dspark64` (a second
DSpark group, block size 64), `c16` (full attention, storage block 16). Decode batches of R
requests with 1 + k query tokens each; causal and non-causal steps (only non-causal steps build
DSpark indices, and there a DSpark group's window widens by the draft block).

Timed, in interleaved rounds (host tensors, native ops), as CPU time of the benchmark's thread
(`time.thread_time`: every op runs in that thread, and time the host gives other processes is
not counted; the figures are differences of a few percent of a step, which wall time on a
shared host does not resolve):
- `step g0`, `step g0-g1`, ..., `step shared`: build_draft_attn_metadata over the first 1, 2, ...
  groups. Group K costs about step(g0..gK) - step(g0..gK-1), too coarse for figure (a): at 8
  groups a step costs 100-350 µs with a spread of tens of µs between samples (the DSpark
  groups' indices are megabytes of stores), while a later sharing group adds a few µs.
- For each later group K that shares everything, a pair of small steps: over the groups it
  shares with (g0, which resolves the group-invariant entry, and the first group of K's kind,
  whose sas_metadata K shares: `step g0+g2`, or `step g0` when that is g0), and the same groups
  then K (`step g0+g2+g3`). K's cost is their paired difference (Case.paired, the harness's
  time_paired): the median, over several hundred rounds of one call of each timed one after
  the other (order alternating), of the two calls' difference: what K adds to a step after the
  groups it shares with, on steps of two or three groups without the DSpark groups' noise, each
  round's load hitting both sides.
- `layer g0`, ..., `layer g0-gK`: the same steps with the launches of the ops a group runs for
  itself (the format, the DSpark indices, sas_metadata, each with the assembly of its arguments)
  replaced by no-ops: what remains is the layer's own work. What the layer adds for group K is
  layer(g0..gK) - layer(g0..gK-1), that difference paired like (a)'s.
  (Timing those ops apart and subtracting them from the step instead credits the layer with
  their slowdown inside the step, where the rest of the step has cooled the caches they use.)
- `first build`: build_draft_attn_metadata over every group after the step dropped every view
  it made for a batch shape (`forget_shapes` of the first builder, whose step plan holds them),
  so the step meets its shape as if for the first time (the dropping, a few dict clears, is
  timed with it); `repeat build` is the same step with the views kept. Same inputs, same work:
  only the per-shape setup differs.
- `empty-op`: one aten op on an empty tensor (the cost floor of one dispatcher call).
- `step no-cache`: every group building alone (build_for_drafting without a cache).

Figures (extras of `step shared`), goal in brackets, met or not:
- (a) `shared later/first`: the costliest later group that shares everything (no sas_metadata,
  no DSpark indices of its own this step), its pair's paired difference, over step g0 [<= 0.12]
  (each such group's follows, `(a) gK`);
- (b) `layer/empty-op`: the largest, over later groups, of what the layer adds beyond the
  group's own ops, layer(K) - layer(K-1), over one empty op [<= 1.0] (each group's follows);
- (c) `launches`: op launches of the whole step (specops.launch_count: specops ops and
  aten ops that are not views; on these host tensors the host-only cp_local_max_lens counts
  too), and `extra launches`: that count minus the count of a step over one group of each kind
  (same sas_metadata arguments and DSpark or not) [0: the count does not grow with groups that
  share arguments]. Every row's own launch counts are in the table's launch columns.
- (d) `first/repeat`: first build over repeat build, as 1 + (first - repeat) / repeat with the
  difference paired like (a)'s [<= 1.3]. The table's two medians stay.

Secondary figures, without goals, counted (not timed), so the load does not move them: the
Python-level calls (functions and builtins, `sys.setprofile`) that the costliest later sharing
group adds to its pair's base step, and that a first build makes beyond a repeat.
"""

from __future__ import annotations

import gc
import itertools
import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from specops.drafting import step as drafting_step
from specops.bench._harness import Case, empty_op_call
from specops.launch_count import count_launches
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

GOALS = {"a": 0.12, "b": 1.0, "c": 0, "d": 1.3}

# (groups, requests, speculative tokens, causal, CP size)
SHAPES = (
    [(num_groups, num_reqs, k, causal, 1) for num_groups in (2, 4, 8) for num_reqs in (64, 256) for k in (1, 7)
     for causal in (True, False)]
    + [(4, 256, 7, causal, 4) for causal in (True, False)]
)
QUICK_SHAPES = [(2, 8, 1, False, 1)]


def make_model(num_speculative_tokens: int, cp_size: int, device: torch.device) -> ModelConfig:
    """A DeepSeek-style draft layer: 64 query heads on one KV head of 512 dims, 64 RoPE dims. The
    platform is given (the sas benches' chip), so the bench plans the same schedules whatever
    runs it, and runs off the NPU too."""
    generator = torch.Generator().manual_seed(1)
    cache = torch.randn(MAX_CONTEXT + 64, 64, generator=generator).to(device)
    return ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=cache,
                       num_speculative_tokens=num_speculative_tokens, cp_size=cp_size, cp_rank=cp_size - 1,
                       num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1")


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


def _step_launches(builders: list[DraftMetadataBuilder], common: CommonDraftInputs) -> int:
    """Launches of a repeated step (the first call allocates the builders' buffers)."""
    build_draft_attn_metadata(builders, common, DRAFT_INDEX)
    return count_launches(lambda: build_draft_attn_metadata(builders, common, DRAFT_INDEX)).launches


def _kind(group: GroupConfig, builder: DraftMetadataBuilder, causal: bool) -> tuple:
    """What decides whether a group needs launches of its own: its sas_metadata arguments, and
    DSpark indices on non-causal steps (a group without a sliding window has no sas_metadata)."""
    sas_keys = builder.buffers(DRAFT_INDEX).sas_keys
    return (None if sas_keys is None else sas_keys[causal], group.dspark and not causal)


class _OwnOpsSkipped:
    """Within the block, the drafting layer's launches of the ops groups run for themselves (the
    format, sas_metadata, the DSpark indices: `_run_format`, `_run_sas`, `_run_dspark`, each with
    the assembly of its arguments) do nothing. They are swapped for itertools.chain, a C function
    that only keeps its arguments, so a skipped launch adds no Python frame of its own."""

    NAMES = ("_run_format", "_run_sas", "_run_dspark")

    def __enter__(self) -> None:
        self._saved = [getattr(drafting_step, name) for name in self.NAMES]
        for name in self.NAMES:
            setattr(drafting_step, name, itertools.chain)

    def __exit__(self, *exc) -> None:
        for name, run in zip(self.NAMES, self._saved):
            setattr(drafting_step, name, run)


def _layer_only(builders: list[DraftMetadataBuilder], common: CommonDraftInputs) -> Callable[[], object]:
    skipped = _OwnOpsSkipped()

    def run() -> object:
        with skipped:
            return build_draft_attn_metadata(builders, common, DRAFT_INDEX)

    return run


class SharingPair(NamedTuple):
    """How a later group K that shares everything is timed: a step over the groups it shares
    with (g0, which resolves the group-invariant entry, and the first group of K's kind, which
    computes the sas_metadata K shares), and the same step with K after them."""

    group: int  # K
    base: tuple[int, ...]  # the groups K shares with, in step order
    base_name: str  # the implementation timing a step over them
    with_name: str  # ... and over them and K


def sharing_pairs(groups, builders: list[DraftMetadataBuilder], causal: bool) -> list[SharingPair]:
    """One pair per later group that shares everything (no sas_metadata and no DSpark indices of
    its own: a DSpark group on a non-causal step builds indices whatever it shares). A base that
    is a prefix of the groups is the prefix step's implementation (`step g0`, `step g0-g1`)."""
    num_groups = len(groups)
    kinds = [_kind(g, b, causal) for g, b in zip(groups, builders)]
    pairs = []
    for group in range(1, num_groups):
        if kinds[group] in kinds[:group] and not kinds[group][1]:
            partner = kinds.index(kinds[group])
            base = (0,) if partner == 0 else (0, partner)
            pairs.append(SharingPair(group, base, _groups_name(base, num_groups), _groups_name(base + (group,),
                                                                                                num_groups)))
    return pairs


def _groups_name(groups: tuple[int, ...], num_groups: int) -> str:
    """The step over these groups: a prefix by its step name, else `step g0+g2+g3`."""
    if groups == tuple(range(len(groups))):
        return _step_name(len(groups), num_groups)
    return "step " + "+".join(f"g{index}" for index in groups)


def _step_name(count: int, num_groups: int) -> str:
    return "step shared" if count == num_groups else ("step g0" if count == 1 else f"step g0-g{count - 1}")


def _layer_name(count: int) -> str:
    return "layer g0" if count == 1 else f"layer g0-g{count - 1}"


def _verdict(name: str, value: float, goal: float) -> tuple[str, float]:
    met = "met" if value <= goal else "NOT MET"
    return f"{name} [goal <= {goal}: {met}]", value


def _derive(num_groups: int, pairs: list[SharingPair]) -> Callable[[dict[str, float]], dict[str, float]]:
    def derive(medians: dict[str, float]) -> dict[str, float]:
        first = medians[_step_name(1, num_groups)]
        empty = medians["empty-op"]
        layer = [medians[f"{_layer_name(k + 1)} - {_layer_name(k)}"] / empty for k in range(1, num_groups)]
        # Each sharing group's cost: the paired difference of its pair's two steps (Case.paired).
        shared = {pair.group: medians[f"{pair.with_name} - {pair.base_name}"] / first for pair in pairs}
        figures = {}
        if shared:
            figures.update([_verdict("(a) shared later/first", max(shared.values()), GOALS["a"])])
        else:
            figures["(a) shared later/first [no later group shares everything]"] = float("nan")
        figures.update([_verdict("(b) layer/empty-op", max(layer), GOALS["b"]),
                        _verdict("(d) first/repeat",
                                 1 + medians["first build - repeat build"] / medians["repeat build"], GOALS["d"])])
        for group, value in shared.items():
            figures[f"(a) g{group}"] = value
        for k, value in enumerate(layer, 1):
            figures[f"(b) g{k}"] = value
        return figures

    return derive


def _first_build(builders: list[DraftMetadataBuilder], common: CommonDraftInputs) -> Callable[[], object]:
    first = builders[0]  # its step plans hold everything a step makes per batch shape

    def run() -> object:
        first.forget_shapes()
        return build_draft_attn_metadata(builders, common, DRAFT_INDEX)

    return run


def python_calls(fn: Callable[[], object], repeats: int = 3) -> float:
    """Python-level calls (Python functions and builtins, as sys.setprofile sees them) of one
    call of fn, after a warm-up call: a count no other process changes."""
    fn()
    calls = 0

    def count(frame, event, arg) -> None:
        nonlocal calls
        if event == "call" or event == "c_call":
            calls += 1

    # A collection inside the window would run gc.callbacks (Hypothesis registers one), whose
    # calls are not fn's: the count is taken with the collector off.
    collecting = gc.isenabled()
    gc.disable()
    previous = sys.getprofile()
    sys.setprofile(count)
    try:
        for _ in range(repeats):
            fn()
    finally:
        sys.setprofile(previous)
        if collecting:
            gc.enable()
    return round(calls / repeats, 1)


def _python_call_figures(impls: dict[str, Callable[[], object]], pairs: list[SharingPair]) -> dict[str, float]:
    """The secondary, noise-free figures of (a) and (d): the Python calls a later group that
    shares everything adds to the step over the groups it shares with (the most of any), and a
    first build's over a repeat's."""
    later = [python_calls(impls[pair.with_name]) - python_calls(impls[pair.base_name]) for pair in pairs]
    figures = {"(a) python calls per later sharing group": max(later)} if later else {}
    figures["(d) python calls first - repeat"] = python_calls(impls["first build"]) - python_calls(
        impls["repeat build"])
    return figures


def _case(num_groups: int, num_reqs: int, num_speculative_tokens: int, causal: bool, cp_size: int,
          device: torch.device) -> Case:
    groups = GROUPS[:num_groups]
    model = make_model(num_speculative_tokens, cp_size, device)
    query_len = 1 + num_speculative_tokens
    common = make_decode_inputs(groups, num_reqs, query_len, device, causal=causal)
    step_builders = _builders(model, groups, device)
    impls: dict[str, Callable[[], object]] = {"empty-op": empty_op_call(device)}

    def add_step(name: str, members: tuple[int, ...]) -> None:
        if name not in impls:
            subset = [step_builders[index] for index in members]
            impls[name] = lambda: build_draft_attn_metadata(subset, common, DRAFT_INDEX)

    # Each sharing pair's two steps first, its base just before it, so the table shows them
    # together (their difference is timed apart, call against call: Case.paired).
    pairs = sharing_pairs(groups, step_builders, causal)
    for pair in pairs:
        add_step(pair.base_name, pair.base)
        add_step(pair.with_name, pair.base + (pair.group,))
    for count in range(1, num_groups + 1):
        add_step(_step_name(count, num_groups), tuple(range(count)))
        impls[_layer_name(count)] = _layer_only(step_builders[:count], common)

    impls["first build"] = _first_build(_builders(model, groups, device), common)
    repeat_builders = _builders(model, groups, device)
    impls["repeat build"] = lambda: build_draft_attn_metadata(repeat_builders, common, DRAFT_INDEX)
    alone = _builders(model, groups, device)
    impls["step no-cache"] = lambda: [b.build_for_drafting(common, DRAFT_INDEX) for b in alone]

    kinds = [_kind(g, b, causal) for g, b in zip(groups, step_builders)]
    one_per_kind = [b for index, b in enumerate(_builders(model, groups, device)) if kinds[index] not in kinds[:index]]
    launches, kind_launches = (_step_launches(builders, common) for builders in (step_builders, one_per_kind))
    extra = launches - kind_launches
    extras = {"(c) launches": float(launches),
              f"(c) extra launches [goal 0: {'met' if extra <= GOALS['c'] else 'NOT MET'}]": float(extra)}
    extras.update(_python_call_figures(impls, pairs))

    cp = f" C={cp_size}" if cp_size > 1 else ""
    label = f"G={num_groups} R={num_reqs} k={num_speculative_tokens} {'causal' if causal else 'non-causal'}{cp}"
    return Case("drafting", label, num_reqs, common.num_actual_tokens, impls, subject="step shared",
                baselines=("step no-cache",), extras=extras, family=f"G={num_groups}{cp}",
                derive=_derive(num_groups, pairs),
                paired=tuple((pair.with_name, pair.base_name) for pair in pairs) + (("first build", "repeat build"),)
                + tuple((_layer_name(count + 1), _layer_name(count)) for count in range(1, num_groups)),
                plotted=("step shared", "step no-cache"),
                references=tuple(name for name in impls if name == "empty-op" or name.startswith("layer")),
                clock=time.thread_time)


def cases(device: torch.device, quick: bool) -> list[Case]:
    shapes = QUICK_SHAPES if quick else SHAPES
    return [_case(*shape, device) for shape in shapes]
