"""prepare_spec_decode_inputs: every backend against the independent expectation (the per-op ones of
tests/expectations.py in sequence), equal to the unfused sequence on every backend, rejected calls
write nothing, opcheck, compile, bad input."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import BACKENDS, examples
from expectations import compute_slot_mapping as expected_slots
from expectations import corrected_counts, positions_and_seq_lens
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import SpecDecodeStep, assert_same, make_spec_decode_step

import specops
from specops._spec_decode_sizes import SpecDecodeSizes, pack_sizes
from specops.ops.prepare_spec_decode_inputs import _OP as fused_op

PAD = specops.PAD_SLOT_ID


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def fresh_outputs(step: SpecDecodeStep, padded_tokens: int, padded_reqs: int, positions_dtype=torch.int64,
                  slot_dtypes=None):
    slot_dtypes = slot_dtypes or [torch.int64] * len(step.block_tables)
    return dict(positions=torch.full((padded_tokens,), 555, dtype=positions_dtype),
                seq_lens=torch.full((padded_reqs,), 555, dtype=torch.int32),
                slot_mappings=[torch.full((padded_tokens,), 555, dtype=dtype) for dtype in slot_dtypes])


def run_fused(step: SpecDecodeStep, outputs: dict, cp_world_size=1, cp_rank=0, cp_interleave=1,
              slot_mapping_enabled=True, **padding):
    return specops.prepare_spec_decode_inputs(
        *step.correction.args(), step.query_start_loc, step.block_tables, step.block_sizes,
        blocks_per_kv_block=step.blocks_per_kv_block, cp_sharded=step.cp_sharded, cp_world_size=cp_world_size,
        cp_rank=cp_rank, cp_interleave=cp_interleave, idx_mapping=step.idx_mapping,
        slot_mapping_enabled=slot_mapping_enabled, **outputs, **padding)


def run_unfused(step: SpecDecodeStep, outputs: dict, cp_world_size=1, cp_rank=0, cp_interleave=1, **padding):
    """The sequence the fused op replaces, through the public ops."""
    specops.correct_num_computed_tokens(*step.correction.args())
    specops.prepare_positions_and_seq_lens(step.correction.num_computed_tokens, step.query_start_loc,
                                           positions=outputs["positions"], seq_lens=outputs["seq_lens"],
                                           num_tokens_padded=padding.get("num_tokens_padded"),
                                           num_reqs_padded=padding.get("num_reqs_padded"))
    for g, table in enumerate(step.block_tables):
        sharded = step.cp_sharded[g]
        specops.compute_slot_mapping(
            step.query_start_loc, outputs["positions"][: step.num_tokens], table, step.block_sizes[g],
            out=outputs["slot_mappings"][g], blocks_per_kv_block=step.blocks_per_kv_block[g],
            cp_world_size=cp_world_size if sharded else 1, cp_rank=cp_rank if sharded else 0,
            cp_interleave=cp_interleave if sharded else 1, idx_mapping=step.idx_mapping,
            num_tokens_padded=padding.get("num_tokens_padded"))


def expectation(step: SpecDecodeStep, outputs: dict, cp_world_size: int, cp_rank: int, cp_interleave: int,
                enabled: list[bool], num_tokens_padded: int, num_reqs_padded: int) -> tuple[SpecDecodeStep, dict]:
    """The step and the outputs after the fused op, from the independent per-op expectations:
    the count correction, then positions and seq_lens from the corrected counts, then each
    group's slot mapping (PAD for every padded token of a disabled group)."""
    expected_step, expected = clone_step(step), clone_outputs(outputs)
    correction = expected_step.correction
    correction.num_computed_tokens, correction.num_accepted_tokens = corrected_counts(*step.correction.args())
    expected["positions"], expected["seq_lens"] = positions_and_seq_lens(
        correction.num_computed_tokens, step.query_start_loc, outputs["positions"], outputs["seq_lens"],
        num_tokens_padded, num_reqs_padded)
    for g, table in enumerate(step.block_tables):
        out = expected["slot_mappings"][g]
        if not enabled[g]:
            out[:num_tokens_padded] = PAD
            continue
        sharded = step.cp_sharded[g]
        expected["slot_mappings"][g] = expected_slots(
            step.query_start_loc, expected["positions"][: step.num_tokens], table, step.block_sizes[g], out,
            blocks_per_kv_block=step.blocks_per_kv_block[g], cp_world_size=cp_world_size if sharded else 1,
            cp_rank=cp_rank if sharded else 0, cp_interleave=cp_interleave if sharded else 1,
            idx_mapping=step.idx_mapping, num_tokens_padded=num_tokens_padded)
    return expected_step, expected


