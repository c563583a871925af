"""The sas family's NPU route: sas_metadata, kv_quant_sas_metadata and lightning_indexer_metadata
all run their C++ host op and copy the 1024 words on an NPU (triton_kernels/sas_metadata.py,
`npu_host_routed`, says why), and launch the family's kernel everywhere else. No NPU exists
here: `assumed_npu` makes the launchers take their NPU route on CPU tensors, and the family's
kernel launch is replaced by a recorder, so a route that still launched would be seen."""

from __future__ import annotations

import importlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from op_table import OP_TABLE
from schedule_launches import launched  # noqa: F401 (a fixture)

import specops
from specops.devtools.kernel_capture import capture_launches
from specops.triton_kernels._launch import assumed_npu

FAMILY = ("sas_metadata", "kv_quant_sas_metadata", "lightning_indexer_metadata")
SPECS = {op.name: op for op in OP_TABLE if op.name in FAMILY}


def _clone(call: dict) -> dict:
    return {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in call.items()}


def _npu_route_matches_the_host_op(op, call: dict, launched: list[str]) -> None:
    expected, actual = _clone(call), _clone(call)
    with specops.backend("native"):
        op.wrapper(**expected)
    with assumed_npu(), specops.backend("triton"):
        op.wrapper(**actual)
    assert launched == [], f"{op.name}: the NPU route launched the kernel"
    assert torch.equal(actual["out"], expected["out"]), op.name


def test_the_family_is_the_op_table_family():
    assert sorted(SPECS) == sorted(FAMILY)


@pytest.mark.parametrize("name", FAMILY)
def test_the_npu_route_is_the_host_op_and_launches_nothing(name, launched):
    _npu_route_matches_the_host_op(SPECS[name], SPECS[name].valid_call(), launched)


@pytest.mark.parametrize("name", FAMILY)
def test_random_calls_take_the_host_route(name, launched):
    op = SPECS[name]

    @settings(max_examples=6, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(op.draw_call)
    def check(call):
        _npu_route_matches_the_host_op(op, call, launched)

    check()


@pytest.mark.parametrize("name", FAMILY)
def test_off_the_npu_the_launcher_launches_the_kernel(name, launched):
    # The recorder stands in for the kernel, so out keeps its stale words: only the launch counts.
    with specops.backend("triton"):
        SPECS[name].wrapper(**SPECS[name].valid_call())
    assert launched == [name]


@pytest.mark.parametrize("name", FAMILY)
def test_a_rejected_call_on_the_npu_route_writes_nothing(name, launched):
    call = SPECS[name].valid_call()
    call["batch_size"] = -1
    before = call["out"].clone()
    with assumed_npu(), specops.backend("triton"), pytest.raises(ValueError, match="batch_size"):
        SPECS[name].wrapper(**call)
    assert torch.equal(call["out"], before) and launched == []


@pytest.mark.parametrize("name", FAMILY)
def test_every_kernel_a_member_launches_is_marked_host_routed(name):
    """Off the NPU a member's launches (kv_quant_sas_metadata with 128 heads: two kernels) all
    come from modules that expose `host_route`, which is how the NPU compile suite (tests/ascend)
    knows not to expect them on the NPU route."""
    with specops.backend("triton"), capture_launches((), execute=False) as captured:
        SPECS[name].wrapper(**SPECS[name].valid_call())
    assert captured, name
    for launch in captured:
        module = importlib.import_module(launch.kernel.partition(":")[0])
        assert callable(getattr(module, "host_route", None)), launch.kernel
