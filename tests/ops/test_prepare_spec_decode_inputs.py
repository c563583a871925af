"""prepare_spec_decode_inputs: every backend against the independent expectation (the per-op ones of
tests/expectations.py in sequence), equal to the unfused sequence on every backend, opcheck,
compile, and more groups than one launch takes. Rejected calls and bad input are in
test_prepare_spec_decode_inputs_rejects.py; the shared parts in spec_decode_cases.py."""

from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from spec_decode_cases import (
    PAD,
    assert_same_step,
    clone_outputs,
    clone_step,
    expectation,
    fresh_outputs,
    i32,
    run_fused,
    run_unfused,
)
from strategies import assert_compiles_like_eager, assert_same, make_spec_decode_step

import specops
from specops.ops.registry import OPS


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


@pytest.mark.parametrize("positions_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("slots_dtype", [torch.int32, torch.int64])
def test_requests_without_tokens_near_the_end_write_nothing_past_the_padding(backend, positions_dtype, slots_dtype):
    # The host body writes runs in whole chunks (8 int32 or 4 int64 values) and lets the next
    # request rewrite the excess: a request without tokens ending just before num_tokens_padded
    # once wrote one int32 position past the output. The outputs are views of longer buffers
    # whose tail must stay as it was, for every place the empty request can end at.
    room = 16
    table = torch.arange(1, 9, dtype=torch.int32).reshape(2, 4)
    for first_len in range(room + 1):
        position_buffer = torch.full((room + 8,), 777, dtype=positions_dtype)
        slot_buffer = torch.full((room + 8,), 777, dtype=slots_dtype)
        result = specops.prepare_spec_decode_inputs(
            i32([10, 20]), i32([0, 0]), i32([-1, -1]), i32([1]), i32([1]), i32([3, 5]),
            i32([0, first_len, first_len]), [table], 16, positions=position_buffer[:room],
            slot_mappings=[slot_buffer[:room]], num_tokens_padded=room, num_reqs_padded=2)
        assert position_buffer[room:].tolist() == [777] * 8, first_len
        assert slot_buffer[room:].tolist() == [777] * 8, first_len
        assert result.positions.tolist() == list(range(3, 3 + first_len)) + [0] * (room - first_len)
        expected_slots = [1 * 16 + 3 + k if 3 + k < 16 else 2 * 16 + 3 + k - 16 for k in range(first_len)]
        assert result.slot_mappings[0].tolist() == expected_slots + [PAD] * (room - first_len)
        assert result.seq_lens.tolist() == [3 + first_len, 5]


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
       count_dtypes=st.tuples(*[st.sampled_from([torch.int32, torch.int64])] * 2), seed=st.integers(0, 2**16))
def test_matches_expectation_on_random_steps(backend, num_reqs, num_prev_rows, max_query_len, groups, cp,
                                             with_idx_mapping, prev_dtype, positions_dtype, int32_slots, extra_tokens,
                                             extra_reqs, enabled, count_dtypes, seed):
    cp_world_size, cp_rank, cp_interleave = cp
    # The interleave must divide the allocation block of every sharded group.
    assume(all((block_size * kv_blocks) % cp_interleave == 0 for block_size, kv_blocks, sharded in groups if sharded))
    step = make_spec_decode_step(torch.Generator().manual_seed(seed), num_reqs=num_reqs, num_prev_rows=num_prev_rows,
                                 max_query_len=max_query_len, groups=groups, cp_world_size=cp_world_size,
                                 with_idx_mapping=with_idx_mapping, prev_dtype=prev_dtype,
                                 valid_dtype=count_dtypes[0], host_dtype=count_dtypes[1])
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


# vllm-ascend's valid counts are int64 (vllm_ascend/spec_decode/llm_base_proposer.py counts them
# with valid_mask.sum(dim=1)); its update_num_computed_tokens_for_batch_change
# (vllm_ascend/spec_decode/utils.py) takes them by `.int()`. The fused op takes them, and int64
# host counts, as correct_num_computed_tokens does: the step equals the all-int32 one.
@pytest.mark.parametrize("valid_dtype,host_dtype",
                         [(torch.int64, torch.int32), (torch.int32, torch.int64), (torch.int64, torch.int64)])
def test_int64_valid_and_host_counts_like_the_peer(backend, valid_dtype, host_dtype):
    groups = [(16, 1, True), (4, 2, False)]
    step = make_spec_decode_step(torch.Generator().manual_seed(5), num_reqs=30, num_prev_rows=30, max_query_len=4,
                                 groups=groups, cp_world_size=2, with_idx_mapping=True)
    wide_step = clone_step(step)
    wide_step.correction.valid_sampled_token_count = step.correction.valid_sampled_token_count.to(valid_dtype)
    wide_step.correction.cpu_num_computed_tokens = step.correction.cpu_num_computed_tokens.to(host_dtype)
    outputs = fresh_outputs(step, step.num_tokens + 2, 32)
    wide_outputs = clone_outputs(outputs)
    run_fused(step, outputs, 2, 1, 2)
    run_fused(wide_step, wide_outputs, 2, 1, 2)
    assert_same_step(wide_step, wide_outputs, step, outputs, f"{backend} {valid_dtype} {host_dtype}")
    assert not torch.equal(outputs["positions"], torch.zeros_like(outputs["positions"]))


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


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1)])
def test_decode_batch_without_padding_or_idx_mapping(backend, world, rank):
    """The bench's shape of call: one run of a few tokens a request, outputs of exactly T tokens
    (the last request's chunk has no room past it), no idx_mapping, and a table with fewer rows
    than requests (the last ones get PAD). Some block ids are negative."""
    groups = [(16, 1, True), (8, 1, True), (4, 1, False)]
    step = make_spec_decode_step(torch.Generator().manual_seed(11 + world), num_reqs=70, num_prev_rows=70,
                                 max_query_len=5, groups=groups, cp_world_size=world)
    step.block_tables = [table[:67] for table in step.block_tables]
    step.block_tables[1][torch.rand(step.block_tables[1].shape, generator=torch.Generator().manual_seed(3)) < 0.1] = -1
    outputs = fresh_outputs(step, step.num_tokens, 70)
    unfused_step, unfused = clone_step(step), clone_outputs(outputs)
    expected_step, expected = expectation(step, outputs, world, rank, 1, [True] * 3, step.num_tokens, 70)
    run_unfused(unfused_step, unfused, world, rank)
    run_fused(step, outputs, world, rank)
    assert_same_step(step, outputs, unfused_step, unfused, backend)
    assert_same_step(step, outputs, expected_step, expected, f"{backend} expectation")
    last = step.query_start_loc[67].item()
    assert all((slots[last:] == PAD).all() for slots in outputs["slot_mappings"])


