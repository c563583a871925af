"""format_slot_mapping_blocks_multi: every group's slot mapping in one call. Hand-computed pairs,
random groups against the floor formula written in plain Python, each group equal to the
single-group op, one op call for all groups, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from host_syncs import OpLog
from hypothesis import given
from hypothesis import strategies as st
from strategies import assert_same

import specops

PAD = specops.PAD_SLOT_ID


def expected_pairs(slots: list[int], block_size: int, num_slots: int, rows: int) -> list[list[int]]:
    """The contract in plain Python: Python's // and % are floor division and floor modulo."""
    padded = slots[:num_slots] + [PAD] * (rows - num_slots)
    return [[s // block_size, s % block_size] for s in padded]


def test_hand_computed_groups(backend):
    # Group 0: block size 16, int64; group 1: block size 10, int32 slots into an int32 out with
    # two rows past num_slots; slot_mappings are longer than num_slots (persistent buffers).
    slots = [torch.tensor([0, 17, PAD, 40, 999]), torch.tensor([5, 19, PAD, -11, 7], dtype=torch.int32)]
    out = [torch.full((4, 2), 77, dtype=torch.int64), torch.full((6, 2), 77, dtype=torch.int32)]
    result = specops.format_slot_mapping_blocks_multi(slots, [16, 10], num_slots=4, out=out)
    assert [t.data_ptr() for t in result] == [t.data_ptr() for t in out]
    assert out[0].tolist() == [[0, 0], [1, 1], [-1, 15], [2, 8]]
    assert out[1].tolist() == [[0, 5], [1, 9], [-1, 9], [-2, 9], [-1, 9], [-1, 9]]


def test_defaults_allocate_and_take_the_common_length(backend):
    slots = [torch.tensor([3, 8]), torch.tensor([3, 8], dtype=torch.int32)]
    out = specops.format_slot_mapping_blocks_multi(slots, 4)
    assert [t.dtype for t in out] == [torch.int64, torch.int32]
    assert [t.tolist() for t in out] == [[[0, 3], [2, 0]]] * 2
    with pytest.raises(ValueError, match="num_slots"):
        specops.format_slot_mapping_blocks_multi([torch.tensor([1]), torch.tensor([1, 2])], 4)


def test_no_groups_is_a_no_op(backend):
    assert specops.format_slot_mapping_blocks_multi([], [], num_slots=3, out=[]) == []
    with pytest.raises(ValueError, match="out"):
        specops.format_slot_mapping_blocks_multi([], [], num_slots=3, out=[torch.zeros(3, 2, dtype=torch.int64)])


@given(
    groups=st.lists(st.tuples(st.sampled_from([1, 3, 16, 100, 1 << 20]), st.sampled_from([torch.int64, torch.int32]),
                              st.sampled_from([torch.int64, torch.int32]), st.integers(0, 3), st.booleans()),
                    min_size=1, max_size=4),
    num_slots=st.integers(0, 40),
    seed=st.integers(0, 2**16),
)
def test_matches_the_formula_and_the_single_group_op(backend, groups, num_slots, seed):
    generator = torch.Generator().manual_seed(seed)
    slots, block_sizes, out, storages = [], [], [], []
    for block_size, slot_dtype, out_dtype, extra_rows, strided in groups:
        values = torch.randint(-3 * block_size, 1 << 30, (num_slots + extra_rows,), generator=generator)
        values[torch.rand(values.numel(), generator=generator) < 0.3] = PAD
        slots.append(values.to(slot_dtype))
        block_sizes.append(block_size)
        # A strided out: the pairs are columns 1 and 2 of a wider persistent buffer.
        storage = torch.full((num_slots + extra_rows, 5 if strided else 2), 99, dtype=out_dtype)
        storages.append(storage)
        out.append(storage[:, 1:3] if strided else storage)
    specops.format_slot_mapping_blocks_multi(slots, block_sizes, num_slots=num_slots, out=out)
    for g, (values, block_size, pairs, storage) in enumerate(zip(slots, block_sizes, out, storages)):
        expected = expected_pairs(values.tolist(), block_size, num_slots, pairs.size(0))
        assert pairs.tolist() == expected, f"group {g}"
        if pairs.data_ptr() != storage.data_ptr():
            assert (storage[:, 0] == 99).all() and (storage[:, 3:] == 99).all()
        single = torch.full_like(pairs, 55)
        with specops.backend("native"):
            specops.format_slot_mapping_blocks(values[:num_slots], block_size, out=single)
        assert_same(pairs, single, f"group {g} against format_slot_mapping_blocks")


def test_one_op_call_formats_every_group():
    slots = [torch.arange(6) * 7 for _ in range(5)]
    out = [torch.empty(8, 2, dtype=torch.int64) for _ in range(5)]
    with specops.backend("native"), OpLog() as log:
        specops.format_slot_mapping_blocks_multi(slots, [4, 8, 16, 32, 3], num_slots=6, out=out)
    assert log.op_names() == ["format_slot_mapping_blocks_multi"]
    assert out[4][:2].tolist() == [[0, 0], [2, 1]]


def _opcheck_args(num_groups: int):
    slots = [torch.tensor([0, 17, PAD, 300, -5, 64], dtype=dtype) for dtype in (torch.int64, torch.int32)][:num_groups]
    out = [torch.empty(8, 2, dtype=dtype) for dtype in (torch.int32, torch.int64)][:num_groups]
    return (slots, [16, 5][:num_groups], 5, out)


@pytest.mark.parametrize("num_groups", [1, 2])
def test_opcheck(num_groups):
    torch.library.opcheck(torch.ops.specops.format_slot_mapping_blocks_multi.default, _opcheck_args(num_groups))


def test_compiles_without_graph_break():
    slots, block_sizes, num_slots, out = _opcheck_args(2)

    def step(a, b, out_a, out_b):
        specops.format_slot_mapping_blocks_multi([a + 0, b], block_sizes, num_slots=num_slots, out=[out_a, out_b])
        return out_a * 2, out_b + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(*slots, *(t.clone() for t in out))
    for actual, wanted in zip(compiled(*slots, *out), expected):
        assert_same(actual, wanted)


def _valid_call():
    return dict(slot_mappings=[torch.tensor([1, 2]), torch.tensor([3, 4])], block_sizes=[16, 8], num_slots=2,
                out=[torch.full((3, 2), 55, dtype=torch.int64), torch.full((2, 2), 55, dtype=torch.int64)])


def _shared_outputs(call):
    shared = torch.full((6, 2), 55, dtype=torch.int64)
    call["out"] = [shared[:3], shared[2:5]]


def _output_over_an_input(call):
    """out[1] over group 0's slot mapping, which the op reads while it writes."""
    buffer = torch.full((8,), 3, dtype=torch.int64)
    call["slot_mappings"][0] = buffer[:2]
    call["out"][1] = buffer[:4].view(2, 2)


BAD_INPUTS = [
    ("block_sizes", lambda call: call.update(block_sizes=[16])),
    ("out", lambda call: call.update(out=call["out"][:1])),
    (r"block_sizes\[1\]", lambda call: call.update(block_sizes=[16, 0])),
    ("num_slots", lambda call: call.update(num_slots=-1)),
    (r"slot_mappings\[0\]", lambda call: call.update(num_slots=3)),
    (r"out\[1\]", lambda call: call["out"].__setitem__(1, torch.full((2, 3), 55, dtype=torch.int64))),
    (r"out\[1\]", lambda call: call["out"].__setitem__(1, torch.full((2, 2), 55.0))),
    (r"slot_mappings\[1\]", lambda call: call["slot_mappings"].__setitem__(1, torch.tensor([[3, 4]]))),
    (r"out\[1\] must not share memory with out\[0\]", _shared_outputs),
    (r"out\[1\] must not share memory with slot_mappings\[0\]", _output_over_an_input),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{i}" for i in range(len(BAD_INPUTS))])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    change(call)
    before = [t.clone() for t in call["out"]]
    with pytest.raises(ValueError, match=argument):
        specops.format_slot_mapping_blocks_multi(**call)
    for t, b in zip(call["out"], before):
        assert torch.equal(t, b)


def test_groups_of_several_tiles(backend):
    """Groups longer than one tile of the device kernel (1024 rows), of different lengths: every
    tile of every group is written, whichever program the round-robin gives it to."""
    generator = torch.Generator().manual_seed(3)
    num_slots = 2100
    slots = [torch.randint(-1, 1 << 24, (num_slots,), generator=generator) for _ in range(3)]
    out = [torch.full((rows, 2), 77, dtype=torch.int64) for rows in (2100, 3000, 2500)]
    specops.format_slot_mapping_blocks_multi(slots, [16, 7, 1000], num_slots=num_slots, out=out)
    for g, (values, block_size, pairs) in enumerate(zip(slots, [16, 7, 1000], out)):
        assert pairs.tolist() == expected_pairs(values.tolist(), block_size, num_slots, pairs.size(0)), f"group {g}"


def test_more_groups_than_one_launch_takes(backend):
    # The Triton kernel takes MAX_GROUPS groups per launch: the next launches format the rest.
    from specops.triton_kernels._groups import MAX_GROUPS

    generator = torch.Generator().manual_seed(5)
    block_sizes = [16, 7, 1, 1000, 3, 64][: MAX_GROUPS + 2]
    slots = [torch.randint(-40, 1 << 20, (9,), generator=generator) for _ in block_sizes]
    out = [torch.full((9 + g, 2), 77, dtype=torch.int64) for g in range(len(block_sizes))]
    specops.format_slot_mapping_blocks_multi(slots, block_sizes, num_slots=9, out=out)
    for g, (values, block_size, pairs) in enumerate(zip(slots, block_sizes, out)):
        assert pairs.tolist() == expected_pairs(values.tolist(), block_size, 9, pairs.size(0)), f"group {g}"
