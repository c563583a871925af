"""The vLLM plugin's parts that need no vLLM (docs/integrations.md): the switch, register()
and python -m specops without vLLM or without the switch, and the draft_steps seam's conditions
on stand-ins with the attributes it reads. tests/vllm_integration drives it in
vLLM's own runner."""

from __future__ import annotations

import importlib.util
import types

import pytest
import torch

from specops.integrations.vllm import POINT_NAMES, _switch, diagnose, draft_steps, register, status


@pytest.mark.parametrize("value", [None, "", "0", " 0 "])
def test_off_unless_the_switch_is_set(value):
    environ = {} if value is None else {"SPECOPS_VLLM": value}
    selection = _switch.selected_points(POINT_NAMES, environ)
    assert selection.points == ()
    assert "SPECOPS_VLLM" in selection.reason


@pytest.mark.parametrize("value", ["1", "all", "ALL"])
def test_one_switches_every_point_on(value):
    assert _switch.selected_points(POINT_NAMES, {"SPECOPS_VLLM": value}).points == POINT_NAMES


def test_a_list_selects_points_in_their_order():
    selection = _switch.selected_points(POINT_NAMES, {"SPECOPS_VLLM": "post_update, input_ids"})
    assert selection.points == ("input_ids", "post_update")


@pytest.mark.parametrize("value, named", [
    ("input_ids,no_such_point", "'no_such_point', which is not a point"),
    ("true", "'true', which is not a point"),
    ("all,", "an empty name (a stray comma)"),
    ("1,input_ids", "'1' inside a list"),
    (",", "an empty name (a stray comma)"),
    ("input_ids;post_update", "';' is not a separator"),
    ("input_ids,,post_update", "an empty name (a stray comma)"),
])
def test_a_value_not_fully_understood_switches_nothing_on_and_names_what(value, named):
    selection = _switch.selected_points(POINT_NAMES, {"SPECOPS_VLLM": value})
    assert selection.points == ()
    assert selection.problem == selection.reason
    assert f"SPECOPS_VLLM={value!r} is not understood" in selection.reason and named in selection.reason


def test_a_value_not_understood_warns_once_and_python_m_specops_says_the_same(caplog):
    import logging

    from specops.__main__ import environment_report
    from specops.integrations.vllm import apply

    with caplog.at_level(logging.WARNING):
        state = apply({"SPECOPS_VLLM": "input_ids;post_update"})
    assert not state.active
    assert [r.getMessage() for r in caplog.records] == [f"specops: {state.reason}"]
    if importlib.util.find_spec("vllm") is not None:
        assert state.reason in diagnose({"SPECOPS_VLLM": "input_ids;post_update"})
    import os

    os.environ["SPECOPS_VLLM"] = "input_ids;post_update"
    try:
        report = environment_report()
    finally:
        del os.environ["SPECOPS_VLLM"]
    if importlib.util.find_spec("vllm") is not None:
        assert state.reason in report


def test_the_switch_is_not_a_vllm_variable():
    # vLLM warns about unknown VLLM_* variables; the switch must not be one.
    assert not _switch.ENV.startswith("VLLM_")


def test_register_never_raises_and_reports(monkeypatch):
    monkeypatch.setenv("SPECOPS_VLLM", "1")
    register()
    state = status()
    if importlib.util.find_spec("vllm") is None:
        assert not state.active
        assert "vLLM" in state.reason or "vllm" in state.reason
    assert isinstance(diagnose(), str)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_diagnose_without_vllm():
    assert diagnose({"SPECOPS_VLLM": "1"}) == "inactive: vLLM is not installed"


class _Tables:
    num_kv_cache_groups = 2

    def __init__(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group, device,
                 cp_size=1, cp_rank=0, cp_interleave=1, slot_mapping_enabled=None, dcp_sharded=None,
                 sliding_window_reach=None):
        self.slot_mappings = torch.zeros(2, 8, dtype=torch.int64)


class _Speculator:
    """The speculator attributes the draft_steps seam reads, and a propose that reports whether
    the seam switched the fusion on for its body."""

    advance_draft_positions = True
    supports_decode_metadata_update = False

    def __init__(self, tables):
        self.block_tables = tables

    def propose(self, input_batch=None, *, dummy_run=False, skip_attn_for_dummy_run=False):
        body = getattr(self, "propose_body", None)
        return body() if body is not None else draft_steps._loop.get()

    def _generate_fused_drafts(self):
        return draft_steps._loop.get()

    def _generate_draft(self):
        pass

    def _multi_step_decode(self):
        pass