def assert_same_step(actual_step, actual, expected_step, expected, what):
    assert_same(actual_step.correction.num_computed_tokens, expected_step.correction.num_computed_tokens,
                f"{what}: num_computed_tokens")
    assert_same(actual_step.correction.num_accepted_tokens, expected_step.correction.num_accepted_tokens,
                f"{what}: num_accepted_tokens")
    assert_same(actual["positions"], expected["positions"], f"{what}: positions")
    assert_same(actual["seq_lens"], expected["seq_lens"], f"{what}: seq_lens")
    for g, (a, e) in enumerate(zip(actual["slot_mappings"], expected["slot_mappings"])):
        assert_same(a, e, f"{what}: slot_mappings[{g}]")


def clone_step(step: SpecDecodeStep) -> SpecDecodeStep:
    return SpecDecodeStep(step.correction.clone(), step.query_start_loc, step.block_tables, step.block_sizes,
                          step.blocks_per_kv_block, step.cp_sharded, step.idx_mapping)


def clone_outputs(outputs: dict) -> dict:
    return dict(positions=outputs["positions"].clone(), seq_lens=outputs["seq_lens"].clone(),
                slot_mappings=[t.clone() for t in outputs["slot_mappings"]])


def test_hand_computed(backend):
    # Row 0 continues row 1: 20 + 3 = 23; row 1 is new: host 50. Group 0: block 16, rows
    # [1,2,3,4] and [5,6,7,8]. Group 1: kernel blocks of 4, 2 per allocation block, CP 2, rank 1:
    # position 23 is offset 7 of virtual block 1, local on rank 1 at local offset 3, column 2
    # (id 12): 12 * 4 + 3 = 51; positions 24 and 50 live on rank 0.
    num_computed_tokens = i32([10, 20, 30])
    num_accepted_tokens = i32([0, 0, 0])
    tables = [i32([[1, 2, 3, 4], [5, 6, 7, 8]]), i32([list(range(10, 18)), list(range(20, 28))])]
    result = specops.prepare_spec_decode_inputs(
        num_computed_tokens, num_accepted_tokens, i32([1, -1]), i32([2, 3]), i32([1, 1]), i32([100, 50]),
        i32([0, 2, 3]), tables, [16, 4], blocks_per_kv_block=[1, 2], cp_sharded=[False, True], cp_world_size=2,
        cp_rank=1, num_tokens_padded=4, num_reqs_padded=3)
    assert num_computed_tokens.tolist() == [23, 50, 30]
    assert num_accepted_tokens.tolist() == [3, 0, 0]
    assert result.positions.tolist() == [23, 24, 50, 0]
    assert result.seq_lens.tolist() == [25, 51, 0]
    assert result.slot_mappings[0].tolist() == [2 * 16 + 7, 2 * 16 + 8, 8 * 16 + 2, PAD]
    assert result.slot_mappings[1].tolist() == [51, PAD, PAD, PAD]


