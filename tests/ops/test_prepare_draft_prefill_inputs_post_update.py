"""prepare_draft_prefill_inputs with its post-update part (model runner V2's post_update and the
draft prefill in one launch): the request state's update after sampling, then the prefill's inputs
from the last sampled tokens it leaves.

Expectations: tests/step_expectations.py's plain-Python post_update and draft_prefill_inputs, the
second run on the state the first returns; the prefill alone is test_prepare_draft_prefill_inputs.py's.
"""

from __future__ import annotations

import random

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import draft_prefill_inputs, post_update
from strategies import assert_compiles_like_eager, assert_same

import specops

STALE = 99
PREFILL_OUTPUTS = ("input_ids", "positions", "out_query_start_loc", "out_seq_lens", "last_token_indices",
                   "current_draft_step", "request_idx_mapping")
STATE = ("num_computed_tokens", "last_sampled_tokens", "all_token_ids", "total_len", "output_bin_counts")


def t32(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def worked_example() -> dict:
    """R = 2 of M = 4 rows: request 0 (row 2) keeps 2 of its 3 verify tokens (sampled 2: 41, 42),
    request 1 (row 0) is a chunked prefill (nothing sampled)."""
    return dict(target_input_ids=t32(11, 12, 13, 21), target_positions=torch.tensor([5, 6, 7, 9]),
                idx_mapping=t32(2, 0), query_start_loc=t32(0, 3, 4), seq_lens=t32(8, 10),
                num_sampled=t32(2, 0), num_rejected=t32(1, 0),
                last_sampled_tokens=torch.tensor([[100], [101], [102], [103]]),
                next_prefill_tokens=t32(200, 201, 202, 203).view(1, 4),
                input_ids=torch.full((6,), STALE, dtype=torch.int32), positions=torch.full((6,), STALE),
                out_query_start_loc=torch.full((5,), STALE, dtype=torch.int32),
                out_seq_lens=torch.full((4,), STALE, dtype=torch.int32), last_token_indices=torch.full((4,), STALE),
                current_draft_step=torch.tensor(STALE), request_idx_mapping=torch.full((4,), STALE),
                num_computed_tokens=t32(3, 0, 5, 0), sampled_tokens=torch.tensor([[41, 42, -1], [51, -1, -1]]),
                all_token_ids=torch.zeros(4, 10, dtype=torch.int32), total_len=t32(3, 0, 6, 0),
                output_bin_counts=torch.zeros(4, 64, dtype=torch.int32))


def test_worked_example(backend):
    call = worked_example()
    assert specops.prepare_draft_prefill_inputs(**call) is None
    # Row 2 appends 41, 42 at total_len 6 and computes its 3 tokens minus 1 rejected; row 0 its 1.
    assert call["num_computed_tokens"].tolist() == [4, 0, 7, 0]
    assert call["total_len"].tolist() == [3, 0, 8, 0]
    assert call["all_token_ids"][2].tolist() == [0] * 6 + [41, 42, 0, 0]
    assert call["last_sampled_tokens"].view(-1).tolist() == [100, 101, 42, 103]
    assert call["output_bin_counts"][2, 41] == 1 and call["output_bin_counts"][2, 42] == 1
    assert int(call["output_bin_counts"].sum()) == 2
    # The prefill's next token for request 0 is the one the update stored (42), not 102.
    assert call["input_ids"].tolist() == [12, 42, STALE, 200, STALE, STALE]
    assert call["positions"].tolist() == [5, 6, STALE, 9, STALE, STALE]
    assert call["last_token_indices"].tolist() == [1, 3, 0, 0]
    assert call["request_idx_mapping"].tolist() == [2, 0, -1, -1]


def _random_call(rng: random.Random) -> dict:
    """A valid call: distinct rows, every request keeping a token, kept counts within the sampled
    columns, appended tokens within the token table, sampled tokens within the vocabulary."""
    num_reqs = rng.randint(0, 5)
    num_rows = num_reqs + rng.randint(1, 3)
    cols, vocab, width = rng.randint(1, 4), 32, 24
    rows = rng.sample(range(num_rows), num_reqs)
    qsl, rejected, sampled_counts = [0], [], []
    for _ in range(num_reqs):
        query = rng.randint(1, 5)
        qsl.append(qsl[-1] + query)
        rejected.append(rng.randint(0, query - 1))
        sampled_counts.append(rng.randint(0, cols))
    num_tokens = qsl[-1]
    last_dtype = rng.choice([torch.int32, torch.int64])
    return dict(
        target_input_ids=torch.randint(0, 1000, (num_tokens + rng.randint(0, 2),), dtype=torch.int32),
        target_positions=torch.randint(0, 2**20, (num_tokens + rng.randint(0, 2),)),
        idx_mapping=torch.tensor(rows, dtype=rng.choice([torch.int32, torch.int64])),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32),
        seq_lens=torch.randint(1, 100, (num_reqs,), dtype=torch.int32),
        num_sampled=torch.tensor(sampled_counts, dtype=torch.int32), num_rejected=torch.tensor(rejected, dtype=torch.int32),
        last_sampled_tokens=torch.randint(0, vocab, (num_rows,), dtype=last_dtype),
        next_prefill_tokens=torch.randint(0, vocab, (rng.randint(1, 2), num_rows), dtype=torch.int32),
        input_ids=torch.full((num_tokens + rng.randint(0, 3),), STALE, dtype=torch.int32),
        positions=torch.full((num_tokens + rng.randint(0, 3),), STALE),
        out_query_start_loc=torch.full((num_reqs + 1 + rng.randint(0, 2),), STALE, dtype=torch.int32),
        out_seq_lens=torch.full((num_reqs + rng.randint(0, 2),), STALE, dtype=torch.int32),
        last_token_indices=torch.full((num_reqs + rng.randint(0, 2),), STALE),
        current_draft_step=torch.tensor(STALE), request_idx_mapping=torch.full((num_reqs + 1,), STALE),
        num_computed_tokens=torch.randint(0, 50, (num_rows,), dtype=torch.int32),
        sampled_tokens=torch.randint(0, vocab, (num_reqs, cols), dtype=rng.choice([torch.int32, torch.int64])),
        all_token_ids=torch.randint(0, vocab, (num_rows, width), dtype=torch.int32),
        total_len=torch.randint(0, width - cols, (num_rows,), dtype=torch.int32),
        output_bin_counts=torch.randint(0, 3, (num_rows, vocab), dtype=torch.int32) if rng.random() < 0.7 else None)


