"""Hardening round 5 (docs/changelog.md, "Fifth round"): one family of tests per defect found, for
the ops' faces (the drafting layer's families are in tests/layers/test_draft_loop_plan_calls.py
and tests/oracles/test_draft_loop_coverage.py; compressor_metadata's int64 query lengths in
tests/ops/test_compressor_metadata_limits.py; the reference draft prefill's negative start in
tests/ops/test_prepare_draft_prefill_inputs.py).

4. advance_draft_steps at the int64 limit: a gathered position of 2^63 - 1 (and its neighbours)
   gives the step-bookkeeping rules' reset / clamp values on every backend, pass after pass.
7. advance_draft_steps with an int32 out_slots[g]: a slot past 2^31 - 1, pass 1's copied target
   slot or a later pass's computed one, is rejected by the host op naming out_slots[g] before
   anything is written, and is PAD on the device paths.
8. advance_draft_steps / advance_draft_step without their outputs: a None, a list or a 1-D
   tensor where a tensor is sized from, a None tensor list, are ValueErrors naming the caller's
   argument, as with the outputs given.
"""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, device_backends
from step_expectations import draft_step

import specops
from specops.ops.advance_draft_steps import empty_draft_steps

PAD = specops.PAD_SLOT_ID
I32, I64 = torch.int32, torch.int64
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
SENTINEL = 77


def i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def i64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I64)


def rope_cache(rows: int, dim: int = 4) -> torch.Tensor:
    return torch.arange(rows * dim, dtype=torch.float32).view(rows, dim) + 1


# ---------------------------------------------------------------- 4. the int64 limit, every pass


def _passes(positions, seq_lens, tables, block_size, *, token_indices, num_steps, max_model_len, rule):
    """Passes 2..K by the step-bookkeeping rule in Python ints (tests/step_expectations.py's
    draft_step, which never wraps): the first with the gather, then from the previous pass."""
    out = []
    current, lens = positions, seq_lens
    for k in range(2, num_steps + 1):
        gather = token_indices if k == 2 else None
        step = draft_step(current, lens, tables, [block_size] * len(tables), max_model_len=max_model_len, rule=rule,
                          token_indices=gather)
        out.append(step)
        current, lens = step[0], step[1]
    return out


@pytest.mark.parametrize("rule", ["reset", "clamp"])
@pytest.mark.parametrize("num_steps", [2, 3, 5])
@pytest.mark.parametrize("gathered", [INT64_MAX, INT64_MAX - 1, 2**62, 41, 40, 39, 38])
def test_advance_draft_steps_at_the_last_int64_position(backend, rule, num_steps, gathered):
    """Once: Triton and the reference formed position + 1 in int64, so a gathered position of
    2^63 - 1 became -2^63 (then -2^63 + 1, ...) with PAD slots and zero RoPE rows in every later
    pass, while native gave the rules' 0 ("reset": seq_len 1, slot PAD) or L - 1 ("clamp")."""
    max_model_len = 40
    # Request 1 gathers positions[2], which pass 1 does not run (its tokens are [0, 2)).
    positions = i64(5, 7, gathered)
    table = torch.arange(1, 11, dtype=I32).view(2, 5)  # block size 16: 80 positions per row
    steps = specops.advance_draft_steps(
        i32(0, 1, 2), positions, i32(6, 30), i32(0, 2), i32(0, 0), [table], 16, rope_cache(64),
        num_steps=num_steps, num_actual_tokens=2, num_input_tokens=2, max_model_len=max_model_len,
        target_slot_mappings=[i64(3, 4)], past_max_model_len=rule)
    want = _passes([5, 7, gathered], [6, 30], [table.tolist()], 16, token_indices=[0, 2], num_steps=num_steps,
                   max_model_len=max_model_len, rule=rule)
    rope = rope_cache(64)
    for k, (want_positions, want_seq_lens, want_slots) in enumerate(want, start=1):
        where = f"pass {k + 1}"
        assert steps.positions[k, :2].tolist() == want_positions, where
        assert steps.seq_lens[k, :2].tolist() == want_seq_lens, where
        assert steps.slots[0][k, :2].tolist() == want_slots[0], where
        assert torch.equal(steps.cos_sin[k, :2], rope[want_positions]), where
    if gathered >= max_model_len - 1:
        assert steps.positions[1, 1].item() == (0 if rule == "reset" else max_model_len - 1)


