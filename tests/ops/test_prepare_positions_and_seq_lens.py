"""prepare_positions_and_seq_lens: every backend against the independent expectation
(tests/expectations.py), padding,
opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, device_backends, examples
from expectations import positions_and_seq_lens
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_same, batch_shapes, make_batch

import specops


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def expectation(num_computed_tokens, query_start_loc, positions_size, seq_lens_size, positions_dtype=torch.int64):
    positions = torch.full((positions_size,), 999, dtype=positions_dtype)
    seq_lens = torch.full((seq_lens_size,), 999, dtype=torch.int32)
    return positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, positions_size,
                                  seq_lens_size)


def test_hand_computed(backend):
    positions, seq_lens = specops.prepare_positions_and_seq_lens(i32([5, 0, 9]), i32([0, 3, 3, 4]))
    assert positions.tolist() == [5, 6, 7, 9]
    assert seq_lens.tolist() == [8, 0, 10]


def test_padding_is_zero(backend):
    positions = torch.full((7,), 55, dtype=torch.int32)
    seq_lens = torch.full((5,), 55, dtype=torch.int32)
    result = specops.prepare_positions_and_seq_lens(i32([5, 2, 40, 40]), i32([0, 2, 3]), positions=positions,
                                                    seq_lens=seq_lens, num_tokens_padded=6, num_reqs_padded=4)
    assert result[0] is positions and result[1] is seq_lens
    assert positions.tolist() == [5, 6, 2, 0, 0, 0, 55]
    assert seq_lens.tolist() == [7, 3, 0, 0, 55]


@settings(max_examples=examples(40))
@given(shape=batch_shapes(max_reqs=10, max_query_len=9, max_context=500),
       positions_dtype=st.sampled_from([torch.int64, torch.int32]), extra_tokens=st.integers(0, 5),
       extra_reqs=st.integers(0, 3), extra_counts=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_matches_expectation_on_random_batches(backend, shape, positions_dtype, extra_tokens, extra_reqs,
                                               extra_counts, seed):
    query_lens, context_lens = shape
    batch = make_batch(torch.Generator().manual_seed(seed), query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=16)
    counts = torch.cat([torch.tensor(context_lens, dtype=torch.int32), torch.full((extra_counts,), 77, dtype=torch.int32)])
    positions_size, seq_lens_size = batch.num_tokens + extra_tokens, batch.num_reqs + extra_reqs
    positions = torch.full((positions_size,), 555, dtype=positions_dtype)
    seq_lens = torch.full((seq_lens_size,), 555, dtype=torch.int32)
    specops.prepare_positions_and_seq_lens(counts, batch.query_start_loc, positions=positions, seq_lens=seq_lens)
    expected_positions, expected_seq_lens = expectation(counts, batch.query_start_loc, positions_size, seq_lens_size,
                                                      positions_dtype)
    assert_same(positions, expected_positions, backend)
    assert_same(seq_lens, expected_seq_lens, backend)
    assert_same(positions[: batch.num_tokens], batch.positions.to(positions_dtype), "positions from the counts")
    assert_same(seq_lens[: batch.num_reqs], batch.seq_lens, "seq_lens from the counts")


def test_many_tiles(backend):
    generator = torch.Generator().manual_seed(4)
    query_lens = torch.randint(1, 300, (30,), generator=generator).tolist()
    context_lens = torch.randint(0, 5000, (30,), generator=generator).tolist()
    batch = make_batch(generator, query_lens=query_lens, context_lens=context_lens, tokens_per_block_row=16)
    assert batch.num_tokens > 3 * 1024
    counts = torch.tensor(context_lens, dtype=torch.int32)
    positions, seq_lens = specops.prepare_positions_and_seq_lens(counts, batch.query_start_loc,
                                                                 num_tokens_padded=batch.num_tokens + 50,
                                                                 num_reqs_padded=1100)
    assert_same(positions[: batch.num_tokens], batch.positions)
    assert (positions[batch.num_tokens:] == 0).all()
    assert_same(seq_lens[:30], batch.seq_lens)
    assert (seq_lens[30:] == 0).all()


def test_clears_a_stale_tail(backend):
    positions = torch.empty(40, dtype=torch.int64)
    seq_lens = torch.empty(8, dtype=torch.int32)
    address = positions.data_ptr(), seq_lens.data_ptr()
    specops.prepare_positions_and_seq_lens(torch.full((8,), 100, dtype=torch.int32), i32(range(0, 40, 5)),
                                           positions=positions, seq_lens=seq_lens)
    specops.prepare_positions_and_seq_lens(i32([3, 4]), i32([0, 1, 3]), positions=positions, seq_lens=seq_lens)
    assert (positions.data_ptr(), seq_lens.data_ptr()) == address
    assert positions.tolist() == [3, 4, 5] + [0] * 37
    assert seq_lens.tolist() == [4, 6] + [0] * 6


def test_empty_batch(backend):
    positions, seq_lens = specops.prepare_positions_and_seq_lens(i32([]), i32([0]))
    assert positions.numel() == 0 and seq_lens.numel() == 0
    positions, seq_lens = specops.prepare_positions_and_seq_lens(i32([]), i32([0]), num_tokens_padded=3,
                                                                 num_reqs_padded=2)
    assert positions.tolist() == [0, 0, 0] and seq_lens.tolist() == [0, 0]


def test_request_indexed_counts_hand_computed(backend):
    # Counts kept per request row (a runner's persistent state): batch request r reads row
    # idx_mapping[r]; a request without a row (-1) has computed nothing.
    counts = i32([100, 7, 250, 40])
    positions, seq_lens = specops.prepare_positions_and_seq_lens(
        counts, i32([0, 2, 3, 5]), idx_mapping=torch.tensor([2, -1, 1]), num_tokens_padded=6, num_reqs_padded=4)
    assert positions.tolist() == [250, 251, 0, 7, 8, 0]
    assert seq_lens.tolist() == [252, 1, 9, 0]


@settings(max_examples=examples(25))
@given(query_lens=st.lists(st.integers(0, 5), max_size=8), num_rows=st.integers(1, 10),
       idx_dtype=st.sampled_from([torch.int32, torch.int64]), seed=st.integers(0, 2**16))
def test_request_indexed_counts_match_the_contract(backend, query_lens, num_rows, idx_dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 1000, (num_rows,), dtype=torch.int32, generator=generator)
    idx_mapping = torch.randint(-1, num_rows, (len(query_lens),), generator=generator).to(idx_dtype)
    query_start_loc = i32([0] + torch.tensor(query_lens, dtype=torch.int64).cumsum(0).tolist())
    num_tokens = sum(query_lens)
    positions, seq_lens = specops.prepare_positions_and_seq_lens(
        counts, query_start_loc, idx_mapping=idx_mapping, num_tokens_padded=num_tokens + 2,
        num_reqs_padded=len(query_lens) + 1)
    expected_positions, expected_seq_lens = [], []
    for row, query_len in zip(idx_mapping.tolist(), query_lens):
        count = int(counts[row]) if row >= 0 else 0
        expected_positions += range(count, count + query_len)
        expected_seq_lens.append(count + query_len)
    assert positions.tolist() == expected_positions + [0, 0]
    assert seq_lens.tolist() == expected_seq_lens + [0]


def test_native_rejects_a_row_past_the_counts_and_writes_nothing():
    call = dict(_valid_call(), idx_mapping=torch.tensor([1, 2]))
    before = call["positions"].clone(), call["seq_lens"].clone()
    with specops.backend("native"), pytest.raises(ValueError, match="idx_mapping"):
        specops.prepare_positions_and_seq_lens(**call)
    assert torch.equal(call["positions"], before[0]) and torch.equal(call["seq_lens"], before[1])


def test_device_paths_count_zero_for_a_row_past_the_counts():
    for name in device_backends():
        with specops.backend(name):
            positions, seq_lens = specops.prepare_positions_and_seq_lens(**dict(_valid_call(),
                                                                            idx_mapping=torch.tensor([1, 2])))
        assert positions.tolist() == [9, 10, 0, 0] and seq_lens.tolist() == [11, 1, 0], name


def _opcheck_args(positions_dtype, idx_mapping=None):
    counts = i32([10, 0, 300, 7, 1])
    query_start_loc = i32([0, 4, 5, 5, 9])
    return (counts, query_start_loc, torch.empty(12, dtype=positions_dtype), torch.empty(6, dtype=torch.int32), 11, 5,
            idx_mapping)


@pytest.mark.parametrize("idx_mapping", [None, torch.tensor([4, -1, 0, 2])])
@pytest.mark.parametrize("positions_dtype", [torch.int64, torch.int32])
def test_opcheck(positions_dtype, idx_mapping):
    torch.library.opcheck(torch.ops.specops.prepare_positions_and_seq_lens.default,
                          _opcheck_args(positions_dtype, idx_mapping))


def test_compiles_without_graph_break():
    counts, query_start_loc, positions, seq_lens, padded_tokens, padded_reqs, _ = _opcheck_args(torch.int64)
    idx_mapping = i32([3, 2, -1, 0])

    def step(counts, query_start_loc, positions, seq_lens):
        specops.prepare_positions_and_seq_lens(counts + 1, query_start_loc, positions=positions, seq_lens=seq_lens,
                                               num_tokens_padded=padded_tokens, num_reqs_padded=padded_reqs,
                                               idx_mapping=idx_mapping)
        return positions * 2, seq_lens + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(counts, query_start_loc, positions.clone(), seq_lens.clone())
    actual = compiled(counts, query_start_loc, positions, seq_lens)
    assert_same(actual[0], expected[0])
    assert_same(actual[1], expected[1])


def _valid_call():
    return dict(num_computed_tokens=i32([4, 9]), query_start_loc=i32([0, 2, 3]),
                positions=torch.full((4,), 55, dtype=torch.int64), seq_lens=torch.full((3,), 55, dtype=torch.int32),
                num_tokens_padded=4, num_reqs_padded=3)


BAD_INPUTS = [
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([4, 9]))),
    ("num_computed_tokens", dict(num_computed_tokens=i32([4]))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 2, 3]))),
    ("query_start_loc", dict(query_start_loc=i32([[0, 2, 3]]))),
    ("positions", dict(positions=torch.zeros(4))),
    ("positions", dict(positions=torch.zeros(2, 2, dtype=torch.int64))),
    ("seq_lens", dict(seq_lens=torch.zeros(3, dtype=torch.int64))),
    ("num_tokens_padded", dict(num_tokens_padded=5)),
    ("num_reqs_padded", dict(num_reqs_padded=1)),
    ("num_reqs_padded", dict(num_reqs_padded=4)),
    ("idx_mapping", dict(idx_mapping=i32([0]))),
    ("idx_mapping", dict(idx_mapping=torch.tensor([0.0, 1.0]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    outputs = call["positions"], call["seq_lens"]
    before = [t.clone() for t in outputs]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.prepare_positions_and_seq_lens(**call)
    assert all(torch.equal(t, b) for t, b in zip(outputs, before))


def test_outputs_sharing_memory_are_rejected(backend):
    buffer = torch.zeros(8, dtype=torch.int32)
    with pytest.raises(ValueError, match="positions must not share memory with seq_lens"):
        specops.prepare_positions_and_seq_lens(i32([4, 9]), i32([0, 2, 3]), positions=buffer[:4],
                                               seq_lens=buffer[3:6])
    with pytest.raises(ValueError, match="seq_lens must not share memory with num_computed_tokens"):
        specops.prepare_positions_and_seq_lens(buffer[:2], i32([0, 2, 3]), positions=torch.zeros(3, dtype=torch.int64),
                                               seq_lens=buffer[:2])


VALUE_ERRORS = [
    ("query_start_loc", dict(query_start_loc=i32([0, 3, 2]))),
    ("query_start_loc", dict(query_start_loc=i32([1, 2, 3]))),
    ("num_tokens_padded", dict(query_start_loc=i32([0, 2, 5]))),  # 5 tokens, 4 padded
]


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VALUE_ERRORS)])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = _valid_call()
    call.update(change)
    before = call["positions"].clone(), call["seq_lens"].clone()
    with pytest.raises(ValueError, match=argument):
        specops.prepare_positions_and_seq_lens(**call)
    assert torch.equal(call["positions"], before[0]) and torch.equal(call["seq_lens"], before[1])


def test_device_paths_never_write_past_the_padding():
    # query_start_loc says 5 tokens, the caller pads to 4: device kernels cannot raise, so
    # they write the 4 positions they may and nothing beyond.
    call = _valid_call()
    call.update(query_start_loc=i32([0, 2, 5]), positions=torch.full((6,), 55, dtype=torch.int64))
    for name in device_backends():
        positions = call["positions"].clone()
        with specops.backend(name):
            specops.prepare_positions_and_seq_lens(**{**call, "positions": positions})
        assert positions.tolist() == [4, 5, 9, 10, 55, 55], name


def test_a_negative_token_count_has_no_real_token_on_device_paths():
    """query_start_loc[R] < 0: once the reference raised torch.arange's error (in the fused op
    after it had written the count correction). Device paths: no token is real, so every
    position is 0 and seq_lens take the (negative) query lengths; the host op rejects it."""
    query_start_loc = torch.tensor([0, -3], dtype=torch.int32)
    for backend in BACKENDS:
        positions, seq_lens = torch.full((2,), 55), torch.full((2,), 55, dtype=torch.int32)
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match="query_start_loc must be non-decreasing"):
                    specops.prepare_positions_and_seq_lens(torch.tensor([7], dtype=torch.int32), query_start_loc,
                                                           positions=positions, seq_lens=seq_lens)
                assert positions.tolist() == [55, 55] and seq_lens.tolist() == [55, 55]
                continue
            specops.prepare_positions_and_seq_lens(torch.tensor([7], dtype=torch.int32), query_start_loc,
                                                   positions=positions, seq_lens=seq_lens)
        assert positions.tolist() == [0, 0], backend
        assert seq_lens.tolist() == [7 - 3, 0], backend