def test_a_disabled_group_gets_pad_and_its_table_is_never_read(backend):
    # Group 1 has no slot mapping (a group whose attention reads no slots): its table has no
    # columns at all, so any read or position check against it would fail.
    tables = [i32([[1, 2], [3, 4]]), torch.zeros(2, 0, dtype=torch.int32)]
    slot_mappings = [torch.full((4,), 555), torch.full((5,), 555)]
    result = specops.prepare_spec_decode_inputs(
        i32([10, 20]), i32([0, 0]), i32([-1, -1]), i32([1]), i32([1]), i32([17, 3]), i32([0, 2, 3]), tables, 16,
        slot_mappings=slot_mappings, slot_mapping_enabled=[True, False], num_tokens_padded=4, num_reqs_padded=2)
    assert result.positions.tolist() == [17, 18, 3, 0]
    assert slot_mappings[0].tolist() == [2 * 16 + 1, 2 * 16 + 2, 3 * 16 + 3, PAD]
    assert slot_mappings[1].tolist() == [PAD, PAD, PAD, PAD, 555]  # past num_tokens_padded: untouched


GROUP_CHOICES = [(16, 1, True), (4, 2, True), (8, 1, False), (2, 4, False), (1, 1, True)]


@settings(max_examples=examples(30))
@given(num_reqs=st.integers(0, 10), num_prev_rows=st.integers(0, 10), max_query_len=st.integers(0, 6),
       groups=st.lists(st.sampled_from(GROUP_CHOICES), min_size=1, max_size=3),
       cp=st.sampled_from([(1, 0, 1), (2, 1, 1), (2, 0, 2), (4, 3, 1), (3, 1, 1)]),
       with_idx_mapping=st.booleans(), prev_dtype=st.sampled_from([torch.int32, torch.int64]),
       positions_dtype=st.sampled_from([torch.int64, torch.int32]), int32_slots=st.booleans(),
       extra_tokens=st.integers(0, 4), extra_reqs=st.integers(0, 2), enabled=st.lists(st.booleans(), min_size=3,
                                                                                       max_size=3),
       seed=st.integers(0, 2**16))
def test_matches_expectation_on_random_steps(backend, num_reqs, num_prev_rows, max_query_len, groups, cp,
                                             with_idx_mapping, prev_dtype, positions_dtype, int32_slots, extra_tokens,
                                             extra_reqs, enabled, seed):
    cp_world_size, cp_rank, cp_interleave = cp
    # The interleave must divide the allocation block of every sharded group.
    assume(all((block_size * kv_blocks) % cp_interleave == 0 for block_size, kv_blocks, sharded in groups if sharded))
    step = make_spec_decode_step(torch.Generator().manual_seed(seed), num_reqs=num_reqs, num_prev_rows=num_prev_rows,
                                 max_query_len=max_query_len, groups=groups, cp_world_size=cp_world_size,
                                 with_idx_mapping=with_idx_mapping, prev_dtype=prev_dtype)
    padded_tokens, padded_reqs = step.num_tokens + extra_tokens, num_reqs + extra_reqs
    slot_dtypes = [torch.int32 if int32_slots and g % 2 else torch.int64 for g in range(len(groups))]
    outputs = fresh_outputs(step, padded_tokens, padded_reqs, positions_dtype, slot_dtypes)
    cp_args = (cp_world_size, cp_rank, cp_interleave)
    enabled = enabled[: len(groups)]
    expected_step, expected = expectation(step, outputs, *cp_args, enabled, padded_tokens, padded_reqs)
    run_fused(step, outputs, *cp_args, slot_mapping_enabled=enabled)
    assert_same_step(step, outputs, expected_step, expected, backend)
    for g, on in enumerate(enabled):
        if not on:
            assert (outputs["slot_mappings"][g] == PAD).all(), f"slot_mappings[{g}] of a disabled group"