@pytest.mark.parametrize("rule", ["reset", "clamp"])
def test_advance_draft_steps_agrees_with_advance_draft_step_at_the_limit(rule):
    """The two ops hold one rule: pass 2 of advance_draft_steps is advance_draft_step's step from
    the same gather, on every backend and alike, int32 and int64 positions at their tops (the
    top one gathered by request 1, outside pass 1's tokens)."""
    table = torch.arange(1, 15, dtype=I32).view(2, 7)  # 112 positions per row
    for positions in (i64(3, 8, INT64_MAX), torch.tensor([3, 8, INT32_MAX], dtype=I32)):
        results = []
        for name in BACKENDS:
            with specops.backend(name):
                steps = specops.advance_draft_steps(
                    i32(0, 1, 2), positions, i32(9, 12), i32(0, 2), i32(0, 0), [table], 16, rope_cache(128),
                    num_steps=3, num_actual_tokens=2, num_input_tokens=2, max_model_len=100,
                    target_slot_mappings=[i64(1, 2)], past_max_model_len=rule)
                seq_lens = i32(9, 12)
                single = specops.advance_draft_step(positions, seq_lens, [table], 16, max_model_len=100,
                                                    past_max_model_len=rule, token_indices=i32(0, 2))
            where = (name, positions.dtype)
            top = 0 if rule == "reset" else 99
            assert steps.positions[1, :2].tolist() == single.positions.tolist() == [4, top], where
            assert steps.seq_lens[1, :2].tolist() == seq_lens.tolist(), where
            assert steps.slots[0][1, :2].tolist() == single.slot_mappings[0].tolist(), where
            results.append([t.tolist() for t in (*steps[:8], *steps.slots, *steps.slot_pairs)])
        assert all(result == results[0] for result in results), (positions.dtype, BACKENDS)


# ---------------------------------------------------------------- 7. int32 out_slots past 2^31 - 1


def _int32_call(big: int, case: str, dtypes: tuple[torch.dtype, ...]):
    """Three groups (block size 8, tables of 2 columns), group `big` with an int32 out_slots; its
    pass-1 target slot of token 1 or a later pass's slot (request 0 reaches column 1 in pass 3)
    past 2^31 - 1, or exactly 2^31 - 1 (which fits)."""
    tables = [i32(3, 4, 7, 8).view(2, 2) for _ in dtypes]
    targets = [i64(10, 11, 12) for _ in dtypes]
    if case == "pass 1":
        targets[big] = i64(10, 2**31, 12)
    elif case == "pass 1 at 2^31 - 1":
        targets[big] = i64(10, INT32_MAX, 12)
    else:
        tables[big] = i32(3, 2**28, 7, 8).view(2, 2)  # block 2^28 of block size 8: slot 2^31
    out = empty_draft_steps(3, 4, 2, 2, 1, rope_cache(16), list(dtypes), torch.device("cpu"))
    for tensor in (*out[:8], *out.slots, *out.slot_pairs):
        tensor.fill_(SENTINEL)
    return dict(query_start_loc=i32(0, 2, 3), positions=i64(5, 6, 9), seq_lens=i32(7, 10), token_indices=i32(1, 2),
                num_rejected_tokens=i32(0, 0), block_tables=tables, block_sizes=8, rope_cos_sin_cache=rope_cache(16),
                num_steps=3, num_actual_tokens=3, num_input_tokens=4, max_model_len=14, target_slot_mappings=targets,
                num_reqs_padded=2, out=out)


LAYOUTS = [(I32,), (I64, I32), (I32, I64, I64), (I64, I64, I32)]


def _outputs(steps) -> tuple[torch.Tensor, ...]:
    return (*steps[:8], *steps.slots, *steps.slot_pairs)