@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1), (4, 2)])
def test_decode_runs_across_kernel_blocks_and_ranks(backend, world, rank, slot_dtype):
    """Decode queries of 1-7 tokens on kernel blocks of 2 to 8: many runs go on into the next
    block (whose id is sometimes negative), and under CP without interleave each request's
    tokens alternate between ranks (the native op stores both a vector at a time). Outputs of
    exactly T tokens, so the batch's last requests have no room for whole vectors."""
    groups = [(4, 1, True), (2, 1, False), (8, 1, True), (2, 1, True)]
    step = make_spec_decode_step(torch.Generator().manual_seed(world + rank), num_reqs=90, num_prev_rows=90,
                                 max_query_len=7, groups=groups, cp_world_size=world)
    pad_blocks = torch.Generator().manual_seed(17)
    for table in step.block_tables:
        table[torch.rand(table.shape, generator=pad_blocks) < 0.15] = -1
    outputs = fresh_outputs(step, step.num_tokens, 90, torch.int64, [slot_dtype] * len(groups))
    expected_step, expected = expectation(step, outputs, world, rank, 1, [True] * len(groups), step.num_tokens, 90)
    run_fused(step, outputs, world, rank)
    assert_same_step(step, outputs, expected_step, expected, f"{backend} W={world} {slot_dtype}")
    for slots in outputs["slot_mappings"]:
        assert (slots != PAD).any() and (slots == PAD).any()


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


def _opcheck_args(prev_dtype=torch.int32):
    step = make_spec_decode_step(torch.Generator().manual_seed(11), num_reqs=5, num_prev_rows=6, max_query_len=4,
                                 groups=[(16, 1, True), (4, 2, False)], cp_world_size=2, with_idx_mapping=True,
                                 prev_dtype=prev_dtype)
    outputs = fresh_outputs(step, step.num_tokens + 3, 7)
    return (*step.correction.args(), step.query_start_loc, outputs["positions"], outputs["seq_lens"],
            step.block_tables, outputs["slot_mappings"], step.idx_mapping, step.num_tokens + 3, 7, 2, 1, 2,
            list(step.block_sizes), list(step.blocks_per_kv_block), list(step.cp_sharded), [True, False], [],
            False, [], 0, [])


@pytest.mark.parametrize("prev_dtype", [torch.int32, torch.int64])
def test_opcheck(prev_dtype):
    torch.library.opcheck(torch.ops.specops.prepare_spec_decode_inputs.default, _opcheck_args(prev_dtype))


def test_compiles_without_graph_break():
    args = _opcheck_args()
    nct, nacc, prev, valid, drafts, cpu, qsl, positions, seq_lens, tables, slots, idx = args[:12]
    tokens_padded, reqs_padded, world, rank, interleave, block_sizes, kv_blocks, sharded, _, _ = args[12:22]

    def step(nct, nacc, prev, valid, drafts, cpu, qsl, positions, seq_lens, table0, table1, slot0, slot1, idx):
        result = specops.prepare_spec_decode_inputs(
            nct, nacc, prev, valid, drafts, cpu + 0, qsl, [table0, table1], block_sizes, positions=positions,
            seq_lens=seq_lens, slot_mappings=[slot0, slot1], blocks_per_kv_block=kv_blocks, cp_sharded=sharded,
            cp_world_size=world, cp_rank=rank, cp_interleave=interleave, idx_mapping=idx,
            num_tokens_padded=tokens_padded, num_reqs_padded=reqs_padded)
        return result.slot_mappings[1] + 1, nct * 2

    tensors = (nct, nacc, prev, valid, drafts, cpu, qsl, positions, seq_lens, *tables, *slots, idx)
    assert_compiles_like_eager(step, *tensors)


@pytest.mark.parametrize("name", ["block_sizes", "blocks_per_kv_block", "cp_sharded", "slot_mapping_enabled"])
def test_the_op_rejects_a_group_list_of_the_wrong_length(backend, name):
    args = list(_opcheck_args())
    at = 17 + ["block_sizes", "blocks_per_kv_block", "cp_sharded", "slot_mapping_enabled"].index(name)
    args[at] = args[at][:-1]
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    with pytest.raises(ValueError, match=rf"{name} must have one entry per block table \(len\(block_tables\) = 2\), "
                                         r"got 1"):
        OPS["prepare_spec_decode_inputs"](*args)  # the selected backend's op, below the keyword wrapper
    for a, b in zip([a for a in args if isinstance(a, torch.Tensor)], before):
        assert torch.equal(a, b)


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