@pytest.mark.parametrize("num_reqs", [40, 1500])
def test_equals_the_unfused_ops_on_the_same_backend(backend, num_reqs):
    # 1500 rows take the Triton scratch path, and several token tiles.
    groups = [(16, 1, True), (8, 2, False), (4, 1, True)]
    step = make_spec_decode_step(torch.Generator().manual_seed(num_reqs), num_reqs=num_reqs, num_prev_rows=num_reqs,
                                 max_query_len=4, groups=groups, cp_world_size=2, with_idx_mapping=True)
    padding = dict(num_tokens_padded=step.num_tokens + 9, num_reqs_padded=num_reqs + 5)
    outputs = fresh_outputs(step, padding["num_tokens_padded"] + 3, padding["num_reqs_padded"] + 2)
    unfused_step, unfused = clone_step(step), clone_outputs(outputs)
    expected_step, expected = expectation(step, outputs, 2, 1, 2, [True] * 3, **padding)
    run_unfused(unfused_step, unfused, 2, 1, 2, **padding)
    result = run_fused(step, outputs, 2, 1, 2, **padding)
    assert result.positions is outputs["positions"] and result.slot_mappings[2] is outputs["slot_mappings"][2]
    assert_same_step(step, outputs, unfused_step, unfused, backend)
    assert_same_step(step, outputs, expected_step, expected, f"{backend} expectation")
    assert (outputs["positions"][-3:] == 555).all() and (outputs["seq_lens"][-2:] == 555).all()


# (block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave): runs shorter and
# longer than a kernel block, an interleave of a whole allocation block, many ranks.
LAYOUTS = [(16, 1, 1, 0, 1), (4, 2, 2, 1, 1), (4, 2, 2, 0, 8), (8, 1, 4, 3, 2), (2, 4, 8, 5, 4), (1, 1, 3, 2, 1),
           (16, 2, 4, 1, 32)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=[str(layout) for layout in LAYOUTS])
def test_long_requests_cross_runs_kernel_blocks_and_virtual_blocks(backend, layout):
    # The native op steps through each request's consecutive positions instead of placing every
    # token; long prefills from arbitrary starts cross every boundary it steps over.
    block_size, blocks_per_kv_block, world, rank, interleave = layout
    step = make_spec_decode_step(torch.Generator().manual_seed(sum(layout)), num_reqs=6, num_prev_rows=6,
                                 max_query_len=300, groups=[(block_size, blocks_per_kv_block, True)],
                                 cp_world_size=world, with_idx_mapping=True)
    table = step.block_tables[0]
    table[torch.rand(table.shape, generator=torch.Generator().manual_seed(1)) < 0.05] = -7  # PAD blocks
    outputs = fresh_outputs(step, step.num_tokens + 5, 8)
    unfused_step, unfused = clone_step(step), clone_outputs(outputs)
    expected_step, expected = expectation(step, outputs, world, rank, interleave, [True], step.num_tokens + 5, 8)
    run_unfused(unfused_step, unfused, world, rank, interleave)
    run_fused(step, outputs, world, rank, interleave)
    assert_same_step(step, outputs, unfused_step, unfused, f"{backend} {layout}")
    assert_same_step(step, outputs, expected_step, expected, f"{backend} {layout} expectation")
    assert (outputs["slot_mappings"][0] != PAD).any()


def test_without_groups_it_is_correction_and_positions(backend):
    step = make_spec_decode_step(torch.Generator().manual_seed(2), num_reqs=7, num_prev_rows=9, max_query_len=5,
                                 groups=[])
    outputs = fresh_outputs(step, step.num_tokens + 2, 8)
    unfused_step, unfused = clone_step(step), clone_outputs(outputs)
    expected_step, expected = expectation(step, outputs, 1, 0, 1, [], step.num_tokens + 2, 8)
    run_unfused(unfused_step, unfused)
    assert run_fused(step, outputs).slot_mappings == []
    assert_same_step(step, outputs, unfused_step, unfused, backend)
    assert_same_step(step, outputs, expected_step, expected, f"{backend} expectation")


def test_empty_batch(backend):
    step = make_spec_decode_step(torch.Generator().manual_seed(1), num_reqs=0, num_prev_rows=4, max_query_len=3,
                                 groups=[(16, 1, True)])
    outputs = fresh_outputs(step, 5, 3)
    before = step.correction.clone()
    run_fused(step, outputs)
    assert_same(step.correction.num_computed_tokens, before.num_computed_tokens)
    assert outputs["positions"].tolist() == [0] * 5
    assert outputs["seq_lens"].tolist() == [0] * 3
    assert outputs["slot_mappings"][0].tolist() == [PAD] * 5


