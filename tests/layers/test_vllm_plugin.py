"""The vLLM plugin's parts that need no vLLM (docs/integrations.md): the switch, and register()
and python -m specops without vLLM or without the switch. tests/vllm_integration drives it in
vLLM's own runner."""

from __future__ import annotations

import importlib.util

import pytest

from specops.integrations.vllm import POINT_NAMES, _switch, diagnose, register, status


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
