"""format_slot_mapping_blocks: floor semantics by hand, every backend against the independent
expectation (tests/expectations.py), the round trip, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from expectations import slot_mapping_blocks
from strategies import assert_rejected_without_writes, assert_same, make_batch

import specops

PAD = specops.PAD_SLOT_ID


def expectation(slot_mapping, block_size, rows=None, out_dtype=None):
    rows = slot_mapping.numel() if rows is None else rows
    stale = torch.full((rows, 2), 4321, dtype=out_dtype or slot_mapping.dtype)
    return slot_mapping_blocks(slot_mapping, block_size, stale)


def test_hand_computed_power_of_two(backend):
    slots = torch.tensor([0, 15, 16, PAD, 33, -17, 128])
    out = specops.format_slot_mapping_blocks(slots, 16)
    # PAD = -1 is block -1, offset 15 (floor); -17 is block -2, offset 15.
    assert out.tolist() == [[0, 0], [0, 15], [1, 0], [-1, 15], [2, 1], [-2, 15], [8, 0]]
    assert out.dtype == torch.int64


def test_hand_computed_other_block_size(backend):
    slots = torch.tensor([0, 9, 10, PAD, 33, -11], dtype=torch.int32)
    out = specops.format_slot_mapping_blocks(slots, 10)
    assert out.tolist() == [[0, 0], [0, 9], [1, 0], [-1, 9], [3, 3], [-2, 9]]
    assert out.dtype == torch.int32


def test_slots_past_int32(backend):
    big = 3 * 2**32 + 7  # past the range of the reciprocal divide
    slots = torch.tensor([big, -big, 2**31 - 1, 2**31])
    out = specops.format_slot_mapping_blocks(slots, 96)
    assert out.tolist() == [[s // 96, s % 96] for s in slots.tolist()]


def test_block_size_one(backend):
    slots = torch.tensor([5, PAD, 0])
    assert specops.format_slot_mapping_blocks(slots, 1).tolist() == [[5, 0], [-1, 0], [0, 0]]


def test_rows_past_the_slots_get_the_pair_of_pad(backend):
    out = torch.full((5, 2), 77, dtype=torch.int32)
    address = out.data_ptr()
    result = specops.format_slot_mapping_blocks(torch.tensor([40, 41]), 8, out=out)
    assert result.data_ptr() == address
    assert out.tolist() == [[5, 0], [5, 1], [-1, 7], [-1, 7], [-1, 7]]


@given(
    num_slots=st.integers(0, 300),
    extra_rows=st.integers(0, 4),
    block_size=st.sampled_from([1, 3, 16, 100, 128, 1 << 20]),
    slot_dtype=st.sampled_from([torch.int64, torch.int32]),
    out_dtype=st.sampled_from([torch.int64, torch.int32]),
    strided=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_expectation_on_random_slots(backend, num_slots, extra_rows, block_size, slot_dtype, out_dtype,
                                             strided, seed):
    generator = torch.Generator().manual_seed(seed)
    slots = torch.randint(-3 * block_size, 1 << 30, (num_slots,), generator=generator)
    slots[torch.rand(num_slots, generator=generator) < 0.3] = PAD
    slots = slots.to(slot_dtype)
    rows = num_slots + extra_rows
    # A strided out: the pairs are columns 0 and 1 of a wider persistent buffer.
    storage = torch.full((rows, 5 if strided else 2), 99, dtype=out_dtype)
    out = storage[:, 1:3] if strided else storage
    specops.format_slot_mapping_blocks(slots, block_size, out=out)
    assert_same(out, expectation(slots, block_size, rows, out_dtype), backend)
    if strided:
        assert (storage[:, 0] == 99).all() and (storage[:, 3:] == 99).all()
    block, offset = out[:num_slots].long().unbind(1)
    assert ((offset >= 0) & (offset < block_size)).all()
    assert_same(block * block_size + offset, slots.long(), "round trip")


def test_round_trip_of_a_cp_slot_mapping(backend):
    generator = torch.Generator().manual_seed(5)
    batch = make_batch(generator, query_lens=[3, 9, 1, 20], context_lens=[0, 40, 100, 7], tokens_per_block_row=32)
    slots = specops.compute_slot_mapping(batch.query_start_loc, batch.positions, batch.block_table, 16,
                                         cp_world_size=2, cp_rank=1, num_tokens_padded=batch.num_tokens + 3)
    pairs = specops.format_slot_mapping_blocks(slots, 16)
    is_pad = slots == PAD
    assert is_pad.any() and (~is_pad).any()
    assert (pairs[is_pad] == torch.tensor([-1, 15])).all()
    assert_same(pairs[:, 0] * 16 + pairs[:, 1], slots)


def _opcheck_args(out_dtype):
    slots = torch.tensor([0, 17, PAD, 300, -5, 64], dtype=torch.int64)
    return (slots, 16, torch.empty(8, 2, dtype=out_dtype))


@pytest.mark.parametrize("out_dtype", [torch.int64, torch.int32])
def test_opcheck(out_dtype):
    torch.library.opcheck(torch.ops.specops.format_slot_mapping_blocks.default, _opcheck_args(out_dtype))


def test_compiles_without_graph_break():
    slots, block_size, out = _opcheck_args(torch.int64)

    def step(slots, out):
        specops.format_slot_mapping_blocks(slots + 0, block_size, out=out)
        return out * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(slots, out.clone())
    assert_same(compiled(slots, out), expected)


BAD_INPUTS = [
    ("slot_mapping", dict(slot_mapping=torch.tensor([1.0, 2.0]))),
    ("slot_mapping", dict(slot_mapping=torch.tensor([[1, 2]]))),
    ("block_size", dict(block_size=0)),
    ("out", dict(out=torch.full((3, 2), 55.0))),
    ("out", dict(out=torch.full((3, 3), 55, dtype=torch.int64))),
    ("out", dict(out=torch.full((1, 2), 55, dtype=torch.int64))),
    ("out", dict(out=torch.full((6,), 55, dtype=torch.int64))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = dict(slot_mapping=torch.tensor([1, 2]), block_size=16, out=torch.full((3, 2), 55, dtype=torch.int64))
    call.update(change)
    assert_rejected_without_writes(specops.format_slot_mapping_blocks, call, argument=argument, written=("out",))
