"""The runner step: positions past a request's allocated blocks, PersistentMappings.prepare_step
and draft_inputs, and the example loop on two CP ranks (examples/async_cp_loop.py).

Expectations are written out by hand or computed in plain Python from the slot formula (a
position's block column is position // block_size on one rank), never from the ops.
"""

from __future__ import annotations

import pytest
import repo_modules
import torch
from conftest import BACKENDS

import specops
from specops import MappingGroup, PersistentMappings, drafting

NULL = specops.NULL_BLOCK_ID
PAD = specops.PAD_SLOT_ID


def i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def i64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


# ------------------------------------------------------------ positions past the allocated blocks

# Row 1 holds 2 blocks (7, 9) of 4 tokens in a table 4 columns wide; its count says 2. Positions
# 6, 7 are in block 9; 8 and 9 need a third block the runner never allocated.
TABLE = torch.tensor([[1, 2, 3, 4], [7, 9, NULL, NULL]], dtype=torch.int32)
COUNTS = i32(4, 2)
PAST_MESSAGE = r"position 8 of request 0 is past its allocated blocks: .*row 1 .* holds num_blocks\[1\] = 2 blocks"


def test_a_position_past_the_row_count_is_an_error_on_the_host_and_pad_on_device(backend):
    out = torch.full((5,), 55, dtype=torch.int64)
    args = (i32(0, 4), i64(6, 7, 8, 9), TABLE, 4)
    if backend == "native":
        with pytest.raises(ValueError, match=PAST_MESSAGE):
            specops.compute_slot_mapping(*args, out=out, idx_mapping=i32(1), num_blocks=COUNTS)
        assert out.tolist() == [55] * 5  # rejected before any write
    else:
        specops.compute_slot_mapping(*args, out=out, idx_mapping=i32(1), num_blocks=COUNTS)
        assert out.tolist() == [38, 39, PAD, PAD, PAD]  # never slots 0 and 1 of the null block
    # Without the counts the table's width is all the op knows: the null block's slots.
    specops.compute_slot_mapping(*args, out=out, idx_mapping=i32(1))
    assert out.tolist() == [38, 39, 0, 1, PAD]


def test_counts_bound_every_cp_layout(backend):
    """Two ranks, interleave 2: rank 1 stores offsets 2, 3, 6, 7 of each 8-token virtual block,
    locally at 0, 1, 2, 3 of its 4-token block. Row 0 holds one block (5): position 10 (virtual
    block 1) is past it on rank 1; position 8 belongs to rank 0 and is PAD, never an error."""
    out = torch.full((3,), 55, dtype=torch.int64)
    table = torch.tensor([[5, 6]], dtype=torch.int32)
    call = dict(out=out, cp_world_size=2, cp_rank=1, cp_interleave=2, num_blocks=i32(1))
    specops.compute_slot_mapping(i32(0, 3), i64(2, 7, 8), table, 4, **call)
    assert out.tolist() == [20, 23, PAD]
    if backend == "native":
        with pytest.raises(ValueError, match="position 10 of request 0 is past its allocated blocks"):
            specops.compute_slot_mapping(i32(0, 3), i64(2, 7, 10), table, 4, **call)
    else:
        specops.compute_slot_mapping(i32(0, 3), i64(2, 7, 10), table, 4, **call)
        assert out.tolist() == [20, 23, PAD]


def test_num_blocks_is_checked_like_every_tensor():
    for bad, message in [(i32(2), r"num_blocks must have one entry per row of block_table \(2\)"),
                         (i64(2, 2), "num_blocks must have dtype int32, got int64")]:
        with pytest.raises(ValueError, match=message):
            specops.compute_slot_mapping(i32(0, 1), i64(0), TABLE, 4, num_blocks=bad)


def _fused_call(num_blocks):
    # One request on row 1, 3 tokens from its corrected count: 1 + 5 = 6 (6, 7, 8).
    return dict(num_computed_tokens=i32(1), num_accepted_tokens=i32(0), prev_positions=i32(0),
                valid_sampled_token_count=i32(5), prev_num_draft_tokens=i32(4), cpu_num_computed_tokens=i32(0),
                query_start_loc=i32(0, 3), block_tables=[TABLE], block_sizes=4,
                positions=torch.full((4,), 55, dtype=torch.int64), seq_lens=torch.full((1,), 55, dtype=torch.int32),
                slot_mappings=[torch.full((4,), 55, dtype=torch.int64)], idx_mapping=i32(1), num_blocks=num_blocks)


