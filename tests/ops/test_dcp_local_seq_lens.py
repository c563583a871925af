"""dcp_local_seq_lens: the KV length each DCP rank stores. The peer's unit-test values, the
count of the tokens compute_slot_mapping marks local, the sum over ranks, every backend against
an independent formula, opcheck, compile, bad input (the op table covers the matrix)."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from expectations import dcp_local_seq_len
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes, assert_same

import specops

STALE = 4321


def every_rank(seq_lens: torch.Tensor, world: int, interleave: int) -> list[list[int]]:
    """[R][W]: each request's length on every rank, the shape the peer helper returns."""
    columns = [specops.dcp_local_seq_lens(seq_lens, world, rank, interleave).tolist() for rank in range(world)]
    return [list(row) for row in zip(*columns)]


# vllm-ascend tests/ut/attention/a2/test_common_cp.py (get_dcp_local_seq_lens, W = 2, I = 4).
def test_peer_unit_test_common_cp(backend):
    seq_lens = torch.tensor([1, 4, 5, 8, 9], dtype=torch.int32)
    assert every_rank(seq_lens, 2, 4) == [[1, 0], [4, 0], [4, 1], [4, 4], [5, 4]]


# vllm-ascend tests/ut/worker/test_dcp_manager.py (DCPManager._get_dcp_local_seq_lens), whose
# seq_lens are int64 (the manager builds them with torch.tensor from a numpy array).
@pytest.mark.parametrize("world,interleave,expected", [
    (2, 1, [[1, 0], [1, 1], [64, 64], [65, 64], [128, 128], [129, 128]]),
    (2, 128, [[1, 0], [2, 0], [128, 0], [128, 1], [128, 128], [129, 128]]),
    (4, 128, [[1, 0, 0, 0], [2, 0, 0, 0], [128, 0, 0, 0], [128, 1, 0, 0], [128, 128, 0, 0], [128, 128, 1, 0]]),
])
def test_peer_unit_test_dcp_manager(backend, world, interleave, expected):
    seq_lens = torch.tensor([1, 2, 128, 129, 256, 257])
    assert seq_lens.dtype == torch.int64
    assert every_rank(seq_lens, world, interleave) == expected
    assert specops.dcp_local_seq_lens(seq_lens, world, 0, interleave).dtype == torch.int64


# vllm-ascend tests/ut/attention/test_sfa_cp.py (AscendSFADCPMetadataBuilder._get_dcp_local_seq_lens,
# W = 2, I = 4, one rank per builder).
def test_peer_unit_test_sfa_cp(backend):
    seq_lens = torch.tensor([0, 3, 4, 5, 8, 9, 12], dtype=torch.int32)
    assert specops.dcp_local_seq_lens(seq_lens, 2, 0, 4).tolist() == [0, 3, 4, 4, 4, 5, 8]
    assert specops.dcp_local_seq_lens(seq_lens, 2, 1, 4).tolist() == [0, 0, 0, 1, 4, 4, 4]


def test_padding_past_the_requests_is_zero(backend):
    out = torch.full((5,), STALE, dtype=torch.int32)
    result = specops.dcp_local_seq_lens(torch.tensor([7, 3], dtype=torch.int32), 2, 1, 2, out=out)
    assert result is out
    # 7 tokens in runs of 2: rank 1 holds positions 2, 3, 6 (3 tokens); 3 tokens: position 2.
    assert out.tolist() == [3, 1, 0, 0, 0]


def test_lengths_past_int32(backend):
    seq_lens = torch.tensor([2**40 + 5, 2**33])
    out = specops.dcp_local_seq_lens(seq_lens, 4, 3, 8)
    # 2^40 + 5 = 2^35 rounds of 32 tokens and 5 tokens on rank 0; 2^33 is 2^28 whole rounds.
    assert out.tolist() == [2**35 * 8, 2**28 * 8]


