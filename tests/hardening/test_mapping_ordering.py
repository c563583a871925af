"""PersistentMappings.refresh and prepare_step over every order of groups: a rejected call changes
no buffer, whatever the groups' kinds and places (docs/changelog.md, third round).

Once a group without a slot mapping placed before a mapped one had its table gathered before the
next group's checks ran, a sliding-window gather rejected a negative num_computed_tokens after
the groups before it were written, a float num_reqs_padded was rejected by the ops half-way, a
caller tensor sharing memory with a later group's captured buffer was seen only by that group's
op, and prepare_step's sliding-window scatter turned idx_mapping = -2 (a "no row" every op
accepts) into index -1 after positions, seq_lens and the counts were written.

Every layout of up to three groups drawn from four kinds (full, sliding window, a second window
with another block size, no slot mapping), in every order, with every rejected input natively;
the inputs every backend rejects (metadata, sizes, shared memory) also on the Python backends,
in the layouts of up to two groups (value errors are the host's: device paths write PAD there). Every captured buffer, the
source tables and the caller tensors the step writes are snapshotted before and compared after.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import BACKENDS

import specops
from specops import MappingGroup, PersistentMappings

KINDS = {
    "full": dict(block_size=4),
    "swa": dict(block_size=2, sliding_window_reach=3),
    "swa4": dict(block_size=4, sliding_window_reach=5),
    "off": dict(block_size=8, slot_mapping_enabled=False),
}
LAYOUTS = [layout for size in (1, 2, 3) for layout in itertools.permutations(KINDS, size)]


def i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _mappings(layout: tuple[str, ...]) -> PersistentMappings:
    """Request rows 2 and 0 hold blocks for positions up to 11 in every group."""
    groups = [MappingGroup(**KINDS[kind], name=f"{kind}{g}") for g, kind in enumerate(layout)]
    mappings = PersistentMappings(groups, max_num_reqs=3, max_num_blocks_per_req=6, max_num_tokens=8)
    blocks = [list(range(10 * g + 1, 10 * g + 1 + -(-12 // group.block_size))) for g, group in enumerate(groups)]
    mappings.append_blocks(2, blocks)
    mappings.append_blocks(0, [[b + 100 for b in row[:2]] for row in blocks])
    mappings.apply_staged()
    return mappings


def _snapshot(mappings: PersistentMappings, *tensors: torch.Tensor) -> list[torch.Tensor]:
    owned = [mappings._source_storage, mappings._captured_tables, mappings._captured_slots, mappings.positions,
             mappings.seq_lens]
    return [t.clone() for t in owned + [t for t in tensors if isinstance(t, torch.Tensor) and t.device.type == "cpu"]]


def _unchanged(before: list[torch.Tensor], mappings: PersistentMappings, *tensors: torch.Tensor) -> bool:
    return all(torch.equal(a, b) for a, b in zip(_snapshot(mappings, *tensors), before))


def _refresh_call(mappings: PersistentMappings) -> dict:
    # Batch row 0 is request row 2 (3 tokens from 8), batch row 1 row 0 (2 tokens from 0).
    return dict(idx_mapping=i32(2, 0), query_start_loc=i32(0, 3, 5), positions=torch.tensor([8, 9, 10, 0, 1]),
                num_reqs_padded=3, num_tokens_padded=6, num_computed_tokens=i32(0, 0, 8))


def _in_buffer(buffer: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """values copied to the start of a captured buffer (a caller tensor sharing its memory)."""
    view = buffer.view(-1)[: values.numel()].view(values.shape)
    view.copy_(values)
    return view


# Each: (label, change(call, mappings, layout), whether every backend rejects it, whether the host does)
def _refresh_cases():
    def later_slots(call, mappings, layout):
        call["positions"] = _in_buffer(mappings.slot_mappings[-1], call["positions"])

    def later_table(call, mappings, layout):
        call["idx_mapping"] = _in_buffer(mappings.block_tables[-1], call["idx_mapping"])

    def counts_in_a_table(call, mappings, layout):
        call["num_computed_tokens"] = _in_buffer(mappings.block_tables[-1], call["num_computed_tokens"])

    def negative_count(call, mappings, layout):
        call["num_computed_tokens"] = i32(0, 0, -4)

    def past_blocks(call, mappings, layout):
        call["positions"] = torch.tensor([8, 9, 10, 0, 9])  # row 0 holds blocks for positions below 8

    return [
        ("positions float32", lambda c, m, l: c.update(positions=c["positions"].float()), True),
        ("positions None", lambda c, m, l: c.update(positions=None), True),
        ("idx_mapping None", lambda c, m, l: c.update(idx_mapping=None), True),
        ("query_start_loc int64", lambda c, m, l: c.update(query_start_loc=c["query_start_loc"].long()), True),
        ("num_reqs_padded 2.5", lambda c, m, l: c.update(num_reqs_padded=2.5), True),
        ("num_reqs_padded 3.0", lambda c, m, l: c.update(num_reqs_padded=3.0), True),
        ("num_tokens_padded 6.0", lambda c, m, l: c.update(num_tokens_padded=6.0), True),
        ("num_computed_tokens int64", lambda c, m, l: c.update(num_computed_tokens=c["num_computed_tokens"].long()),
         True),
        ("positions in the last group's slot mapping", later_slots, True),
        ("idx_mapping in the last group's table", later_table, True),
        ("num_computed_tokens in the last group's table", counts_in_a_table, True),
        ("idx_mapping past the rows", lambda c, m, l: c.update(idx_mapping=i32(2, 3)), False),
        ("query_start_loc decreasing", lambda c, m, l: c.update(query_start_loc=i32(0, 3, 2)), False),
        ("a negative num_computed_tokens of a mapped row", negative_count, False),
        ("a position past a row's blocks", past_blocks, False),
    ]


def _host_rejects(label: str, layout: tuple[str, ...]) -> bool:
    if label == "a negative num_computed_tokens of a mapped row":
        return any(KINDS[kind].get("sliding_window_reach") for kind in layout)
    if label in ("a position past a row's blocks", "query_start_loc decreasing"):
        return any(KINDS[kind].get("slot_mapping_enabled", True) for kind in layout)
    return True


def _backend_cases(cases: list) -> list[tuple[str, tuple[str, ...], int]]:
    """Every case natively; the cases every backend rejects on the Python backends, in the
    layouts of up to two groups (the interpreter is slow)."""
    return [(backend, layout, index) for backend in BACKENDS for layout in LAYOUTS for index in range(len(cases))
            if backend == "native" or cases[index][2] and len(layout) <= 2]


def _ids(cases: list, chosen: list) -> list[str]:
    return [f"{b}-{'-'.join(l)}-{cases[i][0]}" for b, l, i in chosen]


REFRESH_CASES = _backend_cases(_refresh_cases())


@pytest.mark.parametrize("backend,layout,index", REFRESH_CASES, ids=_ids(_refresh_cases(), REFRESH_CASES))
def test_a_rejected_refresh_changes_no_buffer_in_any_group_order(backend, layout, index):
    label, change, everywhere = _refresh_cases()[index]
    with specops.backend(backend):
        _rejected_refresh(backend, layout, label, change, everywhere)


def _rejected_refresh(backend, layout, label, change, everywhere) -> None:
    mappings = _mappings(layout)
    call = _refresh_call(mappings)
    change(call, mappings, layout)
    tensors = [value for value in call.values() if isinstance(value, torch.Tensor)]
    before = _snapshot(mappings, *tensors)
    try:
        mappings.refresh(**call)
    except ValueError:
        assert _unchanged(before, mappings, *tensors), f"{layout}: a refresh rejected for {label} wrote a buffer"
        return
    assert not (everywhere or backend == "native" and _host_rejects(label, layout)), f"{layout}: {label} accepted"


def _step_call() -> dict:
    """prepare_step's inputs: batch row 0 continues on request row 2 (count 5 + 3 accepted = 8,
    positions 8, 9, 10), batch row 1 is new on row 0 (positions 0, 1)."""
    return dict(num_computed_tokens=i32(5, 0), num_accepted_tokens=i32(0, 0), prev_positions=i32(0, -1),
                valid_sampled_token_count=i32(3), prev_num_draft_tokens=i32(2), cpu_num_computed_tokens=i32(99, 0),
                query_start_loc=i32(0, 3, 5), idx_mapping=i32(2, 0), num_reqs_padded=3, num_tokens_padded=6)


def _step_cases():
    def counts_in_a_table(call, mappings):
        call["cpu_num_computed_tokens"] = _in_buffer(mappings.block_tables[-1], call["cpu_num_computed_tokens"])

    def prev_in_a_table(call, mappings):
        call["prev_positions"] = _in_buffer(mappings.block_tables[-1], call["prev_positions"])

    return [
        ("num_computed_tokens int64", lambda c, m: c.update(num_computed_tokens=c["num_computed_tokens"].long()), True),
        ("idx_mapping None", lambda c, m: c.update(idx_mapping=None), True),
        ("num_reqs_padded 3.0", lambda c, m: c.update(num_reqs_padded=3.0), True),
        ("num_tokens_padded 6.5", lambda c, m: c.update(num_tokens_padded=6.5), True),
        ("cpu_num_computed_tokens in the last group's table", counts_in_a_table, True),
        ("prev_positions in the last group's table", prev_in_a_table, True),
        ("query_start_loc decreasing", lambda c, m: c.update(query_start_loc=i32(0, 3, 2)), False),
        ("idx_mapping past the rows", lambda c, m: c.update(idx_mapping=i32(2, 3)), False),
    ]


STEP_CASES = _backend_cases(_step_cases())


@pytest.mark.parametrize("backend,layout,index", STEP_CASES, ids=_ids(_step_cases(), STEP_CASES))
def test_a_rejected_prepare_step_changes_no_buffer_in_any_group_order(backend, layout, index):
    label, change, everywhere = _step_cases()[index]
    with specops.backend(backend):
        _rejected_step(backend, layout, label, change, everywhere)


def _rejected_step(backend, layout, label, change, everywhere) -> None:
    mappings = _mappings(layout)
    call = _step_call()
    change(call, mappings)
    tensors = [value for value in call.values() if isinstance(value, torch.Tensor)]
    before = _snapshot(mappings, *tensors)
    try:
        mappings.prepare_step(**call)
    except ValueError:
        assert _unchanged(before, mappings, *tensors), f"{layout}: a step rejected for {label} wrote a buffer"
        return
    assert not (everywhere or backend == "native"), f"{layout}: {label} accepted"


@pytest.mark.parametrize("layout", LAYOUTS, ids=["-".join(l) for l in LAYOUTS])
def test_every_no_row_value_is_no_row_in_prepare_step(backend, layout):
    """idx_mapping -2 (or any negative) is a batch row of no request, as -1 is, in every op; the
    sliding-window scatter once indexed its buffer with it (IndexError after the fused op wrote;
    a device-side assert on a GPU)."""
    results = []
    for no_row in (-1, -2, -(2**31)):
        mappings = _mappings(layout)
        call = _step_call()
        call["idx_mapping"] = i32(2, no_row)
        step = mappings.prepare_step(**call)
        results.append([step.positions.clone(), step.seq_lens.clone(), mappings._captured_tables.clone(),
                        mappings._captured_slots.clone()])
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def test_the_valid_calls_are_taken_in_every_layout():
    for layout in LAYOUTS:
        mappings = _mappings(layout)
        mappings.refresh(**_refresh_call(mappings))
        mappings.prepare_step(**_step_call())