def _expected(call: dict) -> dict:
    """Both parts from their plain-Python contracts, the prefill on the updated state."""
    idx, qsl = call["idx_mapping"].tolist(), call["query_start_loc"].tolist()
    bins = call["output_bin_counts"]
    computed, state = post_update(
        idx, call["num_computed_tokens"].tolist(), qsl=qsl, sampled=call["sampled_tokens"].tolist(),
        num_sampled=call["num_sampled"].tolist(), num_rejected=call["num_rejected"].tolist(),
        last_sampled=call["last_sampled_tokens"].tolist(), all_token_ids=call["all_token_ids"].tolist(),
        total_len=call["total_len"].tolist(), bins=bins.tolist() if bins is not None else None)
    ids, positions, out_qsl, out_seq, last_index, mapping = draft_prefill_inputs(
        call["target_input_ids"].tolist(), call["target_positions"].tolist(), idx, qsl, call["seq_lens"].tolist(),
        call["num_sampled"].tolist(), call["num_rejected"].tolist(), state["last_sampled"],
        call["next_prefill_tokens"][0].tolist(), ids_before=call["input_ids"].tolist(),
        positions_before=call["positions"].tolist(), qsl_before=call["out_query_start_loc"].tolist(),
        seq_lens_before=call["out_seq_lens"].tolist(), last_index_before=call["last_token_indices"].tolist(),
        mapping_before=call["request_idx_mapping"].tolist())
    expected = dict(num_computed_tokens=computed, last_sampled_tokens=state["last_sampled"],
                    all_token_ids=state["all_token_ids"], total_len=state["total_len"], input_ids=ids,
                    positions=positions, out_query_start_loc=out_qsl, out_seq_lens=out_seq,
                    last_token_indices=last_index, request_idx_mapping=mapping)
    if bins is not None:
        expected["output_bin_counts"] = state["bins"]
    return expected


