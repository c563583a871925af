"""correct_optimistic_seq_lens: every backend against the independent expectation
(tests/expectations.py), aliasing,
out-of-range rows, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from expectations import corrected_seq_lens
from strategies import assert_same, make_correction_inputs

import specops


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def random_call(seed, num_rows, num_prev_rows, length_jitter=2, prev_dtype=torch.int32, extra_rows=0):
    inputs = make_correction_inputs(torch.Generator().manual_seed(seed), num_rows=num_rows,
                                    num_prev_rows=num_prev_rows, length_jitter=length_jitter, prev_dtype=prev_dtype)
    seq_lens = inputs.cpu_num_computed_tokens[: num_rows + extra_rows].clone()
    return dict(seq_lens_cpu=seq_lens, prev_positions=inputs.prev_positions,
                valid_sampled_token_count=inputs.valid_sampled_token_count,
                prev_num_draft_tokens=inputs.prev_num_draft_tokens)


def expected_seq_lens(call):
    return corrected_seq_lens(**call)


def test_hand_computed(backend):
    # Row 0 continues row 1 (3 drafts, 2 valid: 3 + 1 - 2 = 2 rejected); row 1 continues row 0,
    # which did not draft; row 2 is new; row 3 names a row past the previous batch.
    seq_lens = i32([50, 60, 70, 80])
    specops.correct_optimistic_seq_lens(seq_lens, i32([1, 0, -1, 2]), valid_sampled_token_count=i32([1, 2]),
                                        prev_num_draft_tokens=i32([0, 3]))
    assert seq_lens.tolist() == [48, 60, 70, 80]


# vllm-ascend tests/ut/spec_decode/test_utils.py, cases of correct_optimistic_seq_lens_cpu. The
# peer takes (seq_lens, prev_positions, prev_num_draft_tokens, valid_count, num_reqs); specops
# takes the valid counts before the drafts, and n = prev_positions.numel() in place of num_reqs.
# Its test buffers are int32 and int64 alike.
PEER_CASES = {
    # matches_gpu_seq_lens: prev computed [100, 200, 50, 0, 300], scheduled [3, 5, 1, 1, 4]; the
    # optimistic lens add drafts + 1, the truth adds valid = accepted + 1.
    "matches_gpu_seq_lens": ([106, 210, 52, 2, 308], [0, 1, 2, -1, 4], [3, 1, 1, 1, 2], [2, 4, 0, 0, 3],
                             [106, 206, 52, 2, 306]),
    "no_participants": ([10, 20, 30], [-1, -1, -1], [0, 0, 0], [0, 0, 0], [10, 20, 30]),
    "all_accepted": ([105, 208, 51], [0, 1, 2], [3, 4, 2], [2, 3, 1], [105, 208, 51]),
    "all_rejected": ([105, 208, 51], [0, 1, 2], [1, 1, 1], [2, 3, 1], [103, 205, 50]),
    "in_place_mutation": ([100, 200], [0, -1], [2, 0], [2, 0], [99, 200]),
    # partial_batch: num_reqs = 2 of a 4-entry buffer; the tail is untouched.
    "partial_batch": ([100, 200, 999, 999], [0, 1], [2, 2, 0, 0], [2, 1, 0, 0], [99, 200, 999, 999]),
}


# The runner calls the peer with its int64 host copy of the valid counts
# (valid_sampled_token_count_cpu, vllm_ascend/worker/model_runner_v1.py), so every case also runs
# with int64 valid counts.
@pytest.mark.parametrize("valid_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("case", sorted(PEER_CASES))
def test_peer_unit_test_cases(backend, case, dtype, valid_dtype):
    seq_lens, prev_positions, valid, drafts, expected = PEER_CASES[case]
    seq_lens = torch.tensor(seq_lens, dtype=dtype)
    specops.correct_optimistic_seq_lens(seq_lens, i32(prev_positions), torch.tensor(valid, dtype=valid_dtype),
                                        i32(drafts))
    assert seq_lens.dtype == dtype
    assert seq_lens.tolist() == expected


def test_rejected_count_in_the_valid_counts_width_like_the_peer(backend):
    """correct_optimistic_seq_lens_cpu (vllm_ascend/spec_decode/utils.py) computes
    prev_drafts + 1 - valid_counts with numpy's promotion: prev_drafts + 1 stays int32 (it wraps),
    the difference with int64 valid counts is int64, then astype(seq_lens.dtype): int32 seq_lens
    take its low 32 bits."""
    drafts, prev_positions = i32([2**31 - 1, 3]), i32([0, 1])
    wide = torch.tensor([2**40, 100], dtype=torch.int64)
    specops.correct_optimistic_seq_lens(wide, prev_positions, torch.tensor([1, 2**32 + 4]), drafts)
    # (2^31 - 1) + 1 is -2^31 in int32: 2^40 - (-2^31 - 1); 100 - (3 + 1 - 2^32 - 4), in int64.
    assert wide.tolist() == [2**40 + 2**31 + 1, 100 + 2**32]
    narrow = i32([5, 100])
    specops.correct_optimistic_seq_lens(narrow, prev_positions, torch.tensor([1, 2**32 + 4]), drafts)
    assert narrow.tolist() == [5 - 2**31 + 1, 100]  # the low 32 bits of the int64 results
    # int32 valid counts: the rejected count wraps in int32, then is sign-extended:
    # 3 + 1 - (-2^31) is -2^31 + 4 in int32.
    wide = torch.tensor([2**40, 100], dtype=torch.int64)
    specops.correct_optimistic_seq_lens(wide, prev_positions, i32([1, -(2**31)]), drafts)
    assert wide.tolist() == [2**40 - 2**31 + 1, 100 + 2**31 - 4]


def test_agrees_with_the_device_correction_like_the_peer(backend):
    """vllm-ascend's test_cpu_and_gpu_corrections_agree: the corrected host seq_lens equal the
    corrected device counts plus this step's scheduled tokens."""
    prev_computed = [100, 250, 80, 0, 410, 5]
    drafts, accepted = [2, 4, 0, 0, 3, 1], [2, 1, 0, 0, 0, 1]
    valid = [a + 1 for a in accepted]
    scheduled = [3, 5, 1, 1, 4, 2]
    prev_positions = i32([0, 1, 2, -1, 4, 5])
    optimistic_computed = [c + d + 1 for c, d in zip(prev_computed, drafts)]
    seq_lens = torch.tensor([c + s for c, s in zip(optimistic_computed, scheduled)])  # int64, as the peer's
    specops.correct_optimistic_seq_lens(seq_lens, prev_positions, i32(valid), i32(drafts))
    counts = i32(prev_computed)
    specops.correct_num_computed_tokens(counts, i32([0] * 6), prev_positions, i32(valid), i32(drafts),
                                        i32(optimistic_computed))
    assert seq_lens.tolist() == [c + s for c, s in zip(counts.tolist(), scheduled)]


