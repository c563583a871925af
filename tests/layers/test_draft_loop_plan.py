"""DraftLoopPlan: every field of every pass k = 1..K against the per-pass path (advance_draft_step
applied k - 1 times, build_draft_attn_metadata with exact host lengths), on group mixes of 1-8
kinds, CP 1 / 2 / 4, both rules, requests crossing max_model_len mid-loop and seq_lens bounds
up to 2K above the real ones (whose schedules must still cover the real work, simulated as the
consumer runs them); no pass shares memory with another; addresses stable over 100 steps; no
device read and no allocation in a steady step; a replay of passes 2..K from the first step's
addresses; the launches per step."""

from __future__ import annotations

import random

import pytest
import torch
from draft_loop_cases import KINDS, MAX_REQS, allocate_rows, make_setup, oracle, target_step
from host_syncs import OpLog
from sas_checker import FD_BASE, NUM_WORDS

import specops
from specops.launch_count import LaunchCounter
from specops.triton_kernels._launch import assumed_npu

FIELDS = ("input_positions", "cos", "sin", "local_cos", "local_sin", "start_pos", "slot_mapping", "compress_cos",
          "compress_sin", "compress_slot_mapping", "dspark_swa_indices", "dspark_swa_lens", "window")
HOST_FIELDS = ("num_decodes", "num_prefills", "num_decode_tokens", "num_prefill_tokens")
CP_TENSORS = ("local_query_start_loc", "local_seq_lens", "start_pos")
CP_INTS = ("num_tokens_pad", "tokens_per_rank", "local_start", "local_end", "max_local_query_len")


