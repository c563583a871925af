"""The vLLM plugin's target_step point on stand-ins of model runner V2's objects (no vLLM needed):
the seam fuses only inside prepare_inputs, without PCP, with the block tables' layout known; the
prepare_attn calls that follow find their outputs written only for exactly their arguments, and
a gather that must clear more rows than the fused launch did runs on its own. vLLM's own classes
drive the same point in tests/vllm_integration.
"""

from __future__ import annotations

import types

import pytest
import torch

import specops
from specops.integrations.vllm import draft_steps, fused_records, mrv2, target_step

ROWS, COLS, WIDTH = 6, 4, 16


class _Tables:
    """BlockTables' attributes the adapters read (two groups, blocks of 16 and 8, a window on the second)."""

    num_kv_cache_groups = 2
    cp_size, cp_rank, cp_interleave = 1, 0, 1
    has_sliding_window_groups = True

    def __init__(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group, device,
                 cp_size=1, cp_rank=0, cp_interleave=1, slot_mapping_enabled=None, dcp_sharded=None,
                 sliding_window_reach=None):
        self.block_sizes = block_sizes
        generator = torch.Generator().manual_seed(3)
        self.block_tables = [types.SimpleNamespace(gpu=torch.randint(1, 99, (ROWS, COLS), generator=generator,
                                                                     dtype=torch.int32)) for _ in block_sizes]
        self.num_blocks = types.SimpleNamespace(gpu=torch.full((2, ROWS), COLS, dtype=torch.int32))
        self.slot_mappings = torch.full((2, WIDTH), 77, dtype=torch.int64)
        self.input_block_tables = [torch.full((ROWS, COLS), 55, dtype=torch.int32) for _ in block_sizes]
        self._num_dirty_rows = 0
        self._sliding_window_reach = [0, 8]


def _runner(pcp: bool = False):
    tables = _Tables.__new__(_Tables)
    draft_steps.make_block_tables_init(_Tables.__init__)(tables, [16, 8], ROWS, WIDTH, [COLS, COLS], "cpu",
                                                         sliding_window_reach=[0, 8])
    return types.SimpleNamespace(
        block_tables=tables, pcp_manager=object() if pcp else None, adaptive_verification=None,
        model_state=types.SimpleNamespace(num_new_sampled_tokens_per_step=1),
        input_buffers=types.SimpleNamespace(positions=torch.full((WIDTH,), 99, dtype=torch.int64),
                                            seq_lens=torch.full((ROWS,), 99, dtype=torch.int32)),
        req_states=types.SimpleNamespace(num_computed_tokens=types.SimpleNamespace(
            gpu=torch.tensor([5, 0, 20, 9, 0, 0], dtype=torch.int32))))


IDX = torch.tensor([2, 0, 3])
QSL = torch.tensor([0, 2, 5, 6, 6], dtype=torch.int32)  # R = 3, padded to 4 requests


def _step(runner, vllm_calls: list):
    """prepare_inputs through its seam, its body calling prepare_pos_seq_lens as vLLM's does."""
    adapter = target_step.make_prepare_pos_seq_lens(lambda *args: vllm_calls.append(args))

    def body(self, scheduler_output, batch_req_state, batch_desc, num_active_loras):
        adapter(IDX, QSL, self.req_states.num_computed_tokens.gpu, self.input_buffers.positions,
                self.input_buffers.seq_lens)

    seam = mrv2.make_prepare_inputs(body)
    seam(runner, None, types.SimpleNamespace(num_tokens=6, req_ids=["a", "b", "c"]),
         types.SimpleNamespace(num_reqs=4), 0)


