"""PersistentMappings: in-place refresh of every group's captured buffers, per-group widths,
row moves and swaps, sliding-window masking, and bad input. How staged writes reach the device
(launches, growth, capture, allocations, op counts, torch.compile) is in
test_persistent_staging.py; the scheduler model that is the ground truth in persistent_cases.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import BACKENDS
from persistent_cases import (
    CP_CONFIGS,
    MAX_SEQ_LEN,
    NULL,
    PAD,
    Scheduler,
    all_buffers,
    make_mappings,
)

import specops
from specops import MappingGroup, PersistentMappings


@pytest.mark.parametrize("cp", CP_CONFIGS)
def test_many_refreshes_match_a_fresh_computation(backend, cp):
    steps = 240 if backend == "native" else 30
    mappings = make_mappings(cp)
    addresses = [t.data_ptr() for t in all_buffers(mappings)]
    scheduler = Scheduler(mappings, cp, seed=len(backend) * 31 + cp[0], max_seq_len=MAX_SEQ_LEN)
    batch_sizes = set()
    for _ in range(steps):
        step = scheduler.step()
        step.refresh(mappings)
        batch_sizes.add(step.idx_mapping.numel())
        assert [t.data_ptr() for t in all_buffers(mappings)] == addresses
        scheduler.check_sources()
        scheduler.check_captured(step, mappings.block_tables, mappings.slot_mappings)
    assert len(batch_sizes) >= 8  # the batch really grew and shrank


def test_hand_computed():
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(4, 2, cp_sharded=False)], max_num_reqs=4,
                                  max_num_blocks_per_req=6, max_num_tokens=10, cp_world_size=2, cp_rank=1)
    mappings.append_blocks(0, [[5, 6], [1, 2, 3]])
    mappings.append_blocks(2, [[7], [4]])
    mappings.append_blocks(0, [[9], [8]])
    assert mappings.num_blocks[0].tolist() == [0, 0, 0, 0]  # staged, not applied yet
    mappings.apply_staged()
    assert mappings.num_blocks[0].tolist() == [3, 0, 1, 0]
    assert mappings.num_blocks[1].tolist() == [4, 0, 1, 0]
    assert mappings.source_block_tables[0][0].tolist() == [5, 6, 9, 0, 0, 0]
    mappings.refresh(torch.tensor([2, 0], dtype=torch.int32), torch.tensor([0, 1, 5], dtype=torch.int32),
                     torch.tensor([3, 10, 11, 12, 13]), num_reqs_padded=3, num_tokens_padded=7)
    assert mappings.block_tables[0][:3].tolist() == [[7, 0, 0, 0, 0, 0], [5, 6, 9, 0, 0, 0], [0] * 6]
    assert mappings.block_tables[1][:3].tolist() == [[4, 0, 0, 0, 0, 0], [1, 2, 3, 8, 0, 0], [0] * 6]
    # Group 0, W = 2, rank 1: odd positions are local; local offset = position // 2.
    # Position 3 of row 2 -> block 7, offset 1; 11 -> block 5, offset 5; 13 -> offset 6.
    assert mappings.slot_mappings[0][:7].tolist() == [113, PAD, 85, PAD, 86, PAD, PAD]
    # Group 1 is not sharded: position 3 of row 2 -> block 4 slot 19; 10, 11 -> block 3 (14, 15);
    # 12, 13 -> column 3, block 8 (32, 33).
    assert mappings.slot_mappings[1][:7].tolist() == [19, 14, 15, 32, 33, PAD, PAD]

    mappings.append_blocks(0, [[8], [7, 7]], overwrite=True)
    mappings.apply_staged()
    assert mappings.source_block_tables[0][0].tolist() == [8, 0, 0, 0, 0, 0]  # old tail cleared
    assert mappings.source_block_tables[1][0].tolist() == [7, 7, 0, 0, 0, 0]
    assert mappings.num_blocks[0].tolist() == [1, 0, 1, 0]

    mappings.fill_dummy()
    for table, slots in zip(mappings.block_tables, mappings.slot_mappings):
        assert (table == NULL).all() and (slots == PAD).all()
    assert mappings.num_blocks[0].tolist() == [1, 0, 1, 0]  # fill_dummy leaves the requests' state alone


def test_per_group_widths_and_the_append_past_a_width():
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(4)], max_num_reqs=2, max_num_blocks_per_req=[2, 5],
                                  max_num_tokens=4)
    assert [tuple(t.shape) for t in mappings.source_block_tables] == [(2, 2), (2, 5)]
    assert [tuple(t.shape) for t in mappings.block_tables] == [(2, 2), (2, 5)]
    assert all(t.is_contiguous() for t in mappings.source_block_tables + mappings.block_tables)
    mappings.append_blocks(1, [[7, 8], [1, 2, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"block_ids\[0\] would give row 1 3 blocks, more than the width of group 0 "
                                         r"\(max_num_blocks_per_req\[0\] = 2\)"):
        mappings.append_blocks(1, [[9], []])
    mappings.apply_staged()
    assert [t.tolist() for t in mappings.source_block_tables] == [[[0, 0], [7, 8]], [[0] * 5, [1, 2, 3, 4, 5]]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 2], [0, 5]]
    mappings.refresh(torch.tensor([1]), torch.tensor([0, 2], dtype=torch.int32), torch.tensor([17, 18]),
                     num_reqs_padded=2, num_tokens_padded=3)
    assert [t.tolist() for t in mappings.block_tables] == [[[7, 8], [0, 0]], [[1, 2, 3, 4, 5], [0] * 5]]
    # Position 17: group 0 block 8 offset 1; group 1 (block size 4) column 4 = id 5, offset 1.
    assert [t[:3].tolist() for t in mappings.slot_mappings] == [[129, 130, PAD], [21, 22, PAD]]


def test_move_and_swap_rows_are_staged_like_appends(backend):
    mappings = PersistentMappings([MappingGroup(4), MappingGroup(8)], max_num_reqs=4, max_num_blocks_per_req=[3, 2],
                                  max_num_tokens=4)
    mappings.append_blocks(0, [[1, 2, 3], [4]])
    mappings.append_blocks(1, [[5], [6, 7]])
    mappings.apply_staged()
    mappings.move_row(1, 3)  # row 1 is left empty
    mappings.swap_rows(0, 2)
    assert [t.tolist() for t in mappings.num_blocks] == [[3, 1, 0, 0], [1, 2, 0, 0]]  # nothing applied yet
    assert mappings.staged_num_blocks.tolist() == [[0, 0, 3, 1], [0, 0, 1, 2]]
    mappings.append_blocks(3, [[8], []])  # a staged append, then a move: the move takes it along
    mappings.move_row(3, 1)
    mappings.move_row(1, 3)
    mappings.apply_staged()
    assert mappings.source_block_tables[0].tolist() == [[0, 0, 0], [0, 0, 0], [1, 2, 3], [5, 8, 0]]
    assert mappings.source_block_tables[1].tolist() == [[0, 0], [0, 0], [4, 0], [6, 7]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 0, 3, 2], [0, 0, 1, 2]]
    mappings.swap_rows(3, 2)
    mappings.move_row(0, 3)  # an empty row moved over a full one: the full one is cleared
    mappings.apply_staged()
    assert mappings.source_block_tables[0].tolist() == [[0, 0, 0], [0, 0, 0], [5, 8, 0], [0, 0, 0]]
    assert mappings.source_block_tables[1].tolist() == [[0, 0], [0, 0], [6, 7], [0, 0]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 0, 2, 0], [0, 0, 2, 0]]


@pytest.mark.parametrize("call,argument", [("move_row(4, 0)", "src"), ("move_row(0, -1)", "dst"),
                                           ("swap_rows(-1, 0)", "a"), ("swap_rows(0, 4)", "b")])
def test_move_and_swap_reject_rows_outside_the_table_and_stage_nothing(call, argument):
    mappings = PersistentMappings([MappingGroup(4)], max_num_reqs=4, max_num_blocks_per_req=2, max_num_tokens=4)
    mappings.append_blocks(0, [[1]])
    mappings.apply_staged()
    with pytest.raises(ValueError, match=rf"{argument} must be in \[0, max_num_reqs = 4\)"):
        eval(f"mappings.{call}")
    assert mappings.num_staged_writes == 0


def test_sliding_window_masking_in_refresh():
    # Group 1 keeps a window: its attention reads 6 tokens below a request's first position.
    groups = [MappingGroup(4), MappingGroup(4, sliding_window_reach=6)]
    mappings = PersistentMappings(groups, max_num_reqs=3, max_num_blocks_per_req=5, max_num_tokens=4)
    mappings.append_blocks(2, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    mappings.apply_staged()
    counts = torch.tensor([0, 99, 17], dtype=torch.int32)  # request-indexed; row 2 starts at position 17
    mappings.refresh(torch.tensor([2]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([17]),
                     num_reqs_padded=1, num_tokens_padded=1, num_computed_tokens=counts)
    # max(17 - 6, 0) // 4 = 2 leading entries of the window group's row are NULL; the full
    # group and the slot mappings are untouched by the window.
    assert mappings.block_tables[0][0].tolist() == [1, 2, 3, 4, 5]
    assert mappings.block_tables[1][0].tolist() == [0, 0, 8, 9, 10]
    assert [int(t[0]) for t in mappings.slot_mappings] == [5 * 4 + 1, 10 * 4 + 1]
    mappings.refresh(torch.tensor([2]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([17]),
                     num_reqs_padded=1, num_tokens_padded=1)  # without the counts: no masking
    assert mappings.block_tables[1][0].tolist() == [6, 7, 8, 9, 10]


def test_sliding_window_masking_is_off_under_cp():
    groups = [MappingGroup(4, cp_sharded=False, sliding_window_reach=1)]
    mappings = PersistentMappings(groups, max_num_reqs=1, max_num_blocks_per_req=3, max_num_tokens=2, cp_world_size=2)
    mappings.append_blocks(0, [[1, 2, 3]])
    mappings.apply_staged()
    mappings.refresh(torch.tensor([0]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([11]),
                     num_computed_tokens=torch.tensor([11], dtype=torch.int32))
    assert mappings.block_tables[0][0].tolist() == [1, 2, 3]


def test_a_group_without_slot_mapping_gets_pad_and_its_table_is_never_read():
    # Group 1's rows hold one block: position 40 is far past them, which the native slot
    # mapping would reject, but the group has no slot mapping.
    groups = [MappingGroup(16), MappingGroup(4, slot_mapping_enabled=False)]
    mappings = PersistentMappings(groups, max_num_reqs=2, max_num_blocks_per_req=[4, 1], max_num_tokens=4)
    mappings.append_blocks(0, [[1, 2, 3], [9]])
    mappings.apply_staged()
    with specops.backend("native"):
        mappings.refresh(torch.tensor([0]), torch.tensor([0, 2], dtype=torch.int32), torch.tensor([40, 41]))
    assert mappings.slot_mappings[0].tolist() == [3 * 16 + 8, 3 * 16 + 9, PAD, PAD]
    assert mappings.slot_mappings[1].tolist() == [PAD] * 4
    assert mappings.block_tables[1].tolist() == [[9], [0]]  # its block table is still gathered


CONSTRUCTOR_ERRORS = [
    ("groups", dict(groups=[])),
    ("groups\\[1\\]", dict(groups=[MappingGroup(16), 16])),
    ("max_num_reqs", dict(max_num_reqs=0)),
    ("max_num_blocks_per_req", dict(max_num_blocks_per_req=0)),
    ("max_num_blocks_per_req", dict(max_num_blocks_per_req=[2, 2])),  # two widths, one group
    ("max_num_blocks_per_req\\[0\\]", dict(max_num_blocks_per_req=[0])),
    ("max_num_blocks_per_req", dict(max_num_blocks_per_req=2**30, max_num_reqs=4)),  # past int32 offsets
    ("max_num_tokens", dict(max_num_tokens=-1)),
    ("cp_world_size", dict(cp_world_size=0)),
    ("cp_rank", dict(cp_world_size=2, cp_rank=2)),
    ("cp_interleave", dict(cp_interleave=0)),
    ("cp_interleave", dict(cp_world_size=2, cp_interleave=32)),  # does not divide 16
]


@pytest.mark.parametrize("argument,change", CONSTRUCTOR_ERRORS,
                         ids=[f"{a}-{i}" for i, (a, _) in enumerate(CONSTRUCTOR_ERRORS)])
def test_constructor_rejects_bad_arguments(argument, change):
    call = dict(groups=[MappingGroup(16)], max_num_reqs=2, max_num_blocks_per_req=2, max_num_tokens=4)
    call.update(change)
    groups = call.pop("groups")
    with pytest.raises(ValueError, match=argument):
        PersistentMappings(groups, **call)


@pytest.mark.parametrize("argument,change", [("block_size", dict(block_size=0)),
                                             ("blocks_per_kv_block", dict(block_size=4, blocks_per_kv_block=0)),
                                             ("sliding_window_reach", dict(block_size=4, sliding_window_reach=-1))])
def test_mapping_group_rejects_bad_arguments(argument, change):
    with pytest.raises(ValueError, match=argument):
        MappingGroup(**change)


@pytest.mark.parametrize(
    "argument,row,block_ids",
    [("block_ids", 0, [[1]]), ("row", 2, [[1], [2]]), ("row", -1, [[1], [2]]), ("block_ids\\[1\\]", 0, [[1], [2, 3, 4]])],
)
def test_append_blocks_rejects_bad_input_and_stages_nothing(argument, row, block_ids):
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=2, max_num_blocks_per_req=3,
                                  max_num_tokens=4)
    mappings.append_blocks(0, [[9], [9]])
    with pytest.raises(ValueError, match=argument):
        mappings.append_blocks(row, block_ids)
    assert mappings.num_staged_writes == 4  # the earlier append: ids and count, per group
    mappings.apply_staged()
    assert [t.tolist() for t in mappings.num_blocks] == [[1, 0], [1, 0]]
    assert [t[0].tolist() for t in mappings.source_block_tables] == [[9, 0, 0], [9, 0, 0]]


@pytest.mark.parametrize("block_ids,message", [
    ([[9], [7.9]], r"block_ids\[1\]\[0\] must be an int, got float 7.9"),  # once stored as 7
    ([[9], [1, -2]], r"block_ids\[1\]\[1\] = -2 must be a block id in \[0, 2\^31 - 1\]"),
    ([[9], [2**31]], r"block_ids\[1\]\[0\] = 2147483648 must be a block id"),  # once an OverflowError
    ([[9], [True]], r"block_ids\[1\]\[0\] must be an int, got bool"),
    ([[9], torch.tensor([1.0])], r"block_ids\[1\] must be a 1-D integer tensor"),
    ([[9], "12"], r"block_ids\[1\] must be a list of ints"),
    ([[9], None], r"block_ids\[1\] must be a list of ints"),
])
def test_a_bad_id_in_any_group_stages_nothing(block_ids, message):
    """Once group 0's ids were staged before group 1's raised (with an error that did not name
    block_ids): the request got blocks in one group only."""
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=2, max_num_blocks_per_req=3,
                                  max_num_tokens=4)
    with pytest.raises(ValueError, match=message):
        mappings.append_blocks(0, block_ids)
    assert mappings.num_staged_writes == 0
    assert mappings.staged_num_blocks.tolist() == [[0, 0], [0, 0]]


def test_block_ids_may_be_numpy_ints_and_integer_tensors():
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=2, max_num_blocks_per_req=3,
                                  max_num_tokens=4)
    mappings.append_blocks(np.int64(1), [np.array([4, 5], dtype=np.int64), torch.tensor([6], dtype=torch.int32)])
    mappings.append_blocks(1, [[np.int32(7)], [0]])
    mappings.apply_staged()
    assert [t.tolist() for t in mappings.source_block_tables] == [[[0, 0, 0], [4, 5, 7]], [[0, 0, 0], [6, 0, 0]]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 3], [0, 2]]


def test_a_refresh_one_group_rejects_changes_no_group():
    """Once group 0's buffers were rewritten, then group 1 raised: a captured graph would replay
    half a step. Position 12 fits group 0 (2 blocks of 16) but not group 1 (2 blocks of 4)."""
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(4)], max_num_reqs=2, max_num_blocks_per_req=2,
                                  max_num_tokens=4)
    mappings.append_blocks(0, [[3, 4], [5, 6]])
    mappings.apply_staged()
    mappings.fill_dummy()
    args = (torch.tensor([0], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32), torch.tensor([1, 12]))
    for backend in BACKENDS:
        before = [t.clone() for t in all_buffers(mappings)]
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match=r"position 12 of request 0 is beyond block_tables\[1\]"):
                    mappings.refresh(*args, num_reqs_padded=2, num_tokens_padded=4)
                for tensor, old in zip(all_buffers(mappings), before):
                    assert torch.equal(tensor, old)
                continue
            mappings.refresh(*args, num_reqs_padded=2, num_tokens_padded=4)  # device paths: PAD
        assert mappings.slot_mappings[0].tolist() == [49, 60, PAD, PAD], backend
        assert mappings.slot_mappings[1].tolist() == [21, PAD, PAD, PAD], backend


REFRESH_ERRORS = [
    ("num_reqs_padded", dict(num_reqs_padded=5)),  # past max_num_reqs
    ("num_reqs_padded", dict(num_reqs_padded=1)),  # fewer than R
    ("num_tokens_padded", dict(num_tokens_padded=9)),  # past max_num_tokens
    ("num_tokens_padded", dict(num_tokens_padded=2)),  # fewer than T
    ("idx_mapping", dict(idx_mapping=torch.tensor([0.0, 1.0]))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 1, 3]))),
    ("positions", dict(positions=torch.tensor([0.0, 1.0, 2.0]))),
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([0, 1, 2, 3]))),  # int64
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([0, 1, 2], dtype=torch.int32))),  # < max_num_reqs
]


@pytest.mark.parametrize("argument,change", REFRESH_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(REFRESH_ERRORS)])
def test_refresh_rejects_bad_input_and_writes_nothing(backend, argument, change):
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=4, max_num_blocks_per_req=3,
                                  max_num_tokens=8)
    mappings.append_blocks(1, [[4], [5]])
    mappings.apply_staged()
    call = dict(idx_mapping=torch.tensor([1, -1], dtype=torch.int32),
                query_start_loc=torch.tensor([0, 1, 3], dtype=torch.int32), positions=torch.tensor([3, 0, 1]),
                num_reqs_padded=4, num_tokens_padded=8)
    call.update(change)
    before = [t.clone() for t in all_buffers(mappings)]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        mappings.refresh(call.pop("idx_mapping"), call.pop("query_start_loc"), call.pop("positions"), **call)
    for tensor, old in zip(all_buffers(mappings), before):
        assert torch.equal(tensor, old)


def test_native_refresh_rejects_rows_past_the_tables():
    mappings = PersistentMappings([MappingGroup(16)], max_num_reqs=2, max_num_blocks_per_req=2, max_num_tokens=4)
    before = [t.clone() for t in all_buffers(mappings)]
    with pytest.raises(ValueError, match="idx_mapping"):
        mappings.refresh(torch.tensor([2]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0]))
    for tensor, old in zip(all_buffers(mappings), before):
        assert torch.equal(tensor, old)
