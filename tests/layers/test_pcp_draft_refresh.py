"""The replicated-draft refresh as a runner calls it (vllm-ascend #16300): PersistentMappings
with int32 slots and pad-to-end, refreshed from the global batch with the peer's call shape
(query_start_loc of num_reqs_padded + 1 entries, a persistent positions buffer), on the PR unit
test's values; the captured buffers keep their addresses; pad-to-end costs what the last two
steps wrote, not the buffer; prepare_step and the fused op take the same query_start_loc."""

from __future__ import annotations

import pytest
import repo_modules
import torch
from conftest import BACKENDS

import specops
from specops import MappingGroup, PersistentMappings
from specops.persistent import mappings as mappings_module

PAD, NULL = specops.PAD_SLOT_ID, specops.NULL_BLOCK_ID
I32 = torch.int32


def peer_mappings(**kw) -> PersistentMappings:
    """One group of block size 128; request row 3 holds blocks [7, 13, 0], row 7 [17, 19, 23]."""
    mappings = PersistentMappings([MappingGroup(128)], max_num_reqs=8, max_num_blocks_per_req=3, max_num_tokens=8,
                                  slot_dtype=torch.int32, pad_to_end=True, **kw)
    mappings.append_blocks(3, [[7, 13, 0]])
    mappings.append_blocks(7, [[17, 19, 23]])
    mappings.apply_staged()
    return mappings


def stale(mappings: PersistentMappings) -> None:
    """The captured buffers as the PR's test finds them: table all -1, slots [123, -1 ..., 99]."""
    mappings.block_tables[0].fill_(-1)
    mappings.slot_mappings[0].copy_(torch.tensor([123, -1, -1, -1, -1, -1, -1, 99], dtype=I32))


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("num_tokens_padded", [6, 7, 8])
def test_example_1_the_global_batch(backend_name, num_tokens_padded):
    mappings = peer_mappings()
    addresses = (mappings.block_tables[0].data_ptr(), mappings.slot_mappings[0].data_ptr())
    stale(mappings)
    positions = torch.zeros(8, dtype=torch.int64)  # a persistent buffer longer than T
    positions[:6] = torch.arange(6)
    with specops.backend(backend_name):
        mappings.refresh(torch.tensor([3, 7], dtype=I32), torch.tensor([0, 3, 6, 6, 6], dtype=I32), positions,
                         num_reqs_padded=4, num_tokens_padded=num_tokens_padded)
    assert mappings.slot_mappings[0].dtype == torch.int32
    assert mappings.block_tables[0][:4].tolist() == [[7, 13, 0], [17, 19, 23], [0, 0, 0], [0, 0, 0]]
    assert (mappings.block_tables[0][4:] == NULL).all()
    assert mappings.slot_mappings[0].tolist() == [896, 897, 898, 2179, 2180, 2181, PAD, PAD]
    assert (mappings.block_tables[0].data_ptr(), mappings.slot_mappings[0].data_ptr()) == addresses


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_example_2_the_stale_tail_is_gone(backend_name):
    mappings = peer_mappings()
    stale(mappings)
    with specops.backend(backend_name):
        mappings.refresh(torch.tensor([3], dtype=I32), torch.tensor([0, 4], dtype=I32), torch.arange(126, 130),
                         num_reqs_padded=2, num_tokens_padded=4)
    assert mappings.block_tables[0][:2].tolist() == [[7, 13, 0], [0, 0, 0]]
    assert mappings.block_tables[0][2:4].tolist() == [[0, 0, 0], [0, 0, 0]]  # vLLM's caller buffer keeps -1
    assert mappings.slot_mappings[0].tolist() == [1022, 1023, 1664, 1665, PAD, PAD, PAD, PAD]


def test_steps_in_a_row_clear_what_the_previous_step_wrote():
    mappings = peer_mappings()
    mappings.refresh(torch.tensor([3, 7], dtype=I32), torch.tensor([0, 3, 6], dtype=I32), torch.arange(6),
                     num_reqs_padded=2, num_tokens_padded=6)
    mappings.refresh(torch.tensor([7], dtype=I32), torch.tensor([0, 1, 1], dtype=I32), torch.tensor([300]),
                     num_reqs_padded=1, num_tokens_padded=1)
    assert mappings.slot_mappings[0].tolist() == [23 * 128 + 44] + [PAD] * 7
    assert mappings.block_tables[0][0].tolist() == [17, 19, 23] and (mappings.block_tables[0][1:] == NULL).all()
    mappings.fill_dummy()
    assert (mappings.slot_mappings[0] == PAD).all() and (mappings.block_tables[0] == NULL).all()