def _unfused(runner):
    """What vLLM's three launches write, as specops' unfused ops (the gather clears every row)."""
    tables, counts = runner.block_tables, runner.req_states.num_computed_tokens.gpu
    positions, seq_lens = torch.full((WIDTH,), 99, dtype=torch.int64), torch.full((ROWS,), 99, dtype=torch.int32)
    specops.prepare_positions_and_seq_lens(counts, QSL[:4], positions=positions, seq_lens=seq_lens, idx_mapping=IDX,
                                           num_tokens_padded=WIDTH)
    slots = [specops.compute_slot_mapping(QSL[:4], positions[:6], t.gpu, size, idx_mapping=IDX, num_tokens_padded=WIDTH)
             for t, size in zip(tables.block_tables, tables.block_sizes)]
    gathered = [torch.empty(ROWS, COLS, dtype=torch.int32) for _ in slots]
    specops.gather_block_tables_multi([t.gpu for t in tables.block_tables], list(tables.num_blocks.gpu.unbind(0)), IDX,
                                      gathered, num_reqs_padded=ROWS, num_computed_tokens=counts,
                                      sliding_window_reach=[0, 8], block_sizes=tables.block_sizes)
    return positions, seq_lens, slots, gathered


def test_fused_inside_prepare_inputs_and_consumed_once_by_prepare_attn():
    runner, vllm_calls = _runner(), []
    _step(runner, vllm_calls)
    assert vllm_calls == []
    tables = runner.block_tables
    positions, seq_lens, slots, gathered = _unfused(runner)
    assert torch.equal(runner.input_buffers.positions, positions)
    assert torch.equal(runner.input_buffers.seq_lens, seq_lens)
    for g in range(2):
        assert torch.equal(tables.slot_mappings[g], slots[g])
        assert torch.equal(tables.input_block_tables[g], gathered[g])
    counts = runner.req_states.num_computed_tokens.gpu
    gather = mrv2.make_gather_block_tables(None)
    compute = draft_steps.make_compute_slot_mappings(lambda *args: "vllm")
    launches = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(specops, "gather_block_tables_multi", lambda *args, **kwargs: launches.append("gather"))
        views = gather(tables, IDX, 4, num_computed_tokens=counts)
        assert launches == [] and [v.shape for v in views] == [(4, COLS)] * 2 and tables._num_dirty_rows == 3
        assert compute(tables, IDX, QSL, runner.input_buffers.positions[:8], 8).shape == (2, 8)
        # Consumed: the same calls again launch (another speculator step, a second forward).
        gather(tables, IDX, 4, num_computed_tokens=counts)
        assert launches == ["gather"]
        assert compute(tables, IDX, QSL, runner.input_buffers.positions[:8], 8) == "vllm"


def test_pcp_maps_its_own_slots_so_the_step_is_not_fused():
    runner, vllm_calls = _runner(pcp=True), []
    _step(runner, vllm_calls)
    positions, seq_lens, _, _ = _unfused(runner)
    # prepare_positions_and_seq_lens one for one: vLLM's positions [0, T), seq_lens padded with 0.
    assert runner.input_buffers.positions[:6].tolist() == positions[:6].tolist()
    assert runner.input_buffers.positions[6:].tolist() == [99] * (WIDTH - 6)
    assert torch.equal(runner.input_buffers.seq_lens, seq_lens)
    assert (runner.block_tables.slot_mappings == 77).all() and vllm_calls == []
    compute = draft_steps.make_compute_slot_mappings(lambda *args: "vllm")
    assert compute(runner.block_tables, IDX, QSL, runner.input_buffers.positions[:8], 8) == "vllm"


def test_outside_prepare_inputs_it_is_vllms_function():
    runner, vllm_calls = _runner(), []
    adapter = target_step.make_prepare_pos_seq_lens(lambda *args: vllm_calls.append(args))
    adapter(IDX, QSL, runner.req_states.num_computed_tokens.gpu, runner.input_buffers.positions,
            runner.input_buffers.seq_lens)
    assert len(vllm_calls) == 1 and (runner.input_buffers.positions == 99).all()


def test_a_gather_with_more_rows_to_clear_than_the_launch_cleared_runs_its_own():
    runner = _runner()
    tables = runner.block_tables
    fused_records.note_rows_left(tables, 2)  # the last gather this module saw left 2 rows
    _step(runner, [])
    tables._num_dirty_rows = 5  # a dummy run (no adapter sees it) left 5
    launches = []
    gather = mrv2.make_gather_block_tables(None)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(specops, "gather_block_tables_multi",
                      lambda *args, **kwargs: launches.append(kwargs["num_reqs_padded"]))
        gather(tables, IDX, 4, num_computed_tokens=runner.req_states.num_computed_tokens.gpu)
    assert launches == [5]