@settings(max_examples=examples(60))
@given(num_rows=st.integers(0, 40), num_prev_rows=st.integers(0, 40), length_jitter=st.integers(0, 3),
       prev_dtype=st.sampled_from([torch.int32, torch.int64]), extra_rows=st.integers(0, 3),
       valid_dtype=st.sampled_from([torch.int32, torch.int64]), seed=st.integers(0, 2**16))
def test_matches_expectation_on_random_inputs(backend, num_rows, num_prev_rows, length_jitter, prev_dtype, extra_rows,
                                              valid_dtype, seed):
    call = random_call(seed, num_rows, num_prev_rows, length_jitter, prev_dtype, extra_rows)
    if seed % 2:  # a runner's int64 host copy
        call["seq_lens_cpu"] = call["seq_lens_cpu"].long()
    call["valid_sampled_token_count"] = call["valid_sampled_token_count"].to(valid_dtype)
    expected = expected_seq_lens(call)
    specops.correct_optimistic_seq_lens(**call)
    assert_same(call["seq_lens_cpu"], expected, backend)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("num_rows", [1024, 1025, 4096])
def test_large_batches(backend, num_rows, dtype):
    call = random_call(num_rows, num_rows, num_rows)
    call["seq_lens_cpu"] = call["seq_lens_cpu"].to(dtype)
    expected = expected_seq_lens(call)
    assert not torch.equal(expected, call["seq_lens_cpu"])
    specops.correct_optimistic_seq_lens(**call)
    assert_same(call["seq_lens_cpu"], expected, backend)


