"""cp_local_metadata: hand-computed splits, every backend against the independent expectation
(tests/expectations.py), the
partition across ranks, host ints without device-to-host copies, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, device_backends
from expectations import cp_local_metadata as expected_metadata
from host_syncs import OpLog
from hypothesis import given
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes, assert_same, cp_batches

import specops

OUTPUTS = ("local_query_start_loc", "local_seq_lens", "start_pos")


def expectation(query_start_loc, seq_lens, num_input_tokens, cp_size, cp_rank, causal, extra=0):
    """The independent expectation for outputs with `extra` padding entries (stale 999 before)."""
    num_reqs = query_start_loc.numel() - 1
    outputs = [torch.full((num_reqs + 1 + extra,), 999, dtype=torch.int32),
               torch.full((num_reqs + extra,), 999, dtype=torch.int32),
               torch.full((num_reqs + extra,), 999, dtype=torch.int32)]
    return expected_metadata(query_start_loc, seq_lens, num_input_tokens, cp_size, cp_rank, causal, *outputs)


# Requests [0, 3), [3, 3) (empty), [3, 8), [8, 10) over 12 input tokens and 3 ranks of 4 tokens:
# rank 0 holds [0, 4), rank 1 [4, 8), rank 2 [8, 12) (tokens 10 and 11 are padding).
QUERY_START_LOC = [0, 3, 3, 8, 10]
SEQ_LENS = [5, 0, 20, 2]
HAND_COMPUTED = [
    # rank, causal, local_query_start_loc, local_seq_lens, max_local_query_len, max_local_seq_len
    # Rank 0 holds token 3 of request 2, whose tokens 4..7 sit on rank 1: causally it sees 20 - 4.
    (0, True, [0, 3, 3, 4, 4], [5, 0, 16, 0], 3, 16),
    (0, False, [0, 3, 3, 4, 4], [5, 0, 20, 0], 3, 20),
    (1, True, [0, 0, 0, 4, 4], [0, 0, 20, 0], 4, 20),
    (1, False, [0, 0, 0, 4, 4], [0, 0, 20, 0], 4, 20),
    (2, True, [0, 0, 0, 0, 2], [0, 0, 0, 2], 2, 2),
]


# vllm-ascend tests/e2e/.../test_build_local_metadata_triton.py, masks_graph_padding
# (build_local_metadata_triton): 8 ranks, an 80-token graph of 20 four-token request slots, 9
# real requests (seq_lens 128..136), the rest padding (seq_len 0). Rank 6 holds [60, 70): it
# splits padding slot 17 at its boundary, and every padding slot's local seq_len is 0. Rank 0
# holds the first two real requests whole and half of the third, whose later half (rank 1) its
# tokens cannot see: 130 - 2.
@pytest.mark.parametrize("rank,local_qsl_tail,local_seq_head", [(6, [4, 8, 10, 10, 10], [0] * 20),
                                                                 (0, [10] * 5, [128, 129, 128] + [0] * 17)])
def test_peer_graph_padding_case(backend, rank, local_qsl_tail, local_seq_head):
    query_start_loc = torch.arange(0, 81, 4, dtype=torch.int32)
    seq_lens = torch.zeros(20, dtype=torch.int32)
    seq_lens[:9] = torch.arange(128, 137, dtype=torch.int32)
    meta = specops.cp_local_metadata(query_start_loc, seq_lens, 80, 8, rank, causal=True)
    assert (meta.local_start, meta.local_end) == (10 * rank, 10 * rank + 10)
    assert meta.local_query_start_loc.tolist()[16:] == local_qsl_tail
    assert meta.local_seq_lens.tolist() == local_seq_head
    assert meta.start_pos.tolist() == list(range(124, 133)) + [-4] * 11  # seq_lens - 4, as the peer's


@pytest.mark.parametrize("rank,causal,local_qsl,local_seq,max_query,max_seq", HAND_COMPUTED)
def test_hand_computed_split(backend, rank, causal, local_qsl, local_seq, max_query, max_seq):
    query_start_loc = torch.tensor(QUERY_START_LOC, dtype=torch.int32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    meta = specops.cp_local_metadata(query_start_loc, seq_lens, 12, 3, rank, causal=causal)
    assert isinstance(meta, specops.CPLocalMetadata)
    assert meta.local_query_start_loc.tolist() == local_qsl
    assert meta.local_seq_lens.tolist() == local_seq
    assert meta.start_pos.tolist() == [2, 0, 15, 0]  # seq_lens - query_lens
    assert (meta.num_tokens_pad, meta.tokens_per_rank, meta.local_start, meta.local_end) == (12, 4, 4 * rank, 4 * rank + 4)
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (max_query, max_seq)
    assert meta.local_query_start_loc.dtype == meta.local_seq_lens.dtype == meta.start_pos.dtype == torch.int32


def test_hand_computed_padded_stream(backend):
    # 10 input tokens over 4 ranks pad to 12: rank 3 holds [9, 12), of which only token 9 is real.
    query_start_loc = torch.tensor([0, 6, 10], dtype=torch.int32)
    seq_lens = torch.tensor([6, 9], dtype=torch.int32)
    meta = specops.cp_local_metadata(query_start_loc, seq_lens, 10, 4, 3)
    assert (meta.num_tokens_pad, meta.tokens_per_rank, meta.local_start, meta.local_end) == (12, 3, 9, 12)
    assert meta.local_query_start_loc.tolist() == [0, 0, 1]
    assert meta.local_seq_lens.tolist() == [0, 9]
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (1, 9)
    # Rank 2 holds [6, 9): request 1's first three tokens; its last token is on rank 3.
    meta = specops.cp_local_metadata(query_start_loc, seq_lens, 10, 4, 2)
    assert meta.local_query_start_loc.tolist() == [0, 0, 3]
    assert meta.local_seq_lens.tolist() == [0, 8]


def test_empty_batch_gives_maxima_of_one(backend):
    meta = specops.cp_local_metadata(torch.zeros(1, dtype=torch.int32), torch.zeros(0, dtype=torch.int32), 0, 2, 1)
    assert meta.local_query_start_loc.tolist() == [0]
    assert meta.local_seq_lens.numel() == 0
    assert (meta.num_tokens_pad, meta.local_start, meta.local_end) == (0, 0, 0)
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (1, 1)


@given(batch=cp_batches(), rank_choice=st.integers(0, 7), causal=st.booleans(), extra=st.integers(0, 3))
def test_matches_expectation_on_random_batches(backend, batch, rank_choice, causal, extra):
    rank = rank_choice % batch.cp_size
    args = (batch.query_start_loc, batch.seq_lens, batch.num_input_tokens, batch.cp_size, rank)
    expected = expectation(*args, causal, extra)
    outputs = [torch.full_like(expected[name], -7) for name in OUTPUTS]
    meta = specops.cp_local_metadata(*args, causal=causal, local_query_start_loc=outputs[0],
                                     local_seq_lens=outputs[1], start_pos=outputs[2])
    for name, actual in zip(OUTPUTS, outputs):
        assert_same(actual, expected[name], f"{backend} {name}")
    assert meta.local_query_start_loc is outputs[0]
    assert (meta.local_start, meta.local_end) == (expected["local_start"], expected["local_end"])
    assert meta.max_local_query_len == expected["max_local_query_len"]
    assert meta.max_local_seq_len == expected["max_local_seq_len"]


# Padded request slots (outputs longer than the batch, as a captured graph's buffers are) must
# read as empty requests: local_query_start_loc repeats the last start, local_seq_lens and
# start_pos are 0. Requests [0, 3), [3, 8) over 8 tokens and 2 ranks of 4 tokens, seq_lens 6 and
# 9, outputs with 3 padding slots holding stale values.
@pytest.mark.parametrize("rank,local_qsl,local_seq", [
    (0, [0, 3, 4, 4, 4, 4], [6, 5, 0, 0, 0]),  # token 3 of request 1 cannot see its 4 tokens on rank 1
    (1, [0, 0, 4, 4, 4, 4], [0, 9, 0, 0, 0]),
])
def test_hand_computed_padded_request_slots(backend, rank, local_qsl, local_seq):
    outputs = [torch.full((6,), 55, dtype=torch.int32), torch.full((5,), 55, dtype=torch.int32),
               torch.full((5,), 55, dtype=torch.int32)]
    specops.cp_local_metadata(torch.tensor([0, 3, 8], dtype=torch.int32), torch.tensor([6, 9], dtype=torch.int32), 8,
                              2, rank, causal=True, local_query_start_loc=outputs[0], local_seq_lens=outputs[1],
                              start_pos=outputs[2])
    assert outputs[0].tolist() == local_qsl
    assert outputs[1].tolist() == local_seq
    assert outputs[2].tolist() == [3, 4, 0, 0, 0]  # seq_lens - query_lens, then 0


def test_padded_starts_follow_a_rank_with_no_real_token(backend):
    """The last start of a rank whose slice is all padding is 0, and every padded slot repeats it:
    10 input tokens (8 real) over 4 ranks of 3; rank 3 holds [9, 12), past the real ones."""
    outputs = [torch.full((5,), 55, dtype=torch.int32), torch.full((4,), 55, dtype=torch.int32),
               torch.full((4,), 55, dtype=torch.int32)]
    specops.cp_local_metadata(torch.tensor([0, 5, 8], dtype=torch.int32), torch.tensor([5, 20], dtype=torch.int32), 10,
                              4, 3, causal=False, local_query_start_loc=outputs[0], local_seq_lens=outputs[1],
                              start_pos=outputs[2])
    assert outputs[0].tolist() == [0, 0, 0, 0, 0]
    assert outputs[1].tolist() == [0, 0, 0, 0]
    assert outputs[2].tolist() == [0, 17, 0, 0]


@pytest.mark.parametrize("cp_size", [1, 2, 3, 4, 8])
def test_ranks_partition_the_batch(backend, cp_size):
    """Summed over ranks, local query lengths are the global ones; each rank holds exactly the
    real tokens of its slice; a causal local seq_len excludes the tokens on later ranks only."""
    query_start_loc = torch.tensor([0, 1, 14, 14, 15, 31, 32], dtype=torch.int32)  # long ones straddle ranks
    seq_lens = torch.tensor([9, 40, 3, 0, 16, 70], dtype=torch.int32)
    num_input_tokens = 37
    query_lens = (query_start_loc[1:] - query_start_loc[:-1]).tolist()
    metas = [specops.cp_local_metadata(query_start_loc, seq_lens, num_input_tokens, cp_size, rank)
             for rank in range(cp_size)]
    local_query_lens = torch.stack([m.local_query_start_loc[1:] - m.local_query_start_loc[:-1] for m in metas])
    assert local_query_lens.sum(0).tolist() == query_lens
    for rank, meta in enumerate(metas):
        real = max(0, min(meta.local_end, 32) - min(meta.local_start, 32))
        assert int(meta.local_query_start_loc[-1]) == real
        later = local_query_lens[rank + 1:].sum(0)
        expected = torch.where((local_query_lens[rank] > 0) & (seq_lens > 0), (seq_lens - later).clamp(min=0), 0)
        assert meta.local_seq_lens.tolist() == expected.tolist(), rank
    assert metas[-1].local_end == metas[-1].num_tokens_pad >= num_input_tokens


def test_padded_buffers_are_rewritten_whole(backend):
    query_start_loc = torch.tensor([0, 2, 5], dtype=torch.int32)
    seq_lens = torch.tensor([7, 5], dtype=torch.int32)
    buffers = [torch.full((8,), 55, dtype=torch.int32), torch.full((6,), 55, dtype=torch.int32),
               torch.full((6,), 55, dtype=torch.int32)]
    addresses = [b.data_ptr() for b in buffers]
    meta = specops.cp_local_metadata(query_start_loc, seq_lens, 6, 2, 0, local_query_start_loc=buffers[0],
                                     local_seq_lens=buffers[1], start_pos=buffers[2])
    # Padded requests repeat the last local start (they are empty); the rest is zeroed.
    assert buffers[0].tolist() == [0, 2, 3, 3, 3, 3, 3, 3]
    assert buffers[1].tolist() == [7, 3, 0, 0, 0, 0]
    assert buffers[2].tolist() == [5, 2, 0, 0, 0, 0]
    assert [b.data_ptr() for b in buffers] == addresses
    assert meta.local_seq_lens is buffers[1]


# Meta tensors stand in for device tensors: they hold no data, so any read of one fails. Triton
# cannot launch on them; the native op runs its fake kernel on them, the reference runs as is.
META_BACKENDS = [name for name in BACKENDS if name != "triton"]


@pytest.mark.parametrize("impl", META_BACKENDS)
def test_host_maxima_come_from_host_data_only(impl):
    query_start_loc = torch.tensor(QUERY_START_LOC, dtype=torch.int32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    device_qsl, device_seq = query_start_loc.to("meta"), seq_lens.to("meta")
    with specops.backend(impl):
        check_maxima_from_host_copies(query_start_loc, seq_lens, device_qsl, device_seq)


def check_maxima_from_host_copies(query_start_loc, seq_lens, device_qsl, device_seq):
    meta = specops.cp_local_metadata(device_qsl, device_seq, 12, 3, 0)
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (None, None)
    assert meta.local_seq_lens.device.type == "meta"
    meta = specops.cp_local_metadata(device_qsl, device_seq, 12, 3, 0, query_start_loc_cpu=query_start_loc)
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (3, None)
    meta = specops.cp_local_metadata(device_qsl, device_seq, 12, 3, 0, causal=False,
                                     query_start_loc_cpu=query_start_loc, seq_lens_cpu=seq_lens)
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (3, 20)


@pytest.mark.parametrize("impl", META_BACKENDS)
def test_int64_host_seq_lens_give_the_same_maxima(impl):
    """Runners keep int64 host copies of seq_lens (vllm-ascend builds them from numpy)."""
    query_start_loc = torch.tensor(QUERY_START_LOC, dtype=torch.int32)
    device_qsl, device_seq = query_start_loc.to("meta"), torch.tensor(SEQ_LENS, dtype=torch.int32).to("meta")
    with specops.backend(impl):
        for causal, expected in ((True, 16), (False, 20)):
            meta = specops.cp_local_metadata(device_qsl, device_seq, 12, 3, 0, causal=causal,
                                             query_start_loc_cpu=query_start_loc,
                                             seq_lens_cpu=torch.tensor(SEQ_LENS, dtype=torch.int64))
            assert meta.max_local_seq_len == expected
        long_seq = torch.tensor([5, 0, 2**33, 2], dtype=torch.int64)  # past int32: still exact
        meta = specops.cp_local_metadata(device_qsl, device_seq, 12, 3, 0, query_start_loc_cpu=query_start_loc,
                                         seq_lens_cpu=long_seq)
        assert meta.max_local_seq_len == 2**33 - 4


@pytest.mark.parametrize("impl", META_BACKENDS)
def test_no_device_to_host_copy_when_given_host_copies(impl):
    """Any read of the meta "device" tensors would show up in the op log (and fail); the maxima
    must still come out, from the host copies."""
    query_start_loc = torch.tensor(QUERY_START_LOC, dtype=torch.int32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    device_qsl, device_seq = query_start_loc.to("meta"), seq_lens.to("meta")
    with specops.backend(impl), OpLog() as log:
        meta = specops.cp_local_metadata(device_qsl, device_seq, 12, 3, 0, query_start_loc_cpu=query_start_loc,
                                         seq_lens_cpu=seq_lens)
    assert (meta.max_local_query_len, meta.max_local_seq_len) == (3, 16)
    assert log.device_to_host() == []
    assert {"cp_local_metadata", "cumsum"} & set(log.op_names())  # the log sees the op


def test_native_host_path_reads_no_scalar():
    query_start_loc = torch.tensor(QUERY_START_LOC, dtype=torch.int32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32)
    with OpLog() as log:
        meta = specops.cp_local_metadata(query_start_loc, seq_lens, 12, 3, 0)
    assert meta.max_local_seq_len == 16
    assert log.scalar_reads() == [] and log.device_to_host() == []
    # The maxima first: they read only inputs, so no output can have changed them.
    assert [name for name in log.op_names() if name != "empty"] == ["cp_local_max_lens", "cp_local_metadata"]


def test_op_log_catches_device_reads():
    """The detector itself: each way of reading a device tensor is caught. (Tensor.item() on a
    meta tensor raises before it reaches the dispatcher, so in the meta scenario it cannot pass
    unnoticed either.)"""
    device_tensor = torch.tensor([3, 4], dtype=torch.int32).to("meta")
    for read in (lambda t: t.tolist(), lambda t: t.cpu(), lambda t: int(t[0]),
                 lambda t: torch.zeros(2, dtype=torch.int32).copy_(t)):
        with OpLog() as log, pytest.raises((RuntimeError, NotImplementedError)):
            read(device_tensor)
        assert log.device_to_host(), read


def test_device_paths_agree_on_values_the_native_op_rejects():
    # num_input_tokens below T and a negative seq_len: device kernels cannot raise; they must
    # stay in bounds and write what the formulas give. 6 input tokens over 2 ranks: rank 1
    # holds [3, 6), tokens 3 and 4 of request 0 and token 5 of request 1 (whose tokens 6..8 lie
    # past the stream, on no rank). Request 0's seq_len -3 is not positive: local seq_len 0;
    # request 1 sees 12 - 3 later tokens. start_pos is seq_lens - query_lens: -8 and 8.
    query_start_loc = torch.tensor([0, 5, 9], dtype=torch.int32)
    seq_lens = torch.tensor([-3, 12], dtype=torch.int32)
    for name in device_backends():
        with specops.backend(name):
            meta = specops.cp_local_metadata(query_start_loc, seq_lens, 6, 2, 1, causal=True)
        assert meta.local_query_start_loc.tolist() == [0, 2, 3], name
        assert meta.local_seq_lens.tolist() == [0, 9], name
        assert meta.start_pos.tolist() == [-8, 8], name


def _opcheck_args(causal):
    query_start_loc = torch.tensor([0, 3, 3, 9, 11], dtype=torch.int32)
    seq_lens = torch.tensor([5, 0, 20, 2], dtype=torch.int32)
    return (query_start_loc, seq_lens, 13, 4, 1, causal, torch.empty(7, dtype=torch.int32),
            torch.empty(4, dtype=torch.int32), torch.empty(6, dtype=torch.int32))


@pytest.mark.parametrize("causal", [True, False])
def test_opcheck(causal):
    torch.library.opcheck(torch.ops.specops.cp_local_metadata.default, _opcheck_args(causal))


def test_compiles_without_graph_break():
    query_start_loc, seq_lens, num_input_tokens, cp_size, cp_rank, _, lqsl, lsl, start_pos = _opcheck_args(True)

    def step(query_start_loc, seq_lens, lqsl, lsl, start_pos):
        meta = specops.cp_local_metadata(query_start_loc, seq_lens + 0, num_input_tokens, cp_size, cp_rank,
                                         local_query_start_loc=lqsl, local_seq_lens=lsl, start_pos=start_pos)
        return meta.local_query_start_loc + 1, meta.local_seq_lens * 2, meta.start_pos + meta.local_start

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(query_start_loc, seq_lens, lqsl.clone(), lsl.clone(), start_pos.clone())
    actual = compiled(query_start_loc, seq_lens, lqsl, lsl, start_pos)
    for a, e in zip(actual, expected):
        assert_same(a, e)


def _valid_call():
    return dict(query_start_loc=torch.tensor([0, 2, 5], dtype=torch.int32),
                seq_lens=torch.tensor([7, 5], dtype=torch.int32), num_input_tokens=6, cp_size=2, cp_rank=1,
                local_query_start_loc=torch.full((3,), 55, dtype=torch.int32),
                local_seq_lens=torch.full((2,), 55, dtype=torch.int32),
                start_pos=torch.full((2,), 55, dtype=torch.int32))


BAD_INPUTS = [
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 2, 5], dtype=torch.int64))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([[0, 2, 5]], dtype=torch.int32))),
    ("seq_lens", dict(seq_lens=torch.tensor([7, 5]))),
    ("seq_lens", dict(seq_lens=torch.tensor([7, 5, 1], dtype=torch.int32))),
    ("num_input_tokens", dict(num_input_tokens=-1)),
    ("cp_size", dict(cp_size=0)),
    ("cp_rank", dict(cp_rank=2)),
    ("cp_rank", dict(cp_rank=-1)),
    ("local_query_start_loc", dict(local_query_start_loc=torch.full((2,), 55, dtype=torch.int32))),
    ("local_query_start_loc", dict(local_query_start_loc=torch.full((3,), 55, dtype=torch.int64))),
    ("local_seq_lens", dict(local_seq_lens=torch.full((1,), 55, dtype=torch.int32))),
    ("start_pos", dict(start_pos=torch.full((2, 1), 55, dtype=torch.int32))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    assert_rejected_without_writes(specops.cp_local_metadata, call, argument=argument, written=OUTPUTS)


VALUE_ERRORS = [
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 5, 2], dtype=torch.int32))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([1, 2, 5], dtype=torch.int32))),
    ("seq_lens", dict(seq_lens=torch.tensor([7, -1], dtype=torch.int32))),
    ("num_input_tokens", dict(num_input_tokens=4)),  # fewer than the 5 tokens of the batch
]


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VALUE_ERRORS)])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = _valid_call()
    call.update(change)
    assert_rejected_without_writes(specops.cp_local_metadata, call, argument=argument, written=OUTPUTS,
                                   errors=ValueError)


def test_host_copies_are_checked():
    call = _valid_call()
    for name in OUTPUTS:
        call[name] = call[name].to("meta")
    call["query_start_loc"] = call["query_start_loc"].to("meta")
    call["seq_lens"] = call["seq_lens"].to("meta")
    with pytest.raises(ValueError, match="query_start_loc_cpu"):
        specops.cp_local_metadata(**call, query_start_loc_cpu=torch.tensor([0, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match="seq_lens_cpu"):
        specops.cp_local_metadata(**call, seq_lens_cpu=torch.tensor([7, 5], dtype=torch.int16))


def test_outputs_sharing_memory_are_rejected_before_any_write(backend):
    """Once accepted, with garbage in all three (the accounting ops already rejected this)."""
    call = _valid_call()
    buffer = torch.full((6,), 55, dtype=torch.int32)
    call.update(local_query_start_loc=buffer[:3], local_seq_lens=buffer[2:4], start_pos=buffer[4:6])
    with pytest.raises(ValueError, match="local_seq_lens must not share memory with local_query_start_loc"):
        specops.cp_local_metadata(**call)
    assert buffer.tolist() == [55] * 6
