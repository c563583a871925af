"""PersistentMappings' staged writes: overlapping stages of one row, the cells of each launch,
the packed copy path, growth past the staging capacity, reads through recorded addresses, steady
state without allocations, op calls that do not grow with the batch, and a compiled step. The
scheduler model that is the ground truth is in persistent_cases.py.
"""

from __future__ import annotations

import ctypes

import torch
from host_syncs import OpLog
from persistent_cases import (
    CP_CONFIGS,
    GROUPS,
    MAX_SEQ_LEN,
    NULL,
    PAD,
    Scheduler,
    Step,
    all_buffers,
    make_mappings,
)
from strategies import assert_same

import specops
import specops.persistent.staging as staging_module
from specops import MappingGroup, PersistentMappings


def test_overlapping_stages_of_one_row_apply_in_order(backend):
    """Once applied the earlier writes itself at the overlap; now merged on the host, so nothing
    reaches the device before apply_staged(), as the docstring says."""
    mappings = PersistentMappings([MappingGroup(4)], max_num_reqs=2, max_num_blocks_per_req=8, max_num_tokens=4)
    mappings.append_blocks(1, [[1, 2, 3, 4, 5]])
    mappings.append_blocks(1, [[6]])
    mappings.append_blocks(1, [[10, 11]], overwrite=True)  # overlaps the pending writes
    mappings.append_blocks(1, [[12]])  # lands on the old tail being cleared
    mappings.append_blocks(0, [[20]])
    assert mappings.source_block_tables[0].unique().tolist() == [0] and mappings.num_blocks[0].tolist() == [0, 0]
    assert mappings.staged_num_blocks[0].tolist() == [1, 3]
    mappings.apply_staged()
    assert mappings.source_block_tables[0].tolist() == [[20] + [0] * 7, [10, 11, 12] + [0] * 5]
    assert mappings.num_blocks[0].tolist() == [1, 3]


def record_staged_launches(monkeypatch) -> list[list[tuple[int, int]]]:
    """The cells written by each apply_staged_writes call PersistentMappings makes, on whichever
    backend runs it (the Triton backend launches its kernel directly, past the dispatcher)."""
    launches: list[list[tuple[int, int]]] = []
    launch = staging_module.apply_staged_writes

    def recording(table, rows, starts, cu_lens, values):
        bounds = cu_lens.tolist()
        launches.append([(row, start + i) for k, (row, start) in enumerate(zip(rows.tolist(), starts.tolist()))
                         for i in range(bounds[k + 1] - bounds[k])])
        return launch(table, rows, starts, cu_lens, values)

    monkeypatch.setattr(staging_module, "apply_staged_writes", recording)
    return launches


def test_writes_of_one_launch_are_disjoint(backend, monkeypatch):
    """Device kernels apply one launch's writes in parallel, in no order; CPU backends (and the
    Triton interpreter, one program after another) apply them in order, so only this property
    shows that staging never relies on the order. Checked on the launches of every backend."""
    launches = record_staged_launches(monkeypatch)
    test_overlapping_stages_of_one_row_apply_in_order(backend)
    test_staging_past_its_capacity_grows_and_applies_in_order(backend)
    assert len(launches) == 2  # the two tests above apply once each: staging merges and grows
    mappings = make_mappings(CP_CONFIGS[0])
    scheduler = Scheduler(mappings, CP_CONFIGS[0], seed=2, max_seq_len=MAX_SEQ_LEN)
    steps = 40 if backend == "native" else 12  # the interpreter is slow
    for _ in range(steps):
        scheduler.step()
    scheduler.check_sources()
    assert len(launches) >= 2 + steps * 3 // 4
    for cells in launches:
        assert len(cells) == len(set(cells)), "two writes of one launch touch the same cell"


def test_packed_copy_path_applies_the_same_writes():
    """The staging path of device tensors (one packed host-to-device copy), run on CPU."""
    direct, packed = make_mappings(CP_CONFIGS[1], max_num_reqs=6), make_mappings(CP_CONFIGS[1], max_num_reqs=6)
    packed._staging.stage_through_copy(pin_memory=False)
    schedulers = [Scheduler(m, CP_CONFIGS[1], seed=4, max_seq_len=MAX_SEQ_LEN) for m in (direct, packed)]
    for _ in range(30):
        for scheduler in schedulers:
            scheduler.step()
        schedulers[1].check_sources()
        for a, b in zip(all_buffers(direct), all_buffers(packed)):
            assert_same(a, b)


def test_staging_past_its_capacity_grows_and_applies_in_order(backend):
    """Once flushed to the device when the host arrays filled up; they grow instead."""
    mappings = PersistentMappings([MappingGroup(1), MappingGroup(2)], max_num_reqs=3, max_num_blocks_per_req=40,
                                  max_num_tokens=4)
    for block_id in range(1, 35):
        mappings.append_blocks(0, [[block_id], []])
    mappings.append_blocks(0, [list(range(100, 130)), []], overwrite=True)
    for row in (1, 2):
        mappings.append_blocks(row, [list(range(200, 240)), list(range(300, 340))])
    assert mappings.num_blocks[0].tolist() == [0, 0, 0] and mappings.source_block_tables[0].unique().tolist() == [0]
    mappings.apply_staged()
    assert mappings.source_block_tables[1][1:].tolist() == [list(range(300, 340))] * 2
    assert mappings.source_block_tables[0][0].tolist() == list(range(100, 130)) + [0] * 10
    assert mappings.num_blocks[0].tolist() == [30, 40, 40]
    assert mappings.num_staged_writes == 0


