"""The sas family's NPU route: each member's C++ host op and one asynchronous copy, not the
family's Triton kernel (triton_kernels/sas_metadata.py says why). On the op table's calls of
every member it launches no kernel and writes the host op's words; the timing it prints is this
machine's (no assertion on it)."""

from __future__ import annotations

import time

import pytest
import torch

import launches as capture

FAMILY = ("sas_metadata", "kv_quant_sas_metadata", "lightning_indexer_metadata")


def _op(op_table, name: str):
    (op,) = [op for op in op_table if op.name == name]
    return op


def test_the_family_is_every_op_launching_the_schedule_kernel(op_table):
    """A new member that launches _sas_metadata_kernel off the NPU must be listed here (and take
    the host route on it): its CPU-route launches name it."""
    import specops

    launching = set()
    for op in op_table:
        with specops.backend("triton"), capture.capture_launches(op.name) as launched:
            op.wrapper(**op.valid_call())
        if any(launch.kernel in capture.host_routed_kernels() for launch in launched):
            launching.add(op.name)
    assert launching == set(FAMILY)


@pytest.mark.parametrize("name", FAMILY)
def test_the_npu_route_is_the_host_op_and_launches_no_kernel(op_table, name):
    import specops
    from specops.triton_kernels._launch import assumed_npu

    op = _op(op_table, name)
    for label, call in capture.op_calls(op, capture.DRAWS):
        expected, actual = capture.clone_call(call), capture.clone_call(call)
        with specops.backend("native"):
            op.wrapper(**expected)
        actual["out"].fill_(-7)  # the route must write every word
        with assumed_npu(), specops.backend("triton"), capture.capture_launches(label) as launched:
            op.wrapper(**actual)
        assert not launched, f"{label}: the NPU route launched {[launch.kernel for launch in launched]}"
        assert torch.equal(expected["out"], actual["out"]), label
    _print_costs(op, op.valid_call())


def _print_costs(op, call: dict) -> None:
    import specops
    from specops.triton_kernels._launch import assumed_npu

    def median_us(run) -> float:
        times = []
        for _ in range(200):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return sorted(times)[len(times) // 2] * 1e6

    def native():
        with specops.backend("native"):
            op.wrapper(**call)

    def npu_route():
        with assumed_npu(), specops.backend("triton"):
            op.wrapper(**call)

    native_us, route_us = median_us(native), median_us(npu_route)
    print(f"\n{op.name} valid call: native host op {native_us:.1f} us, NPU route through the Triton launcher "
          f"(host op into a staging buffer, one copy) {route_us:.1f} us, median of 200 on this CPU")