@pytest.mark.parametrize("case", ["pass 1", "pass 3"])
@pytest.mark.parametrize("dtypes", LAYOUTS, ids=lambda dtypes: "-".join(str(d)[-5:] for d in dtypes))
def test_an_int32_out_slot_past_2_31_is_rejected_naming_out_slots_or_pad(case, dtypes):
    """Once: pass 1 stored a copied target slot past int32 as PAD with no error, while a later
    pass's slot raised naming slot_mappings[g], which this op does not take. The host op now
    rejects both before any write, naming out_slots[g] (and, for pass 1, the target slot's
    entry); the device paths write PAD (pair (-1, 7)) for both, as the hardening page says. The
    neighbours: an int64 out_slots holds the same slot on every backend, and 2^31 - 1 fits an
    int32 one; the single-step op keeps its own output's name, slot_mappings."""
    big = dtypes.index(I32)
    call = _int32_call(big, case, dtypes)
    before = [t.clone() for t in _outputs(call["out"])]
    message = rf"^out_slots\[{big}\] is int32, but " + (
        rf"target_slot_mappings\[{big}\]\[1\] = 2147483648 is past 2\^31 - 1" if case == "pass 1" else
        r"request 0 has slot 2147483648, past 2\^31 - 1")
    with specops.backend("native"), pytest.raises(ValueError, match=message):
        specops.advance_draft_steps(**call)
    assert all(torch.equal(a, b) for a, b in zip(before, _outputs(call["out"]))), "a rejected call wrote"
    k, t = (0, 1) if case == "pass 1" else (2, 0)
    for name in device_backends():
        call = _int32_call(big, case, dtypes)
        with specops.backend(name):
            steps = specops.advance_draft_steps(**call)
        assert steps.slots[big][k, t].item() == PAD, name
        assert steps.slot_pairs[big][k, t].tolist() == [-1, 7], name
        assert all(steps.slots[g][k, t].item() != PAD for g in range(len(dtypes)) if g != big), name
    fits = [("pass 1" if case == "pass 1" else "pass 3", tuple(I64 for _ in dtypes), 2**31)]
    if case == "pass 1":
        fits.append(("pass 1 at 2^31 - 1", dtypes, INT32_MAX))
    for variant, layout, slot in fits:
        results = []
        for name in BACKENDS:
            with specops.backend(name):
                steps = specops.advance_draft_steps(**_int32_call(big, variant, layout))
            assert steps.slots[big][k, t].item() == slot, (name, variant)
            assert steps.slot_pairs[big][k, t].tolist() == [slot // 8, slot % 8], (name, variant)
            results.append([s.tolist() for s in _outputs(steps)])
        assert all(result == results[0] for result in results), variant
    if case == "pass 3":
        table = i32(3, 2**28).view(1, 2)
        with specops.backend("native"), pytest.raises(ValueError, match=r"^slot_mappings\[0\] is int32, but request 0"):
            specops.advance_draft_step(i64(7), i32(8), [table], 8, max_model_len=40, slot_mappings=[i32(SENTINEL)])


# ---------------------------------------------------------------- 8. errors naming the caller's argument


def _steps_call(**change):
    call = dict(query_start_loc=i32(0, 1, 2), positions=i64(5, 7), seq_lens=i32(6, 8), token_indices=i32(0, 1),
                num_rejected_tokens=i32(0, 0), block_tables=[torch.arange(1, 9, dtype=I32).view(2, 4)], block_sizes=16,
                rope_cos_sin_cache=rope_cache(64), num_steps=3, num_actual_tokens=2, num_input_tokens=2,
                max_model_len=40, target_slot_mappings=[i64(1, 2)])
    call.update(change)
    return call


STEPS_MISTAKES = {
    "positions": [(None, "positions must be a tensor"), ([5, 7], "positions must be a tensor")],
    "rope_cos_sin_cache": [(None, "rope_cos_sin_cache must be a tensor"),
                           (rope_cache(8).view(-1), "rope_cos_sin_cache must be 2-D")],
    "target_slot_mappings": [(None, "target_slot_mappings must be a list of tensors"),
                             ([None], r"target_slot_mappings\[0\] must be a tensor"),
                             (i64(1, 2), "target_slot_mappings must be a list of tensors")],
    "block_tables": [(None, "block_tables must be a list of tensors"), ([None], r"block_tables\[0\] must be a tensor")],
}


@pytest.mark.parametrize("argument", STEPS_MISTAKES)
def test_advance_draft_steps_names_the_argument_with_or_without_out(backend, argument):
    """Once: without `out` these were AttributeError, TypeError or IndexError from the wrapper's
    allocation (block_tables=None and target_slot_mappings=None even with `out`). Both forms now
    raise a ValueError that starts with the caller's argument."""
    for value, message in STEPS_MISTAKES[argument]:
        for out in (None, specops.advance_draft_steps(**_steps_call())):
            call = _steps_call(**{argument: value})
            if out is not None:
                call["out"] = out
            with pytest.raises(ValueError, match=f"^{message}"):
                specops.advance_draft_steps(**call)


STEP_MISTAKES = {
    "positions": [(None, "positions must be a tensor"), ([5, 7], "positions must be a tensor")],
    "block_tables": [(None, "block_tables must be a list of tensors"), ([None], r"block_tables\[0\] must be a tensor")],
    "slot_mappings": [(i64(1, 2), "slot_mappings must be a list of tensors"),
                      ([None], r"slot_mappings\[0\] must be a tensor")],
}


@pytest.mark.parametrize("argument", STEP_MISTAKES)
def test_advance_draft_step_names_the_argument(backend, argument):
    """Once: positions=None (or a list) failed in the wrapper's allocation with AttributeError,
    block_tables=None with TypeError, a tensor for slot_mappings was taken as a list of its
    0-D rows. With and without the gather (token_indices), which allocates out_positions."""
    for value, message in STEP_MISTAKES[argument]:
        for gathered in (False, True):
            call = dict(positions=i64(5, 7), seq_lens=i32(6, 8), block_sizes=16, max_model_len=40,
                        block_tables=[torch.arange(1, 9, dtype=I32).view(2, 4)])
            if gathered:
                call["token_indices"] = i32(0, 1)
            call[argument] = value
            with pytest.raises(ValueError, match=f"^{message}"):
                specops.advance_draft_step(**call)