def _recorded_view(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor over the memory at tensor's address, built from the address alone, the way a
    captured graph holds on to a buffer."""
    c_type = {torch.int32: ctypes.c_int32, torch.int64: ctypes.c_int64}[tensor.dtype]
    memory = (c_type * tensor.numel()).from_address(tensor.data_ptr())
    return torch.frombuffer(memory, dtype=tensor.dtype).view(tensor.shape)


def test_capture_simulation_reads_through_recorded_addresses():
    cp = CP_CONFIGS[1]
    mappings = make_mappings(cp)
    tables = [_recorded_view(t) for t in mappings.block_tables]  # "capture": addresses only
    slots = [_recorded_view(t) for t in mappings.slot_mappings]
    scheduler = Scheduler(mappings, cp, seed=3, max_seq_len=MAX_SEQ_LEN)
    for index in range(60):
        step = scheduler.step()
        if index % 10 == 9:  # a dummy run between real steps
            mappings.fill_dummy()
            assert all((t == NULL).all() for t in tables) and all((s == PAD).all() for s in slots)
        step.refresh(mappings)
        scheduler.check_captured(step, tables, slots)


def _staged_and_steps(mappings: PersistentMappings, count: int) -> list[Step]:
    scheduler = Scheduler(mappings, (1, 0, 1), seed=5, max_seq_len=MAX_SEQ_LEN)
    return [scheduler.step() for _ in range(count)]


def test_steady_state_allocates_nothing():
    with specops.backend("native"):
        mappings = make_mappings((1, 0, 1))
        steps = _staged_and_steps(mappings, 20)
        # Every row allocated in full, so that the earlier steps' positions stay inside their rows.
        for row in range(mappings.max_num_reqs):
            mappings.append_blocks(row, [list(range(1, width + 1)) for width in mappings.max_num_blocks_per_group],
                                   overwrite=True)
        mappings.apply_staged()
        steps[0].refresh(mappings)  # warm-up
        with OpLog() as counter:
            for step in steps:
                step.refresh(mappings)
            for row in range(mappings.max_num_reqs):
                mappings.append_blocks(row, [[1], [2, 3], [4], [5]], overwrite=True)
            mappings.move_row(0, 1)
            mappings.swap_rows(2, 3)
            mappings.apply_staged()
            mappings.fill_dummy()
    assert counter.ops, "the counter saw no op: it is not counting"
    assert counter.allocations() == []


def test_the_counter_sees_an_allocation():
    with OpLog() as counter:
        torch.zeros(3).add(1)
    assert len(counter.allocations()) == 2


def test_op_calls_do_not_grow_with_the_batch():
    with specops.backend("native"):
        mappings = make_mappings((2, 1, 2), max_num_reqs=48, max_num_tokens=400)
        scheduler = Scheduler(mappings, (2, 1, 2), seed=1, max_seq_len=MAX_SEQ_LEN)
        calls = {}
        for _ in range(40):
            step = scheduler.step(apply=False)
            launches = ["specops.apply_staged_writes.default"] if mappings.num_staged_writes else []
            with OpLog() as counter:
                mappings.apply_staged()
            assert [op for op in counter.ops if op.startswith("specops.")] == launches
            with OpLog() as counter:
                step.refresh(mappings)
            calls[step.idx_mapping.numel()] = [op for op in counter.ops if op.startswith("specops.")]
    assert max(calls) >= 4 * min(calls)
    # One host check of every mapped group first (a rejected refresh changes nothing), then every
    # mapped group's slot mapping, then one gather per group (a group without a slot mapping costs
    # one gather, and a fill, not a specops op). Under CP no window masks, so no gather goes first.
    mapped = sum(g.slot_mapping_enabled for g in GROUPS)
    expected = ["specops.check_slot_mapping_positions.default"] * (mapped > 1)
    expected += ["specops.compute_slot_mapping.default"] * mapped
    expected += ["specops.gather_block_tables.default"] * len(GROUPS)
    assert all(ops == expected for ops in calls.values())


def test_compiled_step_refreshes_and_reads_the_buffers():
    cp = CP_CONFIGS[1]
    eager, compiled_mappings = make_mappings(cp), make_mappings(cp)
    scheduler = Scheduler(eager, cp, seed=11, max_seq_len=MAX_SEQ_LEN)
    for _ in range(3):
        scheduler.step()

    def make_step(mappings):
        def run(idx_mapping, query_start_loc, positions, num_reqs_padded, num_tokens_padded):
            mappings.refresh(idx_mapping, query_start_loc, positions, num_reqs_padded=num_reqs_padded,
                             num_tokens_padded=num_tokens_padded)
            return [t[:num_reqs_padded].sum(dim=1) for t in mappings.block_tables] + [
                s[:num_tokens_padded] * 1 for s in mappings.slot_mappings]
        return run

    compiled = torch.compile(make_step(compiled_mappings), fullgraph=True, backend="aot_eager")
    eager_step = make_step(eager)
    for _ in range(3):
        step = scheduler.step()
        for g in range(len(GROUPS)):  # same source state in both
            compiled_mappings.source_block_tables[g].copy_(eager.source_block_tables[g])
            compiled_mappings.num_blocks[g].copy_(eager.num_blocks[g])
        args = (step.idx_mapping, step.query_start_loc, step.positions, step.num_reqs_padded, step.num_tokens_padded)
        for actual, expected in zip(compiled(*args), eager_step(*args)):
            assert_same(actual, expected)
        for actual, expected in zip(compiled_mappings.block_tables + compiled_mappings.slot_mappings,
                                    eager.block_tables + eager.slot_mappings):
            assert_same(actual, expected)