def test_pad_to_end_costs_what_was_written_not_the_buffer(monkeypatch):
    """After the first step, a step writes max(this step's, the last step's) padded extent, not
    the 4096 entries of the buffer; a write the mappings did not make brings back a full one."""
    mappings = PersistentMappings([MappingGroup(16)], max_num_reqs=4, max_num_blocks_per_req=4,
                                  max_num_tokens=4096, slot_dtype=torch.int32, pad_to_end=True)
    mappings.append_blocks(0, [[1, 2, 3, 4]])
    mappings.apply_staged()
    slot_op = mappings_module._SLOT_MAPPING
    extents = []
    original = slot_op.select

    def recording_select():
        inner = original()

        def call(**arguments):  # the layers call ops by keyword
            extents.append(arguments["num_tokens_padded"])  # the extent the op writes up to
            return inner(**arguments)
        return call

    monkeypatch.setattr(slot_op, "select", recording_select)
    mappings.refresh(torch.tensor([0], dtype=I32), torch.tensor([0, 6], dtype=I32), torch.arange(6),
                     num_reqs_padded=1, num_tokens_padded=8)
    for _ in range(2):
        mappings.refresh(torch.tensor([0], dtype=I32), torch.tensor([0, 4], dtype=I32), torch.arange(4),
                         num_reqs_padded=1, num_tokens_padded=4)
    assert extents == [8, 8, 4]
    assert mappings.slot_mappings[0][:4].tolist() == [16, 17, 18, 19] and (mappings.slot_mappings[0][4:] == PAD).all()
    mappings.slot_mappings[0][4000] = 7  # not the mappings' own write
    mappings.refresh(torch.tensor([0], dtype=I32), torch.tensor([0, 4], dtype=I32), torch.arange(4),
                     num_reqs_padded=1, num_tokens_padded=4)
    assert extents[-1] == 4096 and (mappings.slot_mappings[0][4:] == PAD).all()


def test_without_pad_to_end_the_padded_extent_stops_the_writes():
    mappings = PersistentMappings([MappingGroup(128)], max_num_reqs=8, max_num_blocks_per_req=3, max_num_tokens=8)
    mappings.append_blocks(3, [[7, 13, 0]])
    mappings.apply_staged()
    mappings.slot_mappings[0][7] = 99
    mappings.refresh(torch.tensor([3], dtype=I32), torch.tensor([0, 4, 4], dtype=I32), torch.arange(126, 134),
                     num_reqs_padded=2, num_tokens_padded=6)
    assert mappings.slot_mappings[0].dtype == torch.int64
    # Past num_tokens_padded nothing is written: the 99 stays.
    assert mappings.slot_mappings[0].tolist() == [1022, 1023, 1664, 1665, PAD, PAD, PAD, 99]


def test_refresh_rejects_a_batch_past_the_padded_extent_and_short_positions():
    mappings = peer_mappings()
    before = mappings.slot_mappings[0].clone()
    with pytest.raises(ValueError, match="num_tokens_padded"):
        mappings.refresh(torch.tensor([3, 7], dtype=I32), torch.tensor([0, 3, 6], dtype=I32), torch.arange(6),
                         num_reqs_padded=2, num_tokens_padded=5)
    with pytest.raises(ValueError, match="positions"):
        mappings.refresh(torch.tensor([3, 7], dtype=I32), torch.tensor([0, 3, 6], dtype=I32), torch.arange(5),
                         num_reqs_padded=2, num_tokens_padded=6)
    assert torch.equal(mappings.slot_mappings[0], before)


def test_an_int32_slot_that_does_not_fit_is_rejected_on_the_host():
    mappings = PersistentMappings([MappingGroup(128)], max_num_reqs=2, max_num_blocks_per_req=1, max_num_tokens=4,
                                  slot_dtype=torch.int32)
    mappings.append_blocks(0, [[2**24]])
    mappings.apply_staged()
    with pytest.raises(ValueError, match="int32"):
        mappings.refresh(torch.tensor([0], dtype=I32), torch.tensor([0, 1], dtype=I32), torch.tensor([0]))


def test_slot_dtype_is_checked():
    with pytest.raises(ValueError, match="slot_dtype"):
        PersistentMappings([MappingGroup(16)], max_num_reqs=2, max_num_blocks_per_req=1, max_num_tokens=4,
                           slot_dtype=torch.int16)


def test_prepare_step_takes_the_peers_query_start_loc():
    mappings = peer_mappings()
    stale(mappings)
    R = 2
    counts = torch.tensor([0, 3], dtype=I32)
    zeros = torch.zeros(R, dtype=I32)
    step = mappings.prepare_step(counts.clone(), zeros.clone(), torch.full((R,), -1, dtype=I32), zeros, zeros,
                                 counts.clone(), torch.tensor([0, 3, 6, 6, 6], dtype=I32),
                                 torch.tensor([3, 7], dtype=I32), num_reqs_padded=4, num_tokens_padded=6)
    assert step.positions.tolist() == [0, 1, 2, 3, 4, 5]
    assert mappings.slot_mappings[0].tolist() == [896, 897, 898, 2179, 2180, 2181, PAD, PAD]
    assert mappings.block_tables[0][:4].tolist() == [[7, 13, 0], [17, 19, 23], [0, 0, 0], [0, 0, 0]]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_pcp_target_and_replicated_draft_example(seed):
    """examples/pcp_draft_step.py: PCP = 2 target steps, the replicated draft refreshed after
    each, every check of the example holding (it raises on the first that fails)."""
    example = repo_modules.load("examples/pcp_draft_step.py")
    assert example.run(12, seed) == 12