def test_allocates_what_the_caller_does_not_pass(backend):
    step = make_spec_decode_step(torch.Generator().manual_seed(6), num_reqs=5, num_prev_rows=5, max_query_len=3,
                                 groups=[(16, 1, True), (4, 1, True)])
    result = specops.prepare_spec_decode_inputs(*step.correction.args(), step.query_start_loc, step.block_tables,
                                                [16, 4])
    assert result.positions.shape == (step.num_tokens,) and result.positions.dtype == torch.int64
    assert result.seq_lens.shape == (5,) and result.seq_lens.dtype == torch.int32
    assert [t.shape for t in result.slot_mappings] == [(step.num_tokens,)] * 2
    one_size = specops.prepare_spec_decode_inputs(i32([3]), i32([0]), i32([-1]), i32([]), i32([]), i32([3]),
                                                  i32([0, 2]), [i32([[1]]), i32([[2]])], 16)
    assert [t.tolist() for t in one_size.slot_mappings] == [[19, 20], [35, 36]]


def _rejected_call():
    step = make_spec_decode_step(torch.Generator().manual_seed(8), num_reqs=4, num_prev_rows=4, max_query_len=3,
                                 groups=[(16, 1, True), (8, 1, True)], with_idx_mapping=True)
    return step, fresh_outputs(step, step.num_tokens + 1, 5)


def test_native_rejects_positions_beyond_a_table_and_writes_nothing():
    step, outputs = _rejected_call()
    step.block_tables[1] = step.block_tables[1][:, :2]  # too short for the corrected positions
    before_step, before = clone_step(step), clone_outputs(outputs)
    with pytest.raises(ValueError, match=r"beyond block_tables\[1\]"):
        run_fused(step, outputs)
    assert_same_step(step, outputs, before_step, before, "rejected")


def test_native_rejects_an_idx_mapping_past_a_table_and_writes_nothing():
    step, outputs = _rejected_call()
    step.idx_mapping[0] = step.block_tables[0].size(0)
    before_step, before = clone_step(step), clone_outputs(outputs)
    with pytest.raises(ValueError, match=r"idx_mapping\[0\] = \d+ is past block_tables\[0\]"):
        run_fused(step, outputs)
    assert_same_step(step, outputs, before_step, before, "rejected")


def _opcheck_args(prev_dtype=torch.int32):
    step = make_spec_decode_step(torch.Generator().manual_seed(11), num_reqs=5, num_prev_rows=6, max_query_len=4,
                                 groups=[(16, 1, True), (4, 2, False)], cp_world_size=2, with_idx_mapping=True,
                                 prev_dtype=prev_dtype)
    outputs = fresh_outputs(step, step.num_tokens + 3, 7)
    sizes = pack_sizes(step.num_tokens + 3, 7, 2, 1, 2, step.block_sizes, step.blocks_per_kv_block, step.cp_sharded,
                       [True, False])
    return (*step.correction.args(), step.query_start_loc, outputs["positions"], outputs["seq_lens"],
            step.block_tables, outputs["slot_mappings"], step.idx_mapping, sizes, [])


@pytest.mark.parametrize("prev_dtype", [torch.int32, torch.int64])
def test_opcheck(prev_dtype):
    torch.library.opcheck(torch.ops.specops.prepare_spec_decode_inputs.default, _opcheck_args(prev_dtype))