@settings(max_examples=examples(30))
@given(
    seq_lens=st.lists(st.integers(0, 200), max_size=12),
    world=st.integers(1, 5),
    interleave=st.sampled_from([1, 2, 3, 4, 16]),
    dtype=st.sampled_from([torch.int32, torch.int64]),
    extra=st.integers(0, 3),
)
def test_matches_the_token_count_on_random_lengths(backend, seq_lens, world, interleave, dtype, extra):
    lengths = torch.tensor(seq_lens, dtype=dtype)
    total = torch.zeros(len(seq_lens), dtype=dtype)
    for rank in range(world):
        out = torch.full((len(seq_lens) + extra,), STALE, dtype=dtype)
        specops.dcp_local_seq_lens(lengths, world, rank, interleave, out=out)
        expected = [dcp_local_seq_len(s, world, rank, interleave) for s in seq_lens] + [0] * extra
        assert_same(out, torch.tensor(expected, dtype=dtype), f"rank {rank}")
        total += out[: len(seq_lens)]
    assert_same(total, lengths, "summed over ranks")


@pytest.mark.parametrize("world,interleave,block_size", [(2, 1, 4), (2, 4, 8), (4, 2, 2), (3, 16, 16)])
def test_agrees_with_the_tokens_compute_slot_mapping_marks_local(backend, world, interleave, block_size):
    """One request per length, all positions [0, s): the non-PAD slots of rank r are its KV."""
    seq_lens = [0, 1, 5, 17, 40, 63]
    positions = torch.cat([torch.arange(s) for s in seq_lens])
    query_start_loc = torch.tensor([0] + torch.tensor(seq_lens).cumsum(0).tolist(), dtype=torch.int32)
    columns = -(-max(seq_lens) // (block_size * world))
    block_table = torch.arange(1, 1 + len(seq_lens) * columns, dtype=torch.int32).view(len(seq_lens), columns)
    for rank in range(world):
        slots = specops.compute_slot_mapping(query_start_loc, positions, block_table, block_size,
                                             cp_world_size=world, cp_rank=rank, cp_interleave=interleave)
        stored = [int((slots[lo:hi] != specops.PAD_SLOT_ID).sum())
                  for lo, hi in zip(query_start_loc[:-1].tolist(), query_start_loc[1:].tolist())]
        local = specops.dcp_local_seq_lens(torch.tensor(seq_lens, dtype=torch.int32), world, rank, interleave)
        assert local.tolist() == stored, f"rank {rank}"


def test_a_negative_length_stores_nothing_on_the_device_paths():
    for name in device_backends():
        with specops.backend(name):
            out = specops.dcp_local_seq_lens(torch.tensor([-5, 9], dtype=torch.int32), 2, 0, 4)
        assert out.tolist() == [0, 5], name


def _opcheck_args(dtype):
    return (torch.tensor([0, 1, 7, 8, 33, 100], dtype=dtype), 4, 2, 2, torch.empty(8, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_opcheck(dtype):
    torch.library.opcheck(torch.ops.specops.dcp_local_seq_lens.default, _opcheck_args(dtype))


def test_compiles_without_graph_break():
    seq_lens, world, rank, interleave, out = _opcheck_args(torch.int32)

    def step(seq_lens, out):
        specops.dcp_local_seq_lens(seq_lens + 1, world, rank, interleave, out=out)
        return out * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(seq_lens, out.clone())
    assert_same(compiled(seq_lens, out), expected)


BAD_INPUTS = [
    ("seq_lens", dict(seq_lens=torch.tensor([1.0, 2.0]))),
    ("seq_lens", dict(seq_lens=torch.tensor([[1, 2]], dtype=torch.int32))),
    ("out", dict(out=torch.full((3,), STALE, dtype=torch.int64))),  # not seq_lens' dtype
    ("out", dict(out=torch.full((1,), STALE, dtype=torch.int32))),
    ("cp_world_size", dict(cp_world_size=0)),
    ("cp_rank", dict(cp_rank=2)),
    ("cp_interleave", dict(cp_interleave=0)),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = dict(seq_lens=torch.tensor([5, 9], dtype=torch.int32), cp_world_size=2, cp_rank=1, cp_interleave=4,
                out=torch.full((3,), STALE, dtype=torch.int32))
    call.update(change)
    assert_rejected_without_writes(specops.dcp_local_seq_lens, call, argument=argument, written=("out",))


def test_native_rejects_a_negative_length_and_writes_nothing():
    call = dict(seq_lens=torch.tensor([5, -1], dtype=torch.int32), cp_world_size=2, cp_rank=1, cp_interleave=4,
                out=torch.full((2,), STALE, dtype=torch.int32))
    with specops.backend("native"):
        assert_rejected_without_writes(specops.dcp_local_seq_lens, call, argument="seq_lens", written=("out",),
                                       errors=ValueError)