def test_the_fused_op_takes_the_counts_too(backend):
    call = _fused_call([COUNTS])
    if backend == "native":
        with pytest.raises(ValueError, match=PAST_MESSAGE.replace("num_blocks", "num_blocks\\[0\\]")):
            specops.prepare_spec_decode_inputs(**call)
        assert call["num_computed_tokens"].tolist() == [1] and call["positions"].tolist() == [55] * 4
        return
    specops.prepare_spec_decode_inputs(**call)
    assert call["positions"].tolist() == [6, 7, 8, 0]
    assert call["slot_mappings"][0].tolist() == [38, 39, PAD, PAD]
    call = _fused_call(None)
    specops.prepare_spec_decode_inputs(**call)
    assert call["slot_mappings"][0].tolist() == [38, 39, 0, PAD]


# ------------------------------------------------------------ PersistentMappings

def _two_groups(**kwargs) -> PersistentMappings:
    groups = [MappingGroup(4, name="full"), MappingGroup(2, cp_sharded=False, sliding_window_reach=3, name="swa")]
    return PersistentMappings(groups, max_num_reqs=3, max_num_blocks_per_req=[3, 6], max_num_tokens=8, **kwargs)


def _buffers(mappings: PersistentMappings) -> list[torch.Tensor]:
    return [*mappings.source_block_tables, *mappings.num_blocks, *mappings.block_tables, *mappings.slot_mappings,
            mappings.positions, mappings.seq_lens]


def test_refresh_with_draft_positions_past_the_allocated_blocks(backend):
    """The runner bug the issue describes: the lookahead blocks forgotten. Row 0 holds one block
    per group (4 and 2 tokens); its draft positions pass the second group's block at 2 and the
    first group's at 4 (the host checks group by group)."""
    mappings = _two_groups()
    mappings.append_blocks(0, [[5], [6]])
    mappings.apply_staged()
    before = [t.clone() for t in _buffers(mappings)]
    args = (i32(0), i32(0, 4), i64(1, 2, 3, 4))
    if backend == "native":
        with pytest.raises(ValueError, match="position 4 of request 0 is past its allocated blocks"):
            mappings.refresh(*args, num_reqs_padded=1, num_tokens_padded=4)
        assert all(torch.equal(t, old) for t, old in zip(_buffers(mappings), before))
        return
    mappings.refresh(*args, num_reqs_padded=1, num_tokens_padded=4)
    assert mappings.slot_mappings[0][:4].tolist() == [21, 22, 23, PAD]
    assert mappings.slot_mappings[1][:4].tolist() == [13, PAD, PAD, PAD]


def _correction(prev_count: int, valid: int, drafts: int, host: int) -> dict:
    return dict(num_computed_tokens=i32(prev_count, 0), num_accepted_tokens=i32(0, 0), prev_positions=i32(0, -1),
                valid_sampled_token_count=i32(valid), prev_num_draft_tokens=i32(drafts),
                cpu_num_computed_tokens=i32(99, host))


def _step_inputs():
    """Two requests: batch row 0 continues (count 5 + 3 accepted = 8, query 3: 8, 9, 10) on
    request row 2; batch row 1 is new on row 0 (host count 0, a 2-token prefill chunk)."""
    correction = _correction(prev_count=5, valid=3, drafts=2, host=0)
    return (*correction.values(), i32(0, 3, 5), i32(2, 0))


def test_prepare_step_hand_computed(backend):
    mappings = _two_groups()
    mappings.append_blocks(2, [[7, 8, 9], [1, 2, 3, 4, 5, 6]])
    mappings.append_blocks(0, [[4], [9]])
    mappings.apply_staged()
    step = mappings.prepare_step(*_step_inputs(), num_reqs_padded=3, num_tokens_padded=6)
    assert step.positions.tolist() == [8, 9, 10, 0, 1, 0]
    assert step.seq_lens.tolist() == [11, 2, 0]
    # full (block 4): 8, 9, 10 -> column 2, block 9 (36, 37, 38); 0, 1 -> block 4 (16, 17).
    assert step.slot_mappings["full"][:6].tolist() == [36, 37, 38, 16, 17, PAD]
    # swa (block 2): 8, 9 -> column 4, block 5 (10, 11); 10 -> column 5, block 6 (12).
    assert step.slot_mappings["swa"][:6].tolist() == [10, 11, 12, 18, 19, PAD]
    assert step.block_tables["full"].tolist() == [[7, 8, 9], [4, NULL, NULL], [NULL] * 3]
    # The window reaches 3 tokens below position 8: entries below (8 - 3) // 2 = 2 are NULL.
    assert step.block_tables["swa"].tolist() == [[NULL, NULL, 3, 4, 5, 6], [9] + [NULL] * 5, [NULL] * 6]
    assert step.block_tables["swa"] is mappings.block_tables[1]
    assert step.slot_mappings["full"] is mappings.slot_mappings[0]