class _OwnLoop(_Speculator):
    def _generate_draft(self):
        pass


def _tables(known: bool = True):
    init = draft_steps.make_block_tables_init(_Tables.__init__) if known else _Tables.__init__
    tables = _Tables.__new__(_Tables)
    init(tables, [16, 32], 4, 8, [2, 2], "cpu", dcp_sharded=[True, False])
    return tables


@pytest.mark.parametrize("case", ["fused", "skip_attn", "constant_positions", "metadata_update", "own_loop",
                                  "unknown_tables", "no_groups"])
def test_the_draft_steps_seam_fuses_only_where_vllm_computes_the_slot_mappings_itself(case):
    propose = draft_steps.make_propose(_Speculator.propose)
    speculator = (_OwnLoop if case == "own_loop" else _Speculator)(_tables(known=case != "unknown_tables"))
    if case == "constant_positions":
        speculator.advance_draft_positions = False
    if case == "metadata_update":  # vLLM runs its fused-metadata loop: served as well
        speculator.supports_decode_metadata_update = True
    if case == "no_groups":
        speculator.block_tables.num_kv_cache_groups = 0
    dummy = case == "skip_attn"
    loop = propose(speculator, None, dummy_run=dummy, skip_attn_for_dummy_run=True)
    assert (loop is not None) is (case in ("fused", "metadata_update"))
    assert loop is None or loop.fused is (case == "metadata_update")
    assert draft_steps._loop.get() is None  # nothing leaks out of the call


def test_the_fused_loop_body_gets_a_loop_of_its_own_only_outside_propose():
    """Called alone (vLLM captures it in a full graph), the fused-metadata loop's body runs with a
    decode loop of its own; inside propose, with propose's."""
    body = draft_steps.make_fused_drafts(_Speculator._generate_fused_drafts, _Speculator.propose)
    speculator = _Speculator(_tables())
    alone = body(speculator)
    assert alone is not None and alone.fused and alone.speculator is speculator
    propose = draft_steps.make_propose(_Speculator.propose)
    speculator.propose_body = lambda: body(speculator)
    inside = propose(speculator, None)
    assert inside is not None and inside is not alone
    speculator.advance_draft_positions = False
    assert body(speculator) is None
    assert draft_steps._loop.get() is None


@pytest.mark.parametrize("fused", [False, True])
def test_compute_slot_mappings_serves_only_the_calls_the_launch_before_wrote_for(fused):
    """A record serves the call that follows its launch (and, for step 1 of the fused-metadata
    loop, the second call vLLM makes for the same slot mappings); another query layout runs
    vLLM's launch and drops the record."""
    calls = []
    compute = draft_steps.make_compute_slot_mappings(lambda *args: calls.append(args) or "vllm")
    tables = _tables()
    idx, qsl, positions = torch.zeros(3, dtype=torch.int64), torch.zeros(4, dtype=torch.int32), torch.zeros(3)
    loop = draft_steps._Loop(_Speculator(tables), fused=fused)
    token = draft_steps._loop.set(loop)
    try:
        key = draft_steps._key(tables, idx, qsl, positions)
        loop.written, loop.uses = key, 2 if fused else 1
        view = compute(tables, idx, qsl, positions, 5)
        assert view.data_ptr() == tables.slot_mappings.data_ptr() and view.shape == (2, 5)
        if fused:
            assert compute(tables, idx, qsl, positions, 5).shape == (2, 5)  # step 1's second call
        assert compute(tables, idx, qsl, positions, 5) == "vllm"  # used up: the next call launches
        loop.written, loop.uses = key, 2
        assert compute(tables, idx, qsl[:3], positions, 5) == "vllm"  # another query layout
        assert loop.written is None  # vLLM's launch wrote the buffer: the record is gone
        assert compute(tables, idx, qsl, positions, 5) == "vllm"
    finally:
        draft_steps._loop.reset(token)
    assert compute(tables, idx, qsl, positions, 5) == "vllm" and len(calls) == 4