@settings(max_examples=examples(30), deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_random_against_the_expectation(backend, seed):
    call = _random_call(random.Random(seed))
    expected = _expected(call)
    specops.prepare_draft_prefill_inputs(**call)
    for name, values in expected.items():
        assert call[name].tolist() == values, name
    assert call["current_draft_step"].item() == 0


def test_equals_post_update_then_the_prefill(backend):
    for seed in range(8):
        call = _random_call(random.Random(seed))
        apart = {name: (t.clone() if isinstance(t, torch.Tensor) else t) for name, t in call.items()}
        specops.prepare_draft_prefill_inputs(**call)
        specops.post_update_after_sampling(
            apart["idx_mapping"], apart["num_computed_tokens"], query_start_loc=apart["query_start_loc"],
            sampled_tokens=apart["sampled_tokens"], num_sampled=apart["num_sampled"],
            num_rejected=apart["num_rejected"], last_sampled_tokens=apart["last_sampled_tokens"],
            all_token_ids=apart["all_token_ids"], total_len=apart["total_len"],
            output_bin_counts=apart["output_bin_counts"])
        specops.prepare_draft_prefill_inputs(**{k: v for k, v in apart.items() if k not in (
            "num_computed_tokens", "sampled_tokens", "all_token_ids", "total_len", "output_bin_counts")})
        for name, value in call.items():
            if isinstance(value, torch.Tensor):
                assert_same(value, apart[name])


def _bad():
    shared = torch.zeros(32, dtype=torch.int64)
    return [
        ("a state tensor without sampled_tokens", dict(sampled_tokens=None),
         r"num_computed_tokens is part of the post-update: it needs sampled_tokens"),
        ("sampled_tokens without total_len", dict(total_len=None),
         r"total_len must be given with sampled_tokens"),
        ("num_computed_tokens int64", dict(num_computed_tokens=torch.zeros(4, dtype=torch.int64)),
         r"num_computed_tokens must have dtype"),
        ("sampled_tokens 1-D", dict(sampled_tokens=torch.tensor([41, 42])), r"sampled_tokens"),
        ("output_bin_counts sharing all_token_ids",
         dict(all_token_ids=shared.view(torch.int32)[:40].view(4, 10),
              output_bin_counts=shared.view(torch.int32)[8:64].view(4, 14)),
         r"output_bin_counts must not share memory with all_token_ids"),
        ("total_len sharing the prefill's input_ids",
         dict(input_ids=shared.view(torch.int32)[:6], total_len=shared.view(torch.int32)[4:8]),
         r"total_len must not share memory with input_ids"),
        ("all_token_ids on target_input_ids",
         dict(target_input_ids=shared.view(torch.int32)[:4], all_token_ids=shared.view(torch.int32)[:40].view(4, 10)),
         r"all_token_ids must not share memory with target_input_ids"),
    ]


# Values only the host op reads (the device paths keep every access in bounds instead).
_BAD_VALUES = [
    ("a repeated row", dict(idx_mapping=t32(2, 2)), r"idx_mapping repeats request row 2"),
    ("num_sampled past the sampled columns", dict(num_sampled=t32(4, 0)), r"num_sampled\[0\] = 4 must be in"),
    ("tokens past all_token_ids", dict(total_len=t32(3, 0, 9, 0)), r"past the all_token_ids width 10"),
    ("a kept token outside the vocabulary", dict(sampled_tokens=torch.tensor([[41, 70, -1], [51, -1, -1]])),
     r"sampled_tokens\[0, 1\] = 70 is a kept token outside"),
    ("a request keeping no token", dict(num_rejected=t32(3, 0)), r"num_rejected\[0\] = 3 must be in"),
]


def _assert_rejected(changes: dict, message: str) -> None:
    call = dict(worked_example(), **changes)
    written = [name for name in PREFILL_OUTPUTS + STATE if call.get(name) is not None]
    before = {name: call[name].clone() for name in written}
    with pytest.raises((ValueError, TypeError), match=message):
        specops.prepare_draft_prefill_inputs(**call)
    for name in written:
        assert torch.equal(call[name], before[name]), name


@pytest.mark.parametrize("label, changes, message", _bad(), ids=[b[0] for b in _bad()])
def test_bad_input_names_the_argument_and_writes_nothing(backend, label, changes, message):
    _assert_rejected(changes, message)


@pytest.mark.parametrize("label, changes, message", _BAD_VALUES, ids=[b[0] for b in _BAD_VALUES])
def test_bad_values_are_rejected_by_the_host_op_before_any_write(label, changes, message):
    _assert_rejected(changes, message)


def test_opcheck():
    call = worked_example()
    names = ("target_input_ids", "target_positions", "idx_mapping", "query_start_loc", "seq_lens", "num_sampled",
             "num_rejected", "last_sampled_tokens", "next_prefill_tokens", "input_ids", "positions",
             "out_query_start_loc", "out_seq_lens", "last_token_indices", "current_draft_step", "request_idx_mapping")
    args = tuple(call[name] for name in names)
    part = {name: call[name] for name in ("num_computed_tokens", "sampled_tokens", "all_token_ids", "total_len",
                                          "output_bin_counts")}
    torch.library.opcheck(torch.ops.specops.prepare_draft_prefill_inputs.default, args, part)


def test_compiles_without_graph_break():
    call = worked_example()

    def step(input_ids, last_sampled_tokens, num_computed_tokens, all_token_ids, total_len):
        specops.prepare_draft_prefill_inputs(**dict(
            call, input_ids=input_ids, last_sampled_tokens=last_sampled_tokens,
            num_computed_tokens=num_computed_tokens, all_token_ids=all_token_ids, total_len=total_len))
        return input_ids + 1, total_len * 2

    assert_compiles_like_eager(step, call["input_ids"], call["last_sampled_tokens"], call["num_computed_tokens"],
                               call["all_token_ids"], call["total_len"])


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_device_paths_stay_in_bounds_and_agree_on_hostile_values(seed):
    """Rows past the state, kept counts past the sampled columns, total lengths at the int32 limits,
    tokens outside the vocabulary: Triton and the reference write the same values and nothing outside
    their outputs (each output in the middle of a canary-filled buffer)."""
    rng = random.Random(seed)
    call = _random_call(rng)
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return
    for r in range(num_reqs):
        call["idx_mapping"][r] = rng.choice([int(call["idx_mapping"][r]), -3, 10**6])
        call["num_sampled"][r] = rng.choice([int(call["num_sampled"][r]), -2, 10**6])
        call["num_rejected"][r] = rng.choice([int(call["num_rejected"][r]), -1, 10**6])
    row = rng.randrange(call["total_len"].numel())
    call["total_len"][row] = rng.choice([-(2**31), 2**31 - 1, -5])
    call["sampled_tokens"].view(-1)[0] = rng.choice([-7, 10**6])
    results = {}
    for backend in ("triton", "reference"):
        current = dict(call)
        bands = []

        def banded(t):
            buffer = torch.full((t.numel() + 16,), 77, dtype=t.dtype)
            bands.append(buffer)
            return buffer[8:-8].view(t.shape).copy_(t)

        for name in PREFILL_OUTPUTS + STATE:
            if call.get(name) is not None:
                current[name] = banded(call[name])
        with specops.backend(backend):
            specops.prepare_draft_prefill_inputs(**current)
        for buffer in bands:
            assert (buffer[:8] == 77).all() and (buffer[-8:] == 77).all(), backend
        results[backend] = [current[name] for name in PREFILL_OUTPUTS + STATE if call.get(name) is not None]
    for ours, theirs in zip(results["triton"], results["reference"]):
        assert_same(ours, theirs)