@pytest.mark.parametrize("input_name", ["valid_sampled_token_count", "prev_num_draft_tokens"])
@pytest.mark.parametrize("num_rows", [37, 1500])
def test_seq_lens_aliasing_an_input_reads_the_old_values(backend, input_name, num_rows):
    call = random_call(num_rows, num_rows, num_rows, length_jitter=0)
    call[input_name] = call["seq_lens_cpu"]
    expected = expected_seq_lens(call)
    specops.correct_optimistic_seq_lens(**call)
    assert_same(call["seq_lens_cpu"], expected, backend)


def test_empty_inputs(backend):
    seq_lens = i32([5, 6])
    specops.correct_optimistic_seq_lens(seq_lens, i32([]), i32([1]), i32([1]))
    assert seq_lens.tolist() == [5, 6]
    specops.correct_optimistic_seq_lens(seq_lens, i32([0, 1]), i32([]), i32([]))
    assert seq_lens.tolist() == [5, 6]


def _opcheck_args():
    call = random_call(5, 9, 7, extra_rows=2)
    return (call["seq_lens_cpu"], call["prev_positions"], call["valid_sampled_token_count"],
            call["prev_num_draft_tokens"])


@pytest.mark.parametrize("valid_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_opcheck(dtype, valid_dtype):
    seq_lens, prev_positions, valid, drafts = _opcheck_args()
    torch.library.opcheck(torch.ops.specops.correct_optimistic_seq_lens.default,
                          (seq_lens.to(dtype), prev_positions, valid.to(valid_dtype), drafts))


def test_int64_lengths_past_int32(backend):
    seq_lens = torch.tensor([2**40, 2**33 + 3])
    specops.correct_optimistic_seq_lens(seq_lens, i32([0, 1]), i32([1, 2]), i32([3, 1]))
    assert seq_lens.tolist() == [2**40 - 3, 2**33 + 3]


def test_compiles_without_graph_break():
    seq_lens, prev_positions, valid, drafts = _opcheck_args()

    def step(seq_lens, prev_positions, valid, drafts):
        specops.correct_optimistic_seq_lens(seq_lens, prev_positions, valid + 0, drafts)
        return seq_lens * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(seq_lens.clone(), prev_positions, valid, drafts)
    assert_same(compiled(seq_lens, prev_positions, valid, drafts), expected)


BAD_INPUTS = [
    ("seq_lens_cpu", dict(seq_lens_cpu=torch.tensor([5, 6], dtype=torch.int16))),
    ("seq_lens_cpu", dict(seq_lens_cpu=i32([5]))),
    ("seq_lens_cpu", dict(seq_lens_cpu=i32([[5, 6]]))),
    ("prev_positions", dict(prev_positions=torch.tensor([0.0, 1.0]))),
    ("valid_sampled_token_count", dict(valid_sampled_token_count=torch.tensor([1, 1], dtype=torch.int16))),
    ("prev_num_draft_tokens", dict(prev_num_draft_tokens=i32([[1, 1]]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = dict(seq_lens_cpu=i32([5, 6]), prev_positions=i32([1, 0]), valid_sampled_token_count=i32([1, 1]),
                prev_num_draft_tokens=i32([1, 1]))
    call.update(change)
    before = call["seq_lens_cpu"].clone()
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.correct_optimistic_seq_lens(**call)
    assert torch.equal(call["seq_lens_cpu"], before)
