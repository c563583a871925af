"""Benchmark of the whole draft loop of a step (docs/draft_loop.md): DraftLoopPlan (plan_step on
the host, advance_all on the device) beside today's per-pass path (pass 1's build, then per later
pass advance_draft_step + build_draft_attn_metadata), with the launches each makes per step and
the plan's host cost beside one later draft pass's build."""

from __future__ import annotations

import random

import torch

from specops.bench._harness import Case, goal_figure
from specops.launch_count import LaunchCounter

QUICK_SHAPES = [(8, 3, "swa")]
SHAPES = [(8, 3, "swa"), (8, 3, "swa+c4+c128"), (64, 3, "swa"), (64, 5, "swa+c4+c128")]
MIXES = {"swa": ["swa"], "swa+c4+c128": ["swa", "full", "c4", "c128"]}
# The contract figure for up to 4 groups, whatever K: advance_all's launches plus plan_step's copy.
LAUNCH_GOAL = 3


def _setup(num_reqs: int, num_steps: int, mix: str, device: torch.device):
    # Built here, not imported from the tests: the same mappings, builders and target step.
    from specops import MappingGroup, PersistentMappings
    from specops.drafting import DraftLoopPlan, DraftMetadataBuilder, GroupConfig, ModelConfig

    rng = random.Random(num_reqs * 31 + num_steps)
    max_model_len = 4096
    kinds = MIXES[mix]
    spec = {"swa": (128, 128, 128, 1), "full": (128, 128, None, 1), "c4": (128, 32, 128, 4), "c128": (128, 8, 128, 128)}
    rope = torch.randn(max_model_len + 2, 64, device=device)
    # The platform is given (the sas benches' chip): the same schedules whatever runs the bench.
    model = ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=rope,
                        num_speculative_tokens=num_steps, index_topk=512, num_cube_cores=24, num_vector_cores=48,
                        soc_version="Ascend910B1")
    groups = [MappingGroup(block_size=spec[k][0], name=k) for k in kinds]
    max_tokens = num_reqs * (num_steps + 1)
    mappings = PersistentMappings(groups, max_num_reqs=num_reqs,
                                  max_num_blocks_per_req=[-(-(max_model_len + 1) // g.block_size) for g in groups],
                                  max_num_tokens=max_tokens, device=device)
    builders = [DraftMetadataBuilder(model, GroupConfig(k, block_size=spec[k][0], storage_block_size=spec[k][1],
                                                        sliding_window=spec[k][2], compress_ratio=spec[k][3]),
                                     num_reqs, max_tokens, device=device) for k in kinds]
    for row in range(num_reqs):
        mappings.append_blocks(row, [list(range(1 + row * w, 1 + (row + 1) * w))
                                     for w in mappings.max_num_blocks_per_group])
    mappings.apply_staged()
    query_lens = [num_steps + 1] * num_reqs
    seq_lens = [rng.randint(500, max_model_len - num_steps - 2) for _ in range(num_reqs)]
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    idx = torch.arange(num_reqs, dtype=torch.int32, device=device)
    qsl_cpu = torch.tensor(starts, dtype=torch.int32)
    qsl = qsl_cpu.to(device)
    num_tokens = starts[-1]
    mappings.positions[:num_tokens] = torch.tensor([s - q + j for q, s in zip(query_lens, seq_lens) for j in range(q)])
    mappings.seq_lens[:num_reqs] = torch.tensor(seq_lens, dtype=torch.int32)
    mappings.refresh(idx, qsl, mappings.positions[:num_tokens])
    rejected = torch.tensor([rng.randint(0, num_steps) for _ in range(num_reqs)], dtype=torch.int32, device=device)
    token_indices = torch.tensor(starts[1:], dtype=torch.int32, device=device) - 1 - rejected
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    plan = DraftLoopPlan(mappings, builders, num_speculative_tokens=num_steps, max_model_len=max_model_len)
    # The later passes' host seq_lens as a runner would hold them (made here, not in the timed path).
    later_seq_lens_cpu = [seq_lens_cpu + k for k in range(num_steps)]
    return dict(later_seq_lens_cpu=later_seq_lens_cpu, mappings=mappings, builders=builders, plan=plan, qsl=qsl,
                qsl_cpu=qsl_cpu, idx=idx,
                rejected=rejected, token_indices=token_indices, seq_lens_cpu=seq_lens_cpu, num_tokens=num_tokens,
                num_reqs=num_reqs, num_steps=num_steps, max_model_len=max_model_len, seq_lens=seq_lens)


def _per_pass(s: dict, passes: bool = True) -> None:
    """Today's path: pass 1's build on the target layout, then K - 1 x (advance_draft_step +
    build_draft_attn_metadata) on the mappings' own buffers."""
    from specops.drafting import build_draft_attn_metadata

    m, num_reqs = s["mappings"], s["num_reqs"]
    m.seq_lens[:num_reqs] = torch.tensor(s["seq_lens"], dtype=torch.int32)
    common = m.draft_inputs(s["qsl"], s["qsl_cpu"], s["seq_lens_cpu"], num_reqs=num_reqs,
                            num_actual_tokens=s["num_tokens"], num_input_tokens=s["num_tokens"])
    build_draft_attn_metadata(s["builders"], common, 1)
    if passes:
        _later_passes(s)


def _later_passes(s: dict) -> None:
    from specops.drafting import build_draft_attn_metadata

    m, num_reqs = s["mappings"], s["num_reqs"]
    draft_qsl = s.setdefault("draft_qsl", torch.zeros(num_reqs + 1, dtype=torch.int32, device=s["qsl"].device))
    draft_qsl_cpu = s.setdefault("draft_qsl_cpu", torch.arange(num_reqs + 1, dtype=torch.int32))
    for k in range(2, s["num_steps"] + 1):
        first = k == 2
        step = m.advance_draft_step(s["idx"], max_model_len=s["max_model_len"],
                                    token_indices=s["token_indices"] if first else None,
                                    num_rejected_tokens=s["rejected"] if first else None, query_start_loc=draft_qsl)
        common = m.draft_inputs(draft_qsl, draft_qsl_cpu, s["later_seq_lens_cpu"][k - 1], num_reqs=num_reqs,
                                num_actual_tokens=num_reqs, num_input_tokens=num_reqs, positions=step.positions)
        build_draft_attn_metadata(s["builders"], common, k)


def _plan_step(s: dict) -> None:
    s["plan"].plan_step(s["qsl_cpu"], s["seq_lens_cpu"], s["num_reqs"], s["num_tokens"])


def _advance_all(s: dict) -> None:
    s["plan"].advance_all(s["qsl"], s["token_indices"], s["rejected"], s["idx"])


def _loop(s: dict) -> None:
    _plan_step(s)
    _advance_all(s)
    for k in range(1, s["num_steps"] + 1):
        s["plan"].metadata(k)


def _one_later_pass(s: dict) -> None:
    """One later draft pass's host cost today: advance_draft_step + build_draft_attn_metadata."""
    from specops.drafting import build_draft_attn_metadata

    m, num_reqs = s["mappings"], s["num_reqs"]
    draft_qsl = s.setdefault("draft_qsl", torch.zeros(num_reqs + 1, dtype=torch.int32, device=s["qsl"].device))
    step = m.advance_draft_step(s["idx"], max_model_len=s["max_model_len"], query_start_loc=draft_qsl)
    common = m.draft_inputs(draft_qsl, s.setdefault("draft_qsl_cpu", torch.arange(num_reqs + 1, dtype=torch.int32)),
                            s["seq_lens_cpu"], num_reqs=num_reqs, num_actual_tokens=num_reqs,
                            num_input_tokens=num_reqs, positions=step.positions)
    build_draft_attn_metadata(s["builders"], common, 2)


def launches(s: dict) -> tuple[int, int]:
    """(the plan's launches per step: advance_all's ops + plan_step's one copy, today's later
    passes' launches per step: (K - 1) x (advance_draft_step + build_draft_attn_metadata))."""
    _plan_step(s)
    with LaunchCounter() as plan:
        _advance_all(s)
    _per_pass(s, passes=False)
    with LaunchCounter() as today:
        _later_passes(s)
    return plan.counts.launches + 1, today.counts.launches


def make_case(num_reqs: int, num_steps: int, mix: str, device: torch.device) -> Case:
    s = _setup(num_reqs, num_steps, mix, device)
    plan_launches, today_launches = launches(s)
    _loop(s)
    return Case(
        op="draft_loop", label=f"R={num_reqs} K={num_steps} {mix}", batch_size=num_reqs, num_tokens=s["num_tokens"],
        impls={"specops": lambda: _loop(s), "per-pass": lambda: _per_pass(s), "plan_step": lambda: _plan_step(s),
               "one-later-pass": lambda: _one_later_pass(s)},
        baselines=("per-pass",), floors=("one-later-pass",), references=("plan_step",),
        extras=dict([goal_figure("launches/step", float(plan_launches), LAUNCH_GOAL),
                     ("launches/step (per-pass)", float(today_launches))]),
        family=mix)


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [make_case(num_reqs, num_steps, mix, device) for num_reqs, num_steps, mix in (QUICK_SHAPES if quick else
                                                                                           SHAPES)]