def test_prepare_step_takes_int64_valid_and_host_counts(backend):
    """vllm-ascend's valid counts are int64 (vllm_ascend/spec_decode/llm_base_proposer.py sums a
    mask), which its update_num_computed_tokens_for_batch_change (vllm_ascend/spec_decode/utils.py)
    takes by `.int()`: prepare_step passes them, and int64 host counts, to the fused op, and the
    step is the int32 one (test_prepare_step_hand_computed)."""
    mappings = _two_groups()
    mappings.append_blocks(2, [[7, 8, 9], [1, 2, 3, 4, 5, 6]])
    mappings.append_blocks(0, [[4], [9]])
    mappings.apply_staged()
    inputs = list(_step_inputs())
    inputs[3], inputs[5] = inputs[3].long(), inputs[5].long()  # valid_sampled_token_count, cpu_num_computed_tokens
    step = mappings.prepare_step(*inputs, num_reqs_padded=3, num_tokens_padded=6)
    assert inputs[0][:2].tolist() == [8, 0] and inputs[1][:2].tolist() == [3, 0]
    assert step.positions.tolist() == [8, 9, 10, 0, 1, 0]
    assert step.seq_lens.tolist() == [11, 2, 0]
    assert step.slot_mappings["full"][:6].tolist() == [36, 37, 38, 16, 17, PAD]
    assert step.slot_mappings["swa"][:6].tolist() == [10, 11, 12, 18, 19, PAD]


def test_prepare_step_under_cp_and_a_group_without_slot_mapping(backend):
    """Rank 1 of 2: the full group stores odd positions (local offset position // 2); the
    unsharded group stores all; a third group has no slot mapping. No window masking under CP."""
    groups = [MappingGroup(4, name="full"), MappingGroup(2, cp_sharded=False, sliding_window_reach=3, name="swa"),
              MappingGroup(8, slot_mapping_enabled=False, name="off")]
    mappings = PersistentMappings(groups, max_num_reqs=3, max_num_blocks_per_req=6, max_num_tokens=8,
                                  cp_world_size=2, cp_rank=1)
    mappings.append_blocks(2, [[7, 8], [1, 2, 3, 4, 5, 6], [3]])
    mappings.append_blocks(0, [[4], [9], []])
    mappings.apply_staged()
    step = mappings.prepare_step(*_step_inputs(), num_reqs_padded=2, num_tokens_padded=6)
    assert step.positions.tolist() == [8, 9, 10, 0, 1, 0]
    # 8 and 10 are rank 0's; 9 -> virtual block 1 (column 1, block 8), local offset 0.
    assert step.slot_mappings["full"][:6].tolist() == [PAD, 32, PAD, PAD, 16, PAD]
    assert step.slot_mappings["swa"][:6].tolist() == [10, 11, 12, 18, 19, PAD]
    assert step.slot_mappings["off"][:6].tolist() == [PAD] * 6
    assert step.block_tables["swa"][:2].tolist() == [[1, 2, 3, 4, 5, 6], [9] + [NULL] * 5]
    assert step.block_tables["off"][:2].tolist() == [[3] + [NULL] * 5, [NULL] * 6]


def test_a_rejected_step_changes_nothing():
    """Row 2 holds 2 full-group blocks: position 8 needs a third. The host rejects the step before
    any write (the correction's counts included); device paths write PAD there instead."""
    mappings = _two_groups()
    mappings.append_blocks(2, [[7, 8], [1, 2, 3, 4, 5, 6]])
    mappings.append_blocks(0, [[4], [9]])
    mappings.apply_staged()
    inputs = _step_inputs()
    before = [t.clone() for t in _buffers(mappings) + list(inputs[:2])]
    with specops.backend("native"):
        with pytest.raises(ValueError, match=r"position 8 of request 0 is past its allocated blocks: it needs block "
                                             r"2 of row 2 of block_tables\[0\], which holds num_blocks\[0\]\[2\] = 2"):
            mappings.prepare_step(*inputs, num_reqs_padded=3, num_tokens_padded=6)
    assert all(torch.equal(t, old) for t, old in zip(_buffers(mappings) + list(inputs[:2]), before))
    for backend in [b for b in BACKENDS if b != "native"]:
        with specops.backend(backend):
            step = mappings.prepare_step(*_step_inputs(), num_reqs_padded=3, num_tokens_padded=6)
        assert step.slot_mappings["full"][:6].tolist() == [PAD, PAD, PAD, 16, 17, PAD], backend