def test_compiles_without_graph_break():
    args = _opcheck_args()
    nct, nacc, prev, valid, drafts, cpu, qsl, positions, seq_lens, tables, slots, idx, sizes, _ = args
    layout = SpecDecodeSizes.unpack(sizes, len(tables))

    def step(nct, nacc, prev, valid, drafts, cpu, qsl, positions, seq_lens, table0, table1, slot0, slot1, idx):
        result = specops.prepare_spec_decode_inputs(
            nct, nacc, prev, valid, drafts, cpu + 0, qsl, [table0, table1], layout.block_sizes, positions=positions,
            seq_lens=seq_lens, slot_mappings=[slot0, slot1], blocks_per_kv_block=layout.blocks_per_kv_block,
            cp_sharded=layout.cp_sharded, cp_world_size=layout.cp_world_size, cp_rank=layout.cp_rank,
            cp_interleave=layout.cp_interleave, idx_mapping=idx, num_tokens_padded=layout.num_tokens_padded,
            num_reqs_padded=layout.num_reqs_padded)
        return result.slot_mappings[1] + 1, nct * 2

    tensors = (nct, nacc, prev, valid, drafts, cpu, qsl, positions, seq_lens, *tables, *slots, idx)
    eager = [t.clone() for t in tensors]
    expected = step(*eager)
    actual = torch.compile(step, fullgraph=True, backend="aot_eager")(*tensors)
    assert_same(actual[0], expected[0])
    assert_same(actual[1], expected[1])
    for a, e in zip(tensors, eager):
        assert_same(a, e)


def test_the_op_rejects_a_sizes_list_of_the_wrong_length(backend):
    args = list(_opcheck_args())
    args[-2] = args[-2][:-1]
    with pytest.raises(ValueError, match=r"sizes must have 5 \+ 4 \* len\(block_tables\) = 13 entries"):
        fused_op(*args)  # the selected backend's op, below the keyword wrapper


def _valid_call():
    return dict(num_computed_tokens=i32([10, 20, 30]), num_accepted_tokens=i32([0, 0, 0]), prev_positions=i32([1, 0]),
                valid_sampled_token_count=i32([1, 2]), prev_num_draft_tokens=i32([1, 1]),
                cpu_num_computed_tokens=i32([5, 6]), query_start_loc=i32([0, 2, 3]),
                block_tables=[i32([[1, 2], [3, 4]]), i32([[5, 6, 7, 8], [9, 10, 11, 12]])], block_sizes=[16, 8],
                positions=torch.full((4,), 55, dtype=torch.int64), seq_lens=torch.full((3,), 55, dtype=torch.int32),
                slot_mappings=[torch.full((4,), 55, dtype=torch.int64), torch.full((4,), 55, dtype=torch.int32)],
                blocks_per_kv_block=[1, 1], cp_sharded=[True, False], cp_world_size=1, cp_rank=0, cp_interleave=1,
                idx_mapping=None, num_tokens_padded=4, num_reqs_padded=3)