class _Drafter:
    """The drafter buffers the draft prefill fills, and a propose that calls the two functions in
    vLLM's order (`_copy_request_inputs`, then the module's `prepare_prefill_inputs`)."""

    advance_draft_positions = False  # no decode-loop fusion: this is about the prefill

    def __init__(self, copy_request_inputs, prepare_prefill_inputs):
        self.idx_mapping = torch.full((6,), 77, dtype=torch.int64)
        self.temperature, self.seeds = torch.zeros(6), torch.zeros(6, dtype=torch.int64)
        self.last_token_indices = torch.full((6,), 99, dtype=torch.int64)
        self.current_draft_step = torch.tensor(5, dtype=torch.int64)
        self.input_buffers = types.SimpleNamespace(
            input_ids=torch.full((8,), 99, dtype=torch.int32), positions=torch.full((8,), 99, dtype=torch.int64),
            query_start_loc=torch.full((7,), 99, dtype=torch.int32), seq_lens=torch.full((6,), 99, dtype=torch.int32))
        self.copy_request_inputs, self.prepare_prefill_inputs = copy_request_inputs, prepare_prefill_inputs

    def _copy_request_inputs(self, num_reqs, idx_mapping, temperature, seeds, dummy_run=False):
        return self.copy_request_inputs(self, num_reqs, idx_mapping, temperature, seeds, dummy_run)

    def propose(self, input_batch, *, dummy_run=False, copy_from=None):
        self._copy_request_inputs(input_batch.num_reqs, input_batch.idx_mapping if copy_from is None else copy_from,
                                  torch.arange(6.0), torch.arange(6) * 10, dummy_run=dummy_run)
        self.prepare_prefill_inputs(self.last_token_indices, self.current_draft_step, self.input_buffers, input_batch,
                                    torch.tensor([2, 0], dtype=torch.int32), torch.tensor([1, 0], dtype=torch.int32),
                                    torch.arange(100, 106, dtype=torch.int64).view(6, 1),
                                    torch.arange(200, 206, dtype=torch.int32), 6)


def _vllm_copy_request_inputs(self, num_reqs, idx_mapping, temperature, seeds, dummy_run=False):
    self.temperature.copy_(temperature)
    self.seeds.copy_(seeds)
    if dummy_run:
        self.idx_mapping.fill_(-1)
    else:
        self.idx_mapping[:num_reqs].copy_(idx_mapping)
        self.idx_mapping[num_reqs:].fill_(-1)


@pytest.mark.parametrize("case", ["in_propose", "dummy_run", "another_mapping"])
def test_the_draft_prefill_takes_the_request_mapping_only_for_propose_s_own_batch(case):
    """Inside propose the mapping's copy joins the prefill launch; a dummy run and a mapping other
    than the batch's keep vLLM's copy; the prefill inputs are vLLM's in every case (docs/step_bookkeeping.md's example:
    requests at rows 2 and 0, queries [0, 3) and [3, 4), one rejected token)."""
    copies = []
    copy = draft_steps.make_copy_request_inputs(lambda *args: copies.append(args) or _vllm_copy_request_inputs(*args))
    prefill = draft_steps.make_prepare_prefill_inputs(None)
    drafter = _Drafter(copy, prefill)
    propose = draft_steps.make_propose(_Drafter.propose)
    batch = types.SimpleNamespace(
        num_reqs=2, idx_mapping=torch.tensor([2, 0], dtype=torch.int64), query_start_loc=torch.tensor([0, 3, 4],
        dtype=torch.int32), seq_lens=torch.tensor([8, 10], dtype=torch.int32),
        input_ids=torch.tensor([11, 12, 13, 21], dtype=torch.int32), positions=torch.tensor([5, 6, 7, 9]))
    other = torch.tensor([2, 0], dtype=torch.int64)
    drafter.block_tables = _tables()
    propose(drafter, batch, dummy_run=case == "dummy_run", copy_from=other if case == "another_mapping" else None)
    assert len(copies) == (0 if case == "in_propose" else 1)
    assert drafter.temperature.tolist() == list(range(6)) and drafter.seeds.tolist() == [0, 10, 20, 30, 40, 50]
    expected_mapping = [-1] * 6 if case == "dummy_run" else [2, 0, -1, -1, -1, -1]
    assert drafter.idx_mapping.tolist() == expected_mapping
    assert drafter.input_buffers.input_ids.tolist() == [12, 102, 99, 200, 99, 99, 99, 99]
    assert drafter.input_buffers.positions.tolist() == [5, 6, 99, 9, 99, 99, 99, 99]
    assert drafter.input_buffers.query_start_loc.tolist() == [0, 3, 4, 4, 4, 4, 4]
    assert drafter.input_buffers.seq_lens.tolist() == [8, 10, 0, 0, 0, 0]
    assert drafter.last_token_indices.tolist() == [1, 3, 0, 0, 0, 0] and drafter.current_draft_step.item() == 0
    assert draft_steps._prefill.get() is None  # nothing leaks out of the call