@pytest.mark.parametrize("change,message", [
    (dict(num_reqs_padded=1), r"num_reqs_padded must be in \[R = 2, max_num_reqs = 3\]"),
    (dict(num_tokens_padded=9), r"num_tokens_padded must be in \[0, max_num_tokens = 8\]"),
    (dict(num_tokens_padded=4), "num_tokens_padded"),  # below query_start_loc[R] = 5
])
def test_prepare_step_rejects_bad_sizes_and_writes_nothing(change, message):
    mappings = _two_groups()
    mappings.append_blocks(2, [[7, 8, 9], [1, 2, 3, 4, 5, 6]])
    mappings.apply_staged()
    inputs = _step_inputs()
    before = [t.clone() for t in _buffers(mappings) + list(inputs[:2])]
    with pytest.raises(ValueError, match=message):
        mappings.prepare_step(*inputs, **{"num_reqs_padded": 3, "num_tokens_padded": 6, **change})
    assert all(torch.equal(t, old) for t, old in zip(_buffers(mappings) + list(inputs[:2]), before))


def test_group_names():
    mappings = _two_groups()
    assert mappings.group_names == ("full", "swa")
    assert list(mappings.block_tables_by_name) == ["full", "swa"]
    unnamed = PersistentMappings([MappingGroup(4), MappingGroup(2)], max_num_reqs=1, max_num_blocks_per_req=1,
                                 max_num_tokens=1)
    assert unnamed.group_names == ("group0", "group1")
    with pytest.raises(ValueError, match=r"groups\[1\].name must be a string no other group has, got 'a'"):
        PersistentMappings([MappingGroup(4, name="a"), MappingGroup(2, name="a")], max_num_reqs=1,
                           max_num_blocks_per_req=1, max_num_tokens=1)


def test_draft_inputs_hand_the_same_buffers_by_name():
    mappings = _two_groups()
    query_start_loc = i32(0, 3, 5)
    common = mappings.draft_inputs(query_start_loc, query_start_loc.clone(), None, num_reqs=2, num_actual_tokens=5,
                                   num_input_tokens=8)
    assert isinstance(common, drafting.CommonDraftInputs)
    assert common.positions is mappings.positions and common.seq_lens is mappings.seq_lens
    for g, name in enumerate(mappings.group_names):
        assert common.block_tables[name] is mappings.block_tables[g]
        assert common.slot_mappings[name] is mappings.slot_mappings[g]


def test_draft_inputs_after_a_draft_step_read_its_positions(backend):
    """A later draft pass: advance_draft_step writes the mappings' seq_lens and slot mappings,
    and draft_inputs(positions=step.positions) hands them on with the step's one token per
    request. Row 1 holds block 2 (full, 4 tokens) and 3, 4 (swa, 2 tokens); row 0 blocks 5, 7
    and 6, 8, 9, 11."""
    mappings = _two_groups()
    mappings.append_blocks(0, [[5, 7], [6, 8, 9, 11]])
    mappings.append_blocks(1, [[2], [3, 4]])
    mappings.apply_staged()
    mappings.positions[:3] = i64(1, 2, 5)
    mappings.seq_lens[:2] = i32(3, 7)
    query_start_loc = torch.full((4,), 9, dtype=torch.int32)
    step = mappings.advance_draft_step(i32(1, 0), max_model_len=16, token_indices=i32(0, 2),
                                       num_rejected_tokens=i32(0, 1), query_start_loc=query_start_loc,
                                       num_reqs_padded=3)
    common = mappings.draft_inputs(step.query_start_loc, step.query_start_loc.clone(), None, num_reqs=2,
                                   num_actual_tokens=2, num_input_tokens=3, positions=step.positions)
    assert common.positions is step.positions and common.positions.tolist() == [2, 6]
    assert common.seq_lens is mappings.seq_lens and common.seq_lens.tolist() == [4, 7, 0]  # 3 + 1; 7 - 1 rejected + 1
    assert common.query_start_loc.tolist() == [0, 1, 2, 2]
    # full: position 2 of block 2 -> 10, position 6 of block 7 -> 30; swa: 2 of block 4 -> 8, 6 of block 11 -> 22.
    assert common.slot_mappings["full"][:2].tolist() == [10, 30]
    assert common.slot_mappings["swa"][:2].tolist() == [8, 22]


# ------------------------------------------------------------ the example

def test_the_example_loop_runs_100_steps_against_its_ground_truth():
    example = repo_modules.load("examples/async_cp_loop.py")
    summary = example.main(steps=100, seed=0)
    # The loop went through what it claims: requests finished, decodes with drafts, blocks.
    assert summary["finished"] >= 10 and summary["decode_rows"] >= 100 and summary["blocks"] > 100
