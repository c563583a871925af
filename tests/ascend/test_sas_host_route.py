"""sas_metadata's NPU route: the C++ host op and one asynchronous copy, not the Triton kernel
(triton_kernels/sas_metadata.py says why). On the op table's calls it launches no kernel and
writes the host op's words; the timing it prints is this machine's (no assertion on it)."""

from __future__ import annotations

import time

import torch

import launches as capture


def _sas_op(op_table):
    (op,) = [op for op in op_table if op.name == "sas_metadata"]
    return op


def test_the_npu_route_is_the_host_op_and_launches_no_kernel(op_table):
    import specops
    from specops.triton_kernels._launch import assumed_npu

    op = _sas_op(op_table)
    for label, call in capture.op_calls(op, capture.DRAWS):
        expected, actual = capture.clone_call(call), capture.clone_call(call)
        with specops.backend("native"):
            op.wrapper(**expected)
        with assumed_npu(), specops.backend("triton"), capture.capture_launches(label) as launched:
            op.wrapper(**actual)
        assert not launched, f"{label}: the NPU route launched {[launch.kernel for launch in launched]}"
        assert torch.equal(expected["out"], actual["out"]), label
    _print_costs(op.valid_call())


def _print_costs(call: dict) -> None:
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
            specops.sas_metadata(**call)

    def npu_route():
        with assumed_npu(), specops.backend("triton"):
            specops.sas_metadata(**call)

    native_us, route_us = median_us(native), median_us(npu_route)
    print(f"\nsas_metadata valid call: native host op {native_us:.1f} us, NPU route through the Triton launcher "
          f"(host op into a staging buffer, one copy) {route_us:.1f} us, median of 200 on this CPU")
