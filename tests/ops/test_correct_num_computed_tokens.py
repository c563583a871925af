"""correct_num_computed_tokens: every backend against the independent expectation
(tests/expectations.py), in-place row moves,
aliasing, out-of-range rows, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from expectations import corrected_counts
from strategies import CorrectionInputs, assert_same, make_correction_inputs

import specops


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def expected_after(inputs: CorrectionInputs) -> CorrectionInputs:
    """The inputs with the outputs the independent expectation gives (reads see the old values)."""
    expected = inputs.clone()
    expected.num_computed_tokens, expected.num_accepted_tokens = corrected_counts(*inputs.args())
    return expected


def assert_corrected(actual: CorrectionInputs, expected: CorrectionInputs, what: str) -> None:
    assert_same(actual.num_computed_tokens, expected.num_computed_tokens, f"{what}: num_computed_tokens")
    assert_same(actual.num_accepted_tokens, expected.num_accepted_tokens, f"{what}: num_accepted_tokens")


def test_hand_computed(backend):
    # Row 0 continues row 2, which did not draft: host value. Row 1 continues row 0: 10 + 1.
    # Row 2 is new: host value. Row 3 continues row 1: 20 + 2.
    num_computed_tokens = i32([10, 20, 30, 40])
    num_accepted_tokens = i32([7, 7, 7, 7])
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, i32([2, 0, -1, 1]),
                                        valid_sampled_token_count=i32([1, 2, 3]),
                                        prev_num_draft_tokens=i32([2, 2, 0]),
                                        cpu_num_computed_tokens=i32([100, 200, 300, 400]))
    assert num_computed_tokens.tolist() == [100, 11, 300, 22]
    assert num_accepted_tokens.tolist() == [7, 1, 7, 2]


def test_rows_move_in_place_along_a_cycle(backend):
    # Row i continues row i + 1 (and the last row continues row 0): storing row i before reading
    # row i + 1 would chain the corrections. Every row must see the old counts.
    n = 6
    num_computed_tokens = i32([100 * (r + 1) for r in range(n)])
    num_accepted_tokens = torch.zeros(n, dtype=torch.int32)
    prev_positions = torch.tensor([(r + 1) % n for r in range(n)], dtype=torch.int64)
    valid = i32([1, 2, 3, 4, 5, 6])
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions, valid,
                                        torch.full((n,), 3, dtype=torch.int32), torch.zeros(n, dtype=torch.int32))
    assert num_computed_tokens.tolist() == [200 + 2, 300 + 3, 400 + 4, 500 + 5, 600 + 6, 100 + 1]
    assert num_accepted_tokens.tolist() == [2, 3, 4, 5, 6, 1]


@pytest.mark.parametrize("short", ["valid_sampled_token_count", "prev_num_draft_tokens", "num_computed_tokens"])
def test_rows_past_any_previous_buffer_take_the_host_value(backend, short):
    # Row 1 names previous row 3: inside two of the three buffers, past the short one.
    lengths = {"valid_sampled_token_count": 5, "prev_num_draft_tokens": 5, "num_computed_tokens": 5}
    lengths[short] = 3
    num_computed_tokens = i32([10, 20, 30, 40, 50][: lengths["num_computed_tokens"]])
    num_accepted_tokens = i32([7, 7, 7])
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, i32([0, 3, 99]),
                                        torch.ones(lengths["valid_sampled_token_count"], dtype=torch.int32),
                                        torch.ones(lengths["prev_num_draft_tokens"], dtype=torch.int32),
                                        i32([100, 200, 300]))
    assert num_computed_tokens.tolist()[:3] == [11, 200, 300]
    assert num_accepted_tokens.tolist() == [1, 7, 7]


# vllm-ascend's update_num_computed_tokens_for_batch_change (vllm_ascend/spec_decode/utils.py)
# gets int64 valid counts: its proposer counts them with valid_mask.sum(dim=1)
# (vllm_ascend/spec_decode/llm_base_proposer.py) and the runner keeps an int64 host copy
# (valid_sampled_token_count_cpu, vllm_ascend/worker/model_runner_v1.py). It adds them as
# `valid_counts.int()` and copies torch.where(...) of int64 values into the int32 outputs, so an
# int64 count enters by its low 32 bits; an int64 host count (cpu_num_computed_tokens) the same.
@pytest.mark.parametrize("valid_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("host_dtype", [torch.int32, torch.int64])
def test_int64_valid_and_host_counts_like_the_peer(backend, valid_dtype, host_dtype):
    num_computed_tokens = i32([10, 20, 30, 40])
    num_accepted_tokens = i32([7, 7, 7, 7])
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, i32([2, 0, -1, 1]),
                                        valid_sampled_token_count=torch.tensor([1, 2, 3], dtype=valid_dtype),
                                        prev_num_draft_tokens=i32([2, 2, 0]),
                                        cpu_num_computed_tokens=torch.tensor([100, 200, 300, 400], dtype=host_dtype))
    assert num_computed_tokens.tolist() == [100, 11, 300, 22]
    assert num_accepted_tokens.tolist() == [7, 1, 7, 2]
    assert num_computed_tokens.dtype == num_accepted_tokens.dtype == torch.int32


def test_int64_counts_enter_by_their_low_32_bits(backend):
    # The peer's `.int()`: 2^32 + 3 is 3, 2^31 is -2^31 (then 10 + that wraps); a host count of
    # 2^33 + 7 is 7, -1 stays -1.
    num_computed_tokens = i32([10, 20, 30, 40])
    num_accepted_tokens = i32([0, 0, 0, 0])
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, i32([0, 1, -1, -1]),
                                        torch.tensor([2**32 + 3, 2**31]), i32([1, 1]),
                                        torch.tensor([0, 0, 2**33 + 7, -1]))
    assert num_computed_tokens.tolist() == [13, 20 - 2**31, 7, -1]
    assert num_accepted_tokens.tolist() == [3, -(2**31), 0, 0]


@settings(max_examples=examples(60))
@given(
    num_rows=st.integers(0, 40),
    num_prev_rows=st.integers(0, 40),
    extra_buffer_rows=st.integers(0, 4),
    length_jitter=st.integers(0, 3),
    prev_dtype=st.sampled_from([torch.int32, torch.int64]),
    valid_dtype=st.sampled_from([torch.int32, torch.int64]),
    host_dtype=st.sampled_from([torch.int32, torch.int64]),
    seed=st.integers(0, 2**16),
)
def test_matches_expectation_on_random_inputs(backend, num_rows, num_prev_rows, extra_buffer_rows, length_jitter,
                                              prev_dtype, valid_dtype, host_dtype, seed):
    inputs = make_correction_inputs(torch.Generator().manual_seed(seed), num_rows=num_rows,
                                    num_prev_rows=num_prev_rows, extra_buffer_rows=extra_buffer_rows,
                                    length_jitter=length_jitter, prev_dtype=prev_dtype, valid_dtype=valid_dtype,
                                    host_dtype=host_dtype)
    expected = expected_after(inputs)
    specops.correct_num_computed_tokens(*inputs.args())
    assert_corrected(inputs, expected, backend)


# 1024 rows fit one Triton tile (registers); 1025 and 4096 go through its scratch buffer.
@pytest.mark.parametrize("num_rows", [1, 1024, 1025, 4096])
def test_large_batches(backend, num_rows):
    inputs = make_correction_inputs(torch.Generator().manual_seed(num_rows), num_rows=num_rows,
                                    num_prev_rows=num_rows, extra_buffer_rows=3, length_jitter=2,
                                    new_fraction=0.05, out_of_range_fraction=0.05)
    expected = expected_after(inputs)
    moved = (inputs.prev_positions >= 0) & (inputs.prev_positions != torch.arange(num_rows))
    assert num_rows == 1 or moved.sum() > num_rows // 2
    specops.correct_num_computed_tokens(*inputs.args())
    assert_corrected(inputs, expected, backend)


ALIASES = {
    # The scheduler's counts copied into the device buffer itself, before the call.
    "cpu_num_computed_tokens=num_computed_tokens": ("cpu_num_computed_tokens", "num_computed_tokens"),
    # The accepted counts written over the valid counts they are read from.
    "valid_sampled_token_count=num_accepted_tokens": ("valid_sampled_token_count", "num_accepted_tokens"),
    "prev_num_draft_tokens=num_accepted_tokens": ("prev_num_draft_tokens", "num_accepted_tokens"),
    "valid_sampled_token_count=num_computed_tokens": ("valid_sampled_token_count", "num_computed_tokens"),
}


@pytest.mark.parametrize("alias", list(ALIASES))
@pytest.mark.parametrize("num_rows", [37, 1500])
def test_inputs_aliasing_outputs_read_the_old_values(backend, alias, num_rows):
    input_name, output_name = ALIASES[alias]
    inputs = make_correction_inputs(torch.Generator().manual_seed(num_rows), num_rows=num_rows,
                                    num_prev_rows=num_rows)
    setattr(inputs, input_name, getattr(inputs, output_name))
    expected = expected_after(inputs)  # the clone separates the two: reads see the old values
    assert getattr(inputs, input_name) is getattr(inputs, output_name)
    specops.correct_num_computed_tokens(*inputs.args())
    assert_corrected(inputs, expected, f"{backend} {alias}")


def test_empty_inputs(backend):
    inputs = make_correction_inputs(torch.Generator().manual_seed(0), num_rows=0, num_prev_rows=5)
    before = inputs.clone()
    specops.correct_num_computed_tokens(*inputs.args())
    assert_corrected(inputs, before, backend)

    # No previous batch: every row takes the host value.
    num_computed_tokens = i32([1, 2, 3])
    num_accepted_tokens = i32([4, 5, 6])
    empty = torch.zeros(0, dtype=torch.int32)
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, i32([0, 1, -1]), empty, empty,
                                        i32([7, 8, 9]))
    assert num_computed_tokens.tolist() == [7, 8, 9]
    assert num_accepted_tokens.tolist() == [4, 5, 6]


def test_rows_past_n_are_untouched(backend):
    inputs = make_correction_inputs(torch.Generator().manual_seed(3), num_rows=5, num_prev_rows=5,
                                    extra_buffer_rows=6)
    before = inputs.clone()
    specops.correct_num_computed_tokens(*inputs.args())
    assert_same(inputs.num_computed_tokens[5:], before.num_computed_tokens[5:])
    assert_same(inputs.num_accepted_tokens[5:], before.num_accepted_tokens[5:])


def _opcheck_args(prev_dtype, counts_dtype=torch.int32):
    inputs = make_correction_inputs(torch.Generator().manual_seed(11), num_rows=9, num_prev_rows=7,
                                    extra_buffer_rows=2, length_jitter=1, prev_dtype=prev_dtype,
                                    valid_dtype=counts_dtype, host_dtype=counts_dtype)
    return inputs.args()


@pytest.mark.parametrize("prev_dtype,counts_dtype",
                         [(torch.int32, torch.int32), (torch.int64, torch.int32), (torch.int32, torch.int64)])
def test_opcheck(prev_dtype, counts_dtype):
    torch.library.opcheck(torch.ops.specops.correct_num_computed_tokens.default,
                          _opcheck_args(prev_dtype, counts_dtype))


def test_compiles_without_graph_break():
    args = _opcheck_args(torch.int32)

    def step(num_computed_tokens, num_accepted_tokens, prev_positions, valid, drafts, cpu):
        specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions, valid + 0,
                                            drafts, cpu)
        return num_computed_tokens + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    eager_args = [a.clone() for a in args]
    expected = step(*eager_args)
    actual = compiled(*args)
    assert_same(actual, expected)
    assert_same(args[0], eager_args[0])
    assert_same(args[1], eager_args[1])


def _valid_call():
    return dict(num_computed_tokens=i32([10, 20, 30]), num_accepted_tokens=i32([0, 0, 0]),
                prev_positions=i32([1, 0]), valid_sampled_token_count=i32([1, 2]),
                prev_num_draft_tokens=i32([1, 1]), cpu_num_computed_tokens=i32([5, 6]))


BAD_INPUTS = [
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([10, 20, 30]))),
    ("num_computed_tokens", dict(num_computed_tokens=i32([10]))),
    ("num_computed_tokens", dict(num_computed_tokens=i32([[10, 20, 30]]))),
    ("num_accepted_tokens", dict(num_accepted_tokens=torch.zeros(3))),
    ("num_accepted_tokens", dict(num_accepted_tokens=i32([0]))),
    ("prev_positions", dict(prev_positions=torch.tensor([1.0, 0.0]))),
    ("prev_positions", dict(prev_positions=i32([[1, 0]]))),
    ("valid_sampled_token_count", dict(valid_sampled_token_count=torch.tensor([1, 2], dtype=torch.int16))),
    ("prev_num_draft_tokens", dict(prev_num_draft_tokens=torch.tensor([1.0, 1.0]))),
    ("cpu_num_computed_tokens", dict(cpu_num_computed_tokens=i32([5]))),
    ("cpu_num_computed_tokens", dict(cpu_num_computed_tokens=torch.tensor([5.0, 6.0]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    before = {name: t.clone() for name, t in call.items()}
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.correct_num_computed_tokens(**call)
    for name in ("num_computed_tokens", "num_accepted_tokens"):
        assert torch.equal(call[name], before[name])


@pytest.mark.parametrize("view", ["same", "overlapping"])
def test_overlapping_outputs_are_rejected(backend, view):
    buffer = i32([10, 20, 30, 40])
    accepted = buffer if view == "same" else buffer[1:]
    before = buffer.clone()
    with pytest.raises(ValueError, match="num_accepted_tokens must not share memory with num_computed_tokens"):
        specops.correct_num_computed_tokens(buffer[:3], accepted, i32([1, 0]), i32([1, 2]), i32([1, 1]), i32([5, 6]))
    assert torch.equal(buffer, before)
