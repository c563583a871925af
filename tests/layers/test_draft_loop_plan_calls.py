"""DraftLoopPlan's calls (hardening round 5, docs/changelog.md "Fifth round"): a shared schedule is
pass K's in every pass 2..K; a rejected advance_all keeps none of its overrides; the accessors
before plan_step and a host layout that is not one are errors naming the caller's call or
argument (also on the per-pass builders), and a rejected plan_step changes nothing."""

from __future__ import annotations

import random

import pytest
import torch
from draft_loop_cases import MAX_REQS, allocate_rows, make_setup, target_step

from specops.drafting import build_draft_attn_metadata

I32 = torch.int32
ASCEND950 = "Ascend950PR_9599"
WORDS = ("sas_metadata", "qli_metadata")


def _words(plan, k: int) -> list[list[int]]:
    return [getattr(meta, name).tolist() for meta in plan.metadata(k) for name in WORDS
            if getattr(meta, name) is not None]


# ---------------------------------------------------------------- 1. shared schedules: pass K's


def _decode_step(mappings, plan, seq_lens: list[int]) -> None:
    """One decode token per request (rows 0..R-1, every draft accepted), planned at the exact
    bound and advanced."""
    num_reqs = len(seq_lens)
    qsl, rows, lens = torch.arange(num_reqs + 1, dtype=I32), torch.arange(num_reqs, dtype=I32), \
        torch.tensor(seq_lens, dtype=I32)
    mappings.positions[:num_reqs] = (lens - 1).long()
    mappings.seq_lens.zero_()
    mappings.seq_lens[:num_reqs] = lens
    mappings.refresh(rows, qsl, mappings.positions[:num_reqs], num_reqs_padded=num_reqs)
    plan.plan_step(qsl, lens, num_reqs, num_reqs)
    plan.advance_all(qsl, rows, torch.zeros(num_reqs, dtype=I32), rows)


@pytest.mark.parametrize("kinds,num_steps,variant,heads,soc,cp_size", [
    (["c128"], 5, "a5", 128, ASCEND950, 1),
    (["swa", "c4", "c128"], 4, "a5", 64, ASCEND950, 2),
    (["c4", "swa", "full"], 3, "a2a3", 64, "Ascend910B1", 1),
    (["swa", "c4", "c128", "dspark"], 6, "a2a3", 128, "Ascend910B1", 2),
])
def test_a_shared_schedule_is_pass_ks_in_every_later_pass(kinds, num_steps, variant, heads, soc, cp_size):
    """Once: shared_schedule=True planned pass 2's lengths and copied them into passes 3..K. Now
    every pass 2..K of a shared plan holds the words the per-pass plan makes for pass K (the
    largest bounds), sas / A5 and indexer words alike; pass 1 keeps its own."""
    platform = dict(num_cube_cores=4, num_vector_cores=8, soc_version=soc)
    rng = random.Random(repr((kinds, num_steps, variant)))
    max_model_len = 1100
    plans = []
    for shared in (False, True):
        plans.append(make_setup(kinds, num_steps=num_steps, max_model_len=max_model_len, sas_variant=variant,
                                num_heads_q=heads, platform=platform, cp_size=cp_size, cp_rank=cp_size - 1,
                                shared_schedule=shared))
        allocate_rows(plans[-1][0], random.Random(7), [1])
    differ = 0
    for _ in range(6):
        # Short decode requests, and ones a few tokens below a boundary of the schedules' costs
        # (a compressed key, a 64- or 128-token KV block) that passes 3..K cross: pass K's words
        # differ from pass 2's.
        seq_lens = [rng.choice([rng.randint(2, 8), rng.choice([8, 64, 128]) * rng.randint(1, 2)
                                - rng.randint(1, num_steps - 1)]) for _ in range(MAX_REQS)]
        for mappings, _, plan in plans:
            _decode_step(mappings, plan, seq_lens)
        per_pass, shared = plans[0][2], plans[1][2]
        last = _words(per_pass, num_steps)
        assert _words(shared, 1) == _words(per_pass, 1)
        for k in range(2, num_steps + 1):
            assert _words(shared, k) == last, k
        differ += _words(per_pass, 2) != last
    assert differ > 0  # the bounds grew enough over the passes to change the words


# ---------------------------------------------------------------- 3. a rejected call keeps nothing


def _state(plan) -> list[torch.Tensor]:
    buffers = plan.buffers
    return [t.clone() for t in (*buffers[:8], *buffers.slots, *buffers.slot_pairs)]