def covered_tiles(words: list[int], query_lens: list[int], kv_lens: list[int], num_heads_q: int) -> list[int]:
    """The consumer's loop over the real lengths: each enabled FA entry runs the (batch, M tile)
    cursors from its start up to its end, reading each batch's real KV length then; returns how
    many times each tile with real work ran (flattened)."""
    tiles = [q for q in query_lens]  # one M tile per token (num_heads_q rows: G <= 64 here)
    runs = {(b, m): 0 for b in range(len(tiles)) for m in range(tiles[b]) if kv_lens[b] > 0}
    assert len(words) == NUM_WORDS and words[FD_BASE:] == [0] * (NUM_WORDS - FD_BASE)
    for c in range(FD_BASE // 8):
        entry = words[8 * c: 8 * c + 8]
        if entry[0] != 1:
            continue
        b, m = entry[1], entry[2]
        end = (entry[4], entry[5])
        while (b, m) < end:
            if b >= len(tiles):
                break
            if m >= tiles[b]:
                b, m = b + 1, 0
                continue
            if (b, m) in runs:
                runs[(b, m)] += 1
            m += 1
    return list(runs.values())


def run_step(setup, rng, *, num_steps, max_model_len, rule, bound_extra, extra_tokens=0, extra_reqs=0,
             num_reqs=None):
    mappings, builders, plan = setup
    step = target_step(mappings, rng, num_steps=num_steps, max_model_len=max_model_len, num_reqs=num_reqs)
    num_reqs = step["num_reqs"]
    padded = min(num_reqs + extra_reqs, MAX_REQS)
    num_input_tokens = step["num_tokens"] + extra_tokens
    bound = torch.tensor([s + rng.randint(0, bound_extra) for s in step["seq_lens"]], dtype=torch.int32)
    device = mappings.device
    plan.plan_step(step["qsl"], bound, num_reqs, num_input_tokens, num_reqs_padded=padded)
    plan.advance_all(step["qsl"].to(device), step["token_indices"].to(device), step["rejected"].to(device),
                     step["idx"].to(device))
    return step, bound, num_input_tokens, padded


def assert_pass_equal(mine, want, k, bound_k, exact_k, num_heads_q):
    exact = bound_k == exact_k
    for index, (a, b) in enumerate(zip(mine, want)):
        where = f"pass {k}, group {index}"
        for name in HOST_FIELDS:
            assert getattr(a, name) == getattr(b, name), (where, name)
        for name in FIELDS:
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(y, torch.Tensor):
                assert x is not None and x.shape == y.shape and x.dtype == y.dtype, (where, name, x, y)
                assert torch.equal(x.cpu(), y.cpu()), (where, name, x, y)
            else:
                assert x == y, (where, name, x, y)
        for name in CP_TENSORS:
            assert torch.equal(getattr(a.cp, name).cpu(), getattr(b.cp, name).cpu()), (where, name)
        for name in CP_INTS:
            assert getattr(a.cp, name) == getattr(b.cp, name), (where, name)
        assert a.seq_lens_cpu.tolist() == bound_k and all(x >= y for x, y in zip(bound_k, exact_k)), where
        if exact:
            assert a.cp.max_local_seq_len == b.cp.max_local_seq_len, where
        assert a.cp.max_local_seq_len >= b.cp.max_local_seq_len, where
        for name in ("sas_metadata", "qli_metadata"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None) == (y is None), (where, name)
            if x is None:
                continue
            if exact:
                assert torch.equal(x.cpu(), y.cpu()), (where, name)
            elif name == "sas_metadata" and b.cp.local_seq_lens.numel() and a.cp is not None:
                # Planned from the bound: the consumer, reading the real lengths, runs every tile
                # with real work exactly once.
                starts = b.cp.local_query_start_loc.tolist()
                query_lens = [e - s for s, e in zip(starts, starts[1:])]
                runs = covered_tiles(x.tolist(), query_lens, b.cp.local_seq_lens.tolist(), num_heads_q)
                assert runs == [1] * len(runs), (where, runs)


CASES = [
    # (kinds, num_steps, cp_size, rule, bound_extra)
    (["swa"], 1, 1, "reset", 0),
    (["swa", "full"], 2, 1, "clamp", 0),
    (["swa", "c4", "c128"], 3, 1, "reset", 0),
    (["swa", "full", "c4", "c128", "dspark"], 5, 2, "reset", 2),
    (["swa", "dspark", "swa_wide", "full8", "swa4"], 7, 4, "clamp", 14),
    (["swa", "full", "c4", "c128", "dspark", "swa_wide", "full8", "swa4"], 3, 2, "reset", 6),
    (["swa4", "full8"], 5, 4, "reset", 10),
    (["c4", "swa"], 7, 1, "clamp", 3),
    # Five compressed groups: the compressor rows take a second launch past 4.
    (["c4", "c128", "swa", "c4", "c128", "c4"], 2, 2, "clamp", 1),
]


@pytest.mark.parametrize("kinds,num_steps,cp_size,rule,bound_extra", CASES)
def test_every_pass_matches_the_per_pass_path(kinds, num_steps, cp_size, rule, bound_extra):
    rng = random.Random(repr((kinds, num_steps, cp_size, rule)))  # str seeds are stable across runs
    max_model_len = rng.randint(num_steps + 3, 60)
    cp_rank = rng.randint(0, cp_size - 1)
    formats = [rng.choice(["int64_padded", "int32_actual"]) for _ in kinds]
    setup = make_setup(kinds, num_steps=num_steps, max_model_len=max_model_len, cp_size=cp_size, cp_rank=cp_rank,
                       rule=rule, formats=formats, seed=rng.randint(0, 999),
                       slot_dtype=rng.choice([torch.int64, torch.int32]))
    mappings, builders, plan = setup
    allocate_rows(mappings, rng, [1])
    for _ in range(3):
        step, bound, num_input_tokens, padded = run_step(
            setup, rng, num_steps=num_steps, max_model_len=max_model_len, rule=rule, bound_extra=bound_extra,
            extra_tokens=rng.randint(0, 3), extra_reqs=rng.randint(0, 2))
        mine = [plan.metadata(k) for k in range(1, num_steps + 1)]
        mine_slots = [[s.clone() for s in plan.slot_mappings(k)] for k in range(1, num_steps + 1)]
        want = oracle(mappings, builders, step, num_steps=num_steps, max_model_len=max_model_len, rule=rule,
                      num_input_tokens=num_input_tokens, num_reqs_padded=padded)
        for k, (metas, exact, slots) in enumerate(want, start=1):
            bound_k = [min(b + k - 1, max_model_len) for b in bound.tolist()]
            assert_pass_equal(mine[k - 1], metas, k, bound_k, exact, 64)
            for g, (a, b) in enumerate(zip(mine_slots[k - 1], slots)):
                assert torch.equal(a.cpu(), b.cpu()), (k, g)


def _tensors(metas):
    tensors = []
    for meta in metas:
        for name in ("input_positions", "cos", "sin", "local_cos", "local_sin", "start_pos", "slot_mapping",
                     "sas_metadata", "qli_metadata", "compress_cos", "compress_sin", "compress_slot_mapping"):
            value = getattr(meta, name)
            if isinstance(value, torch.Tensor):
                tensors.append(value)
        tensors += [meta.cp.local_query_start_loc, meta.cp.local_seq_lens]
    return tensors


def _span(t):
    start = t.data_ptr()
    end = start + (sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1) * t.element_size()
    return start, end


def test_no_field_of_one_pass_shares_memory_with_another_and_addresses_are_stable():
    num_steps = 3
    setup = make_setup(["swa", "full", "c4", "c128"], num_steps=num_steps, max_model_len=50, cp_size=2, cp_rank=1)
    mappings, builders, plan = setup
    rng = random.Random(5)
    allocate_rows(mappings, rng, [1])
    first = {}
    shapes = set()
    for i in range(100):
        dummy = i % 10 == 0  # dummy runs: no request at all
        step, _, num_input_tokens, padded = run_step(
            setup, rng, num_steps=num_steps, max_model_len=50, rule="reset", bound_extra=3,
            extra_tokens=rng.randint(0, 4), extra_reqs=rng.randint(0, 2), num_reqs=0 if dummy else None)
        shapes.add((step["num_reqs"], num_input_tokens, padded))
        metas = [plan.metadata(k) for k in range(1, num_steps + 1)]
        slots = [plan.slot_mappings(k) for k in range(1, num_steps + 1)]
        tensors = [_tensors(m) + s for m, s in zip(metas, slots)]
        spans = [[_span(t) for t in ts if t.numel()] for ts in tensors]
        for k in range(num_steps):
            for j in range(k + 1, num_steps):
                for a in spans[k]:
                    for b in spans[j]:
                        assert a[1] <= b[0] or b[1] <= a[0], (k + 1, j + 1)
        # Every view starts where its pass's buffer row starts, whatever the shape (an empty
        # view has no address to compare).
        for k, ts in enumerate(tensors):
            for index, t in enumerate(ts):
                if t.numel():
                    assert first.setdefault((k, index), t.data_ptr()) == t.data_ptr(), (i, k, index)
    assert len(shapes) > 10 and len(first) == sum(len(ts) for ts in tensors)


def _recorded(t):
    """A new tensor built from t's address alone (storage, offset, sizes, strides), as a captured
    graph holds it: if the plan moved a buffer, this still reads the old memory."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), t.storage_offset(), t.shape,
                                                               t.stride())


def test_a_replay_reads_every_later_pass_through_the_first_steps_addresses():
    # Passes 2..K have a fixed shape at a fixed request count (one token a request, padded to
    # num_reqs_padded): what a graph of the K - 1 later draft forwards replays. Every tensor of
    # those passes, rebuilt from the first step's addresses, holds each later step's values.
    num_steps, max_model_len = 4, 50
    setup = make_setup(["swa", "full", "c4", "c128", "dspark"], num_steps=num_steps, max_model_len=max_model_len,
                       cp_size=2, cp_rank=1)
    mappings, builders, plan = setup
    rng = random.Random(11)
    allocate_rows(mappings, rng, [1])
    schedules = ("sas_metadata", "qli_metadata")

    def without_schedules(metas):
        return [t for t in _tensors(metas) if all(t is not getattr(m, n) for m in metas for n in schedules)]

    def fields(k):
        return without_schedules(plan.metadata(k)) + plan.slot_mappings(k) + [plan.seq_lens(k)]

    def words(k):
        return [getattr(m, n) for m in plan.metadata(k) for n in schedules if getattr(m, n) is not None]

    recorded = None
    for _ in range(8):
        step, _, num_input_tokens, padded = run_step(setup, rng, num_steps=num_steps, max_model_len=max_model_len,
                                                     rule="reset", bound_extra=3, num_reqs=MAX_REQS)
        if recorded is None:
            recorded = {k: ([_recorded(t) for t in fields(k)], [_recorded(t) for t in words(k)])
                        for k in range(2, num_steps + 1)}
        want = oracle(mappings, builders, step, num_steps=num_steps, max_model_len=max_model_len, rule="reset",
                      num_input_tokens=num_input_tokens, num_reqs_padded=padded)
        for k in range(2, num_steps + 1):
            metas, exact, slots = want[k - 1]
            expected = without_schedules(metas) + slots + [torch.tensor(exact, dtype=torch.int32)]
            replayed_fields, replayed_words = recorded[k]
            assert len(expected) == len(replayed_fields) and len(replayed_words) == len(words(k)) > 0
            for index, (replayed, value) in enumerate(zip(replayed_fields, expected)):
                assert torch.equal(replayed.cpu(), value.cpu()), (k, index)
            # The schedules are planned from the bound (test_every_pass_matches_the_per_pass_path
            # checks them against the real work): the replayed words are this step's plan.
            for replayed, value in zip(replayed_words, words(k)):
                assert torch.equal(replayed, value), k


def test_a_steady_step_reads_no_device_value_and_allocates_nothing():
    num_steps = 4
    setup = make_setup(["swa", "full", "c4", "dspark"], num_steps=num_steps, max_model_len=60)
    mappings, builders, plan = setup
    rng = random.Random(9)
    allocate_rows(mappings, rng, [1])
    step = target_step(mappings, rng, num_steps=num_steps, max_model_len=60, num_reqs=MAX_REQS)
    bound = torch.tensor(step["seq_lens"], dtype=torch.int32) + 2

    def host():
        plan.plan_step(step["qsl"], bound, step["num_reqs"], step["num_tokens"] + 2)

    def device():
        plan.advance_all(step["qsl"], step["token_indices"], step["rejected"], step["idx"])
        return [plan.metadata(k) for k in range(1, num_steps + 1)]

    with assumed_npu():
        host()
        device()  # the first step at this shape makes its views
        with OpLog() as host_log:
            host()
        with OpLog() as device_log:
            device()
    # The device half reads no value at all and allocates nothing.
    assert device_log.scalar_reads() == [] and device_log.host_syncs() == []
    assert device_log.allocations() == [], device_log.allocations()
    with LaunchCounter() as counter:
        device()
    # One advance_draft_steps, and one launch for the C4 group's compressor rows of every pass.
    assert counter.counts.by_op["specops.advance_draft_steps.default"] == 1
    assert counter.counts.by_op["specops.compressor_metadata_multi.default"] == 1
    assert counter.counts.launches == 2, counter.counts.by_op
    # The host half reads only host tensors (its inputs and its own blocks) and allocates no tensor.
    assert host_log.device_to_host() == []
    assert host_log.allocations() == [], host_log.allocations()


def test_plan_step_rejects_device_shaped_mistakes():
    mappings, builders, plan = make_setup(["swa"], num_steps=2, max_model_len=40)
    qsl = torch.tensor([0, 2], dtype=torch.int32)
    with pytest.raises(ValueError, match="num_input_tokens"):
        plan.plan_step(qsl, torch.tensor([5], dtype=torch.int32), 1, 1)
    with pytest.raises(ValueError, match="num_reqs"):
        plan.plan_step(qsl, torch.tensor([5], dtype=torch.int32), MAX_REQS + 1, 2)
    with pytest.raises(RuntimeError, match="plan_step"):
        plan.advance_all(qsl, qsl[:1], qsl[:1], qsl[:1])
    with pytest.raises(ValueError, match="mapping group"):
        from specops.drafting import DraftLoopPlan, DraftMetadataBuilder, GroupConfig
        other = DraftMetadataBuilder(builders[0].model, GroupConfig("nope", 16, 16, 8), MAX_REQS, 8)
        DraftLoopPlan(mappings, [other], num_speculative_tokens=2, max_model_len=40)


@pytest.mark.parametrize("kinds, launches", [(["swa"], 1), (["swa", "full", "dspark", "swa4"], 1),
                                             (["swa", "c4", "c128", "full"], 2), (["c4", "c128", "c4", "c128"], 2)])
def test_up_to_four_groups_make_one_launch_and_one_for_the_compressors_whatever_k(kinds, launches):
    assert set(KINDS) >= set(kinds)
    for num_steps in (1, 3, 7):
        setup = make_setup(kinds, num_steps=num_steps, max_model_len=60)
        mappings, builders, plan = setup
        rng = random.Random(num_steps)
        allocate_rows(mappings, rng, [1])
        step = target_step(mappings, rng, num_steps=num_steps, max_model_len=60, num_reqs=MAX_REQS)
        plan.plan_step(step["qsl"], torch.tensor(step["seq_lens"], dtype=torch.int32), MAX_REQS, step["num_tokens"])
        with LaunchCounter() as counter:
            plan.advance_all(step["qsl"], step["token_indices"], step["rejected"], step["idx"])
        # Plus plan_step's one host-to-device copy on a device: at most 3 per step.
        assert counter.counts.launches == launches, counter.counts.by_op
