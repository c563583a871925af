"""pcp_local_inputs: a PCP rank's input ids, positions and seq_lens. The worked example (vLLM's
partition_batch on each rank), random layouts on every backend against an independent
expectation, out-of-range values on the device paths, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from pcp_expectations import expected_local_inputs
from strategies import assert_rejected_without_writes, assert_same
from test_pcp_partition import layout, pcp_batches

import specops

STALE = 4321
T, F = True, False


def example_3():
    lay = layout([1, 1, 9, 1], [10, 20, 4, 30], [F, F, T, F], 2, shard_decode_requests=True)
    ids = 500 + torch.arange(12)
    positions = torch.tensor([10, 20, 4, 5, 6, 7, 8, 9, 10, 11, 12, 30])
    return lay, ids, positions


def test_example_3_on_each_rank(backend):
    lay, ids, positions = example_3()
    expected = {0: ([500, 511, 502, 503, 504, 0, 0], [10, 30, 4, 5, 6, 0, 0], [11, 31, 7]),
                1: ([501, 505, 506, 507, 508, 509, 510], [20, 7, 8, 9, 10, 11, 12], [21, 10, 13])}
    for k, (want_ids, want_pos, want_seq) in expected.items():
        rank = lay.rank(k)
        out = specops.pcp_local_inputs(ids, positions, rank.local_gather_idx, rank.local_query_start_loc,
                                       num_local_tokens=rank.num_tokens)
        assert isinstance(out, specops.PCPLocalInputs)
        assert out.input_ids.tolist() == want_ids and out.positions.tolist() == want_pos
        assert out.seq_lens.tolist() == want_seq


def test_positions_are_int64_unless_the_buffer_says_otherwise(backend):
    lay, ids, positions = example_3()
    rank = lay.rank(1)
    out = specops.pcp_local_inputs(ids.int(), positions.int(), rank.local_gather_idx, rank.local_query_start_loc,
                                   num_local_tokens=rank.num_tokens)
    assert out.input_ids.dtype == torch.int32 and out.positions.dtype == torch.int64
    assert out.positions.tolist() == [20, 7, 8, 9, 10, 11, 12] and out.seq_lens.tolist() == [21, 10, 13]


def test_buffers_are_padded_to_their_end_and_seq_lens_to_num_reqs_padded(backend):
    lay, ids, positions = example_3()
    rank = lay.rank(0)
    input_ids = torch.full((10,), STALE, dtype=torch.int64)
    pos = torch.full((9,), STALE, dtype=torch.int64)
    seq_lens = torch.full((6,), STALE, dtype=torch.int32)
    out = specops.pcp_local_inputs(ids, positions, rank.local_gather_idx, rank.local_query_start_loc,
                                   num_local_tokens=rank.num_tokens, input_ids=input_ids, positions=pos,
                                   seq_lens=seq_lens, num_reqs_padded=5)
    assert out.input_ids is input_ids and out.positions is pos and out.seq_lens is seq_lens
    assert input_ids.tolist() == [500, 511, 502, 503, 504] + [0] * 5
    assert pos.tolist() == [10, 30, 4, 5, 6] + [0] * 4
    assert seq_lens.tolist() == [11, 31, 7, 0, 0, STALE]


@settings(max_examples=examples(25))
@given(batch=pcp_batches(), P=st.integers(1, 4), shard=st.booleans(), extra=st.integers(0, 3),
       ids_dtype=st.sampled_from([torch.int32, torch.int64]), pos_dtype=st.sampled_from([torch.int64, torch.int32]),
       out_pos_dtype=st.sampled_from([torch.int64, torch.int32]), seed=st.integers(0, 2**16))
def test_every_rank_matches_the_expectation(backend, batch, P, shard, extra, ids_dtype, pos_dtype, out_pos_dtype,
                                            seed):
    q, c, f = batch
    lay = layout(q, c, f, P, shard_decode_requests=shard)
    gen = torch.Generator().manual_seed(seed)
    total = sum(q)
    global_ids = torch.randint(0, 1000, (total + extra,), generator=gen, dtype=ids_dtype)
    global_positions = torch.randint(0, 5000, (total + extra,), generator=gen, dtype=pos_dtype)
    for k in range(P):
        rank = lay.rank(k)
        L = rank.local_gather_idx.numel()
        n = rank.local_query_start_loc.numel() - 1
        buffers = dict(input_ids=torch.full((L + extra,), STALE, dtype=ids_dtype),
                       positions=torch.full((L + extra,), STALE, dtype=out_pos_dtype),
                       seq_lens=torch.full((n + extra,), STALE, dtype=torch.int32))
        specops.pcp_local_inputs(global_ids, global_positions, rank.local_gather_idx, rank.local_query_start_loc,
                                 num_local_tokens=rank.num_tokens, num_reqs_padded=n + extra // 2, **buffers)
        ids, pos, seq = expected_local_inputs(global_ids.tolist(), global_positions.tolist(),
                                              rank.local_gather_idx.tolist(), rank.local_query_start_loc.tolist(),
                                              rank.num_tokens, L + extra, L + extra, n + extra, n + extra // 2)
        seq = [STALE if v is None else v for v in seq]
        assert_same(buffers["input_ids"], torch.tensor(ids, dtype=ids_dtype), f"input_ids rank {k}")
        assert_same(buffers["positions"], torch.tensor(pos, dtype=out_pos_dtype), f"positions rank {k}")
        assert_same(buffers["seq_lens"], torch.tensor(seq, dtype=torch.int32), f"seq_lens rank {k}")


def test_out_of_range_indices_read_zero_on_the_device_paths():
    ids, positions = torch.arange(100, 106), torch.arange(10, 16)
    gather = torch.tensor([5, 6, -1, 2**40, 0])
    lqsl = torch.tensor([0, 2, 4], dtype=torch.int32)
    for name in device_backends():
        with specops.backend(name):
            out = specops.pcp_local_inputs(ids, positions, gather, lqsl, num_local_tokens=4)
        assert out.input_ids.tolist() == [105, 0, 0, 0, 0], name
        assert out.positions.tolist() == [15, 0, 0, 0, 0], name
        assert out.seq_lens.tolist() == [1, 1], name


def test_empty_global_tensors_on_the_device_paths():
    empty = torch.empty(0, dtype=torch.int64)
    for name in device_backends():
        with specops.backend(name):
            out = specops.pcp_local_inputs(empty, empty, torch.zeros(3, dtype=torch.int64),
                                           torch.tensor([0, 0], dtype=torch.int32), num_local_tokens=0)
        assert out.input_ids.tolist() == [0, 0, 0] and out.seq_lens.tolist() == [0], name


def _opcheck_args():
    lay, ids, positions = example_3()
    rank = lay.rank(1)
    return (ids, positions, rank.local_gather_idx.clone(), rank.local_query_start_loc.clone(), rank.num_tokens,
            torch.empty(8, dtype=torch.int64), torch.empty(8, dtype=torch.int64), torch.empty(4, dtype=torch.int32), 4)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.pcp_local_inputs.default, _opcheck_args())


def test_compiles_without_graph_break():
    ids, positions, gather, lqsl, N, input_ids, pos, seq_lens, padded = _opcheck_args()

    def step(ids, positions, input_ids, pos, seq_lens):
        specops.pcp_local_inputs(ids + 1, positions, gather, lqsl, num_local_tokens=N, input_ids=input_ids,
                                 positions=pos, seq_lens=seq_lens, num_reqs_padded=padded)
        return input_ids * 2, seq_lens + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(ids, positions, input_ids.clone(), pos.clone(), seq_lens.clone())
    got = compiled(ids, positions, input_ids, pos, seq_lens)
    for a, b in zip(got, expected):
        assert_same(a, b)


def _call():
    lay, ids, positions = example_3()
    rank = lay.rank(0)
    return dict(global_input_ids=ids, global_positions=positions, local_gather_idx=rank.local_gather_idx.clone(),
                local_query_start_loc=rank.local_query_start_loc.clone(), num_local_tokens=rank.num_tokens,
                input_ids=torch.full((7,), STALE, dtype=torch.int64), positions=torch.full((7,), STALE),
                seq_lens=torch.full((3,), STALE, dtype=torch.int32))


BAD = [
    ("input_ids", lambda call: call.update(input_ids=torch.full((6,), STALE, dtype=torch.int64))),
    ("input_ids", lambda call: call.update(input_ids=torch.full((7,), STALE, dtype=torch.int32))),
    ("positions", lambda call: call.update(positions=torch.full((7,), STALE, dtype=torch.int16))),
    ("seq_lens", lambda call: call.update(seq_lens=torch.full((2,), STALE, dtype=torch.int32))),
    ("num_local_tokens", lambda call: call.update(num_local_tokens=8)),
    ("num_reqs_padded", lambda call: call.update(num_reqs_padded=4)),
    ("local_gather_idx", lambda call: call.update(local_gather_idx=call["local_gather_idx"].int())),
    ("local_query_start_loc", lambda call: call.update(local_query_start_loc=torch.empty(0, dtype=torch.int32))),
    ("positions", lambda call: call.update(positions=call["global_positions"][:7])),
]


@pytest.mark.parametrize("argument,change", BAD, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _call()
    change(call)
    assert_rejected_without_writes(specops.pcp_local_inputs, call, argument=argument,
                                   written=("input_ids", "seq_lens"))


NATIVE_BAD = [
    ("global_input_ids", lambda call: call["local_gather_idx"].__setitem__(1, 12)),
    ("local_gather_idx", lambda call: call["local_gather_idx"].__setitem__(0, -1)),
    ("local_query_start_loc", lambda call: call["local_query_start_loc"].__setitem__(3, 4)),
    ("local_query_start_loc", lambda call: call["local_query_start_loc"].__setitem__(1, 3)),
    ("local_query_start_loc", lambda call: call["local_query_start_loc"].__setitem__(0, 1)),
    ("global_positions", lambda call: call.update(global_positions=torch.arange(11))),
]


@pytest.mark.parametrize("argument,change", NATIVE_BAD, ids=[f"{a}-{i}" for i, (a, _) in enumerate(NATIVE_BAD)])
def test_native_rejects_bad_values_and_writes_nothing(argument, change):
    call = _call()
    change(call)
    with specops.backend("native"):
        assert_rejected_without_writes(specops.pcp_local_inputs, call, argument=argument,
                                       written=("input_ids", "positions", "seq_lens"), errors=ValueError)
