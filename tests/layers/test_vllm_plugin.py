"""The vLLM plugin's parts that need no vLLM (docs/integrations.md): the switch, register()
and python -m specops without vLLM or without the switch, and the draft_steps seam's conditions
on stand-ins with the attributes it reads. tests/vllm_integration drives it in
vLLM's own runner."""

from __future__ import annotations

import importlib.util

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


def test_an_unknown_point_switches_nothing_on_and_says_why():
    selection = _switch.selected_points(POINT_NAMES, {"SPECOPS_VLLM": "input_ids,no_such_point"})
    assert selection.points == ()
    assert "no_such_point" in selection.reason


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
        return draft_steps._loop.get() is not None

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
    if case == "metadata_update":
        speculator.supports_decode_metadata_update = True
    if case == "no_groups":
        speculator.block_tables.num_kv_cache_groups = 0
    dummy = case == "skip_attn"
    assert propose(speculator, None, dummy_run=dummy, skip_attn_for_dummy_run=True) is (case == "fused")
    assert draft_steps._loop.get() is None  # nothing leaks out of the call


def test_compute_slot_mappings_skips_only_the_call_the_launch_before_wrote_for():
    calls = []
    compute = draft_steps.make_compute_slot_mappings(lambda *args: calls.append(args) or "vllm")
    tables = _tables()
    idx, qsl, positions = torch.zeros(3, dtype=torch.int64), torch.zeros(4, dtype=torch.int32), torch.zeros(3)
    loop = draft_steps._Loop(_Speculator(tables))
    token = draft_steps._loop.set(loop)
    try:
        loop.written = draft_steps._key(tables, idx, qsl, positions)
        assert compute(tables, idx, qsl[:3], positions, 5) == "vllm"  # another query layout
        view = compute(tables, idx, qsl, positions, 5)
        assert view.data_ptr() == tables.slot_mappings.data_ptr() and view.shape == (2, 5)
        assert compute(tables, idx, qsl, positions, 5) == "vllm"  # consumed: the next call launches
    finally:
        draft_steps._loop.reset(token)
    assert compute(tables, idx, qsl, positions, 5) == "vllm" and len(calls) == 3