BAD_INPUTS = [
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([10, 20, 30]))),
    ("num_accepted_tokens", dict(num_accepted_tokens=i32([0]))),
    ("prev_positions", dict(prev_positions=torch.tensor([1.0, 0.0]))),
    ("valid_sampled_token_count", dict(valid_sampled_token_count=torch.tensor([1, 2]))),
    ("prev_num_draft_tokens", dict(prev_num_draft_tokens=i32([[1, 1]]))),
    ("cpu_num_computed_tokens", dict(cpu_num_computed_tokens=i32([5]))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 2, 3]))),
    ("positions", dict(positions=torch.zeros(4))),
    ("seq_lens", dict(seq_lens=torch.zeros(3, dtype=torch.int64))),
    ("num_tokens_padded", dict(num_tokens_padded=5)),
    ("num_reqs_padded", dict(num_reqs_padded=4)),
    (r"block_tables\[1\]", dict(block_tables=[i32([[1, 2], [3, 4]]), torch.zeros(2, 4, dtype=torch.int64)])),
    (r"slot_mappings\[0\]", dict(slot_mappings=[torch.zeros(4), torch.zeros(4, dtype=torch.int32)])),
    (r"slot_mappings\[1\]", dict(slot_mappings=[torch.zeros(4, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)])),
    ("slot_mappings", dict(slot_mappings=[torch.zeros(4, dtype=torch.int64)])),
    (r"block_sizes\[1\]", dict(block_sizes=[16, 0])),
    ("block_sizes", dict(block_sizes=[16, 8, 4])),
    (r"blocks_per_kv_block\[0\]", dict(blocks_per_kv_block=[0, 1])),
    ("cp_sharded", dict(cp_sharded=[True])),
    ("cp_world_size", dict(cp_world_size=0)),
    ("cp_rank", dict(cp_world_size=2, cp_rank=2)),
    ("cp_interleave", dict(cp_world_size=2, cp_interleave=3)),
    ("idx_mapping", dict(idx_mapping=i32([0, 1, 0]))),  # more rows than query_start_loc has requests
    ("idx_mapping", dict(idx_mapping=torch.tensor([0.0, 1.0]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    written = [call["num_computed_tokens"], call["num_accepted_tokens"], call["positions"], call["seq_lens"],
               *call["slot_mappings"]]
    before = [t.clone() for t in written]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.prepare_spec_decode_inputs(**call)
    assert all(torch.equal(t, b) for t, b in zip(written, before))


def test_outputs_sharing_memory_are_rejected(backend):
    call = _valid_call()
    buffer = torch.zeros(8, dtype=torch.int64)
    call["slot_mappings"] = [buffer[:4], buffer[2:6]]
    with pytest.raises(ValueError, match=r"slot_mappings\[1\] must not share memory with slot_mappings\[0\]"):
        specops.prepare_spec_decode_inputs(**call)
    call["slot_mappings"] = [call["positions"], torch.zeros(4, dtype=torch.int64)]
    with pytest.raises(ValueError, match=r"slot_mappings\[0\] must not share memory with positions"):
        specops.prepare_spec_decode_inputs(**call)


def _over(buffer: torch.Tensor, start: int, values: torch.Tensor) -> torch.Tensor:
    view = buffer[start : start + values.numel()]
    view.copy_(values)
    return view


@pytest.mark.parametrize("output", ["slot_mappings[1]", "num_computed_tokens"])
def test_an_output_over_query_start_loc_is_rejected_before_any_write(backend, output):
    """Once: the native op wrote far outside its outputs when an int32 slot mapping or
    num_computed_tokens overlapped query_start_loc (it re-reads query_start_loc while storing)."""
    call = _valid_call()
    buffer = torch.zeros(16, dtype=torch.int32)
    if output == "num_computed_tokens":
        call["num_computed_tokens"] = _over(buffer, 2, call["num_computed_tokens"])
    else:
        call["slot_mappings"] = [call["slot_mappings"][0], _over(buffer, 1, call["slot_mappings"][1])]
    call["query_start_loc"] = _over(buffer, 0, call["query_start_loc"])  # last: it keeps its values
    before = buffer.clone()
    with pytest.raises(ValueError, match=rf"{re.escape(output)} must not share memory with query_start_loc"):
        specops.prepare_spec_decode_inputs(**call)
    assert_same(buffer, before)


def test_idx_mapping_that_is_seq_lens_is_rejected(backend):
    """Once silently wrong slots: the native op read idx_mapping after it had stored seq_lens there."""
    call = _valid_call()
    call["seq_lens"] = i32([0, 1, 99])
    call["idx_mapping"] = call["seq_lens"][:2]
    before = call["seq_lens"].clone()
    with pytest.raises(ValueError, match="seq_lens must not share memory with idx_mapping"):
        specops.prepare_spec_decode_inputs(**call)
    assert_same(call["seq_lens"], before)


def test_correction_inputs_may_share_memory_with_outputs(backend):
    """They are read in full before the first store, on every backend: the result is the one
    their values give in buffers of their own."""
    call = _valid_call()
    call["prev_positions"] = i32([1, -1])  # row 0 continues row 1, row 1 takes the host count
    buffer = torch.full((8,), 7, dtype=torch.int32)
    call["seq_lens"] = buffer[:3]
    call["cpu_num_computed_tokens"] = _over(buffer, 1, call["cpu_num_computed_tokens"])
    separate = {**call, "seq_lens": call["seq_lens"].clone(), "cpu_num_computed_tokens": call["cpu_num_computed_tokens"].clone(),
                "num_computed_tokens": call["num_computed_tokens"].clone(),
                "num_accepted_tokens": call["num_accepted_tokens"].clone(), "positions": call["positions"].clone(),
                "slot_mappings": [t.clone() for t in call["slot_mappings"]]}
    expected = specops.prepare_spec_decode_inputs(**separate)
    actual = specops.prepare_spec_decode_inputs(**call)
    assert_same(actual.seq_lens, expected.seq_lens)
    assert_same(actual.positions, expected.positions)
    assert actual.seq_lens.tolist() == [24, 7, 0]  # 20 + 2 accepted + 2 tokens; host 6 + 1 token; padding


def test_a_slot_past_an_int32_slot_mapping_is_pad_on_device_paths_and_an_error_on_the_host():
    """Once wrapped (2^32 + 6 to 6, a real slot) on every backend. Group 1 has blocks of 8:
    tokens 0 and 1 (positions 22, 23) read column 2 of row 0, whose id 2^29 puts them at 2^32 + 6
    and 2^32 + 7; token 2 (position 11) reads column 1 of row 1, id 10."""
    for backend in BACKENDS:
        call = _valid_call()
        call["block_tables"] = [call["block_tables"][0], i32([[5, 6, 2**29, 8], [9, 10, 11, 12]])]
        with specops.backend(backend):
            if backend == "native":
                before = call["slot_mappings"][1].clone()
                with pytest.raises(ValueError, match=r"slot_mappings\[1\] is int32, but token 0 has slot 4294967302"):
                    specops.prepare_spec_decode_inputs(**call)
                assert_same(call["slot_mappings"][1], before)
                assert call["num_computed_tokens"].tolist() == [10, 20, 30]  # nothing written
            else:
                result = specops.prepare_spec_decode_inputs(**call)
                assert result.positions.tolist() == [22, 23, 11, 0]
                assert result.slot_mappings[1].tolist() == [PAD, PAD, 10 * 8 + 3, PAD], backend


def test_a_negative_token_count_is_written_whole_or_not_at_all():
    """query_start_loc[R] < 0: the reference once wrote the count correction and then raised
    torch.arange's error. Device paths now finish the step (no real token); the host op rejects
    it before any write."""
    for backend in BACKENDS:
        call = _valid_call()
        call["query_start_loc"] = i32([0, 2, -1])
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match="query_start_loc must be non-decreasing"):
                    specops.prepare_spec_decode_inputs(**call)
                assert call["num_computed_tokens"].tolist() == [10, 20, 30]
                continue
            result = specops.prepare_spec_decode_inputs(**call)
        assert call["num_computed_tokens"].tolist() == [22, 11, 30], backend
        assert result.positions.tolist() == [0, 0, 0, 0], backend
        assert result.seq_lens.tolist() == [22 + 2, 11 - 3, 0], backend
        assert result.slot_mappings[0].tolist() == [PAD] * 4, backend


def test_more_groups_than_one_launch_takes(backend):
    # The Triton kernel takes MAX_GROUPS groups per launch: the next launches map the rest.
    from specops.triton_kernels._groups import MAX_GROUPS

    groups = [GROUP_CHOICES[g % len(GROUP_CHOICES)] for g in range(MAX_GROUPS + 2)]
    step = make_spec_decode_step(torch.Generator().manual_seed(7), num_reqs=5, num_prev_rows=4, max_query_len=3,
                                 groups=groups, cp_world_size=2, with_idx_mapping=True)
    padding = dict(num_tokens_padded=step.num_tokens + 2, num_reqs_padded=6)
    outputs = fresh_outputs(step, step.num_tokens + 2, 6)
    enabled = [g != 1 for g in range(len(groups))]
    expected_step, expected = expectation(step, outputs, 2, 1, 1, enabled, **padding)
    run_fused(step, outputs, 2, 1, 1, slot_mapping_enabled=enabled, **padding)
    assert_same_step(step, outputs, expected_step, expected, backend)