@pytest.mark.parametrize("override", ["positions", "seq_lens", "both"])
def test_a_rejected_advance_all_keeps_none_of_its_overrides(backend, override):
    """Once: a call with positions= / seq_lens= that the op rejected left them in the plan's
    argument list, and the next call without them computed every pass from them (wrong positions
    and KV slots, silently). Now the next default call gives what it gives on a fresh plan; an
    accepted override is this call's only too."""
    num_steps = 3
    mappings, builders, plan = make_setup(["swa", "c4"], num_steps=num_steps, max_model_len=80)
    allocate_rows(mappings, random.Random(1), [1])
    step = target_step(mappings, random.Random(2), num_steps=num_steps, max_model_len=80, num_reqs=MAX_REQS)
    plan.plan_step(step["qsl"], torch.tensor(step["seq_lens"], dtype=I32), MAX_REQS, step["num_tokens"])
    arguments = (step["qsl"], step["token_indices"], step["rejected"], step["idx"])
    plan.advance_all(*arguments)
    want = _state(plan)
    overrides = {}
    if override in ("positions", "both"):
        overrides["positions"] = mappings.positions.clone() + 3
    if override in ("seq_lens", "both"):
        overrides["seq_lens"] = mappings.seq_lens.clone() - 1
    # Rejected on every backend: token_indices of a float dtype.
    with pytest.raises(ValueError, match="token_indices"):
        plan.advance_all(step["qsl"], step["token_indices"].float(), step["rejected"], step["idx"], **overrides)
    plan.advance_all(*arguments)
    assert all(torch.equal(a, b) for a, b in zip(_state(plan), want))
    plan.advance_all(*arguments, **overrides)
    assert not all(torch.equal(a, b) for a, b in zip(_state(plan), want))
    plan.advance_all(*arguments)
    assert all(torch.equal(a, b) for a, b in zip(_state(plan), want))


# ---------------------------------------------------------------- 8. errors naming the caller's call


def test_the_accessors_before_plan_step_say_so():
    """Once: positions(k) before plan_step was a bare IndexError (metadata(k) said "needs
    plan_step first"; slot_mappings(k) and seq_lens(k) gave empty views of no step). One rule
    for the four; a draft index out of range is still named as such."""
    _, _, plan = make_setup(["swa", "c4"], num_steps=2, max_model_len=40)
    for name in ("positions", "seq_lens", "slot_mappings", "metadata"):
        with pytest.raises(RuntimeError, match=f"^{name} needs plan_step first"):
            getattr(plan, name)(1)
        with pytest.raises(ValueError, match="draft_index"):
            getattr(plan, name)(3)


LAYOUTS = [([0, 3, 2], r"query_start_loc_cpu must be non-decreasing, got query_start_loc_cpu\[2\] = 2 < "
                       r"query_start_loc_cpu\[1\] = 3"),
           ([2, 1, 3], r"query_start_loc_cpu must be non-decreasing, got query_start_loc_cpu\[1\] = 1"),
           ([-1, 1, 2], r"query_start_loc_cpu\[0\] = -1 must be >= 0"),
           ([-(2**31), 1, 2], r"query_start_loc_cpu\[0\] = -2147483648 must be >= 0"),
           ([0, 2**31 - 1, -(2**31)],
            r"query_start_loc_cpu must be non-decreasing, got query_start_loc_cpu\[2\] = -2147483648")]


@pytest.mark.parametrize("starts,message", LAYOUTS)
def test_a_host_layout_that_is_not_one_is_named_and_changes_nothing(starts, message):
    """Once: a decreasing query_start_loc_cpu failed inside the schedule op, naming its
    cu_seqlens_q (nothing the caller passed), and a negative first start was taken. plan_step and
    the per-pass builders now reject it naming query_start_loc_cpu; a rejected plan_step leaves
    the plan's host lengths, schedules and the previous step's views as they were."""
    num_steps = 2
    mappings, builders, plan = make_setup(["swa", "c4", "c128"], num_steps=num_steps, max_model_len=40,
                                          sas_variant="a5", platform=dict(num_cube_cores=4, num_vector_cores=8,
                                                                          soc_version=ASCEND950))
    allocate_rows(mappings, random.Random(4), [1])
    step = target_step(mappings, random.Random(5), num_steps=num_steps, max_model_len=40, num_reqs=2)
    plan.plan_step(step["qsl"], torch.tensor(step["seq_lens"], dtype=I32), 2, step["num_tokens"])
    before = ([t.clone() for t in (plan.schedules.device_block, plan.seq_lens_cpu)],
              [_words(plan, k) for k in range(1, num_steps + 1)], [plan.positions(k).clone() for k in (1, 2)])
    bad = torch.tensor(starts, dtype=I32)
    with pytest.raises(ValueError, match=f"^{message}"):
        plan.plan_step(bad, torch.tensor([30, 30], dtype=I32), 2, max(starts[-1], 0) + 4)
    after = ([plan.schedules.device_block, plan.seq_lens_cpu], [_words(plan, k) for k in range(1, num_steps + 1)],
             [plan.positions(k) for k in (1, 2)])
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0])) and before[1] == after[1]
    assert all(torch.equal(a, b) for a, b in zip(before[2], after[2]))
    # The per-pass path (build_draft_attn_metadata) reads the same host layout.
    device_starts = torch.tensor([0, 1, 2], dtype=I32)
    common = mappings.draft_inputs(device_starts, bad, torch.tensor([30, 30], dtype=I32), num_reqs=2,
                                   num_actual_tokens=2, num_input_tokens=4)
    with pytest.raises(ValueError, match=f"^{message}"):
        build_draft_attn_metadata(builders, common, 1)
