"""The NPU route's lowered code of every kernel, run on x86 with guard pages around every tensor
(docs/device_readiness.md, "The NPU").

For every op, its op-table calls (valid call and random draws) run on the Triton backend with
each kernel launch executed from the adapter's linalg compiled to x86 (x86_lowering.py), twice:
once with a PROT_NONE page right after every tensor, once with one right before. The outputs
must equal the reference's, and no launch may touch memory outside its tensors (a fault ends the
child process; its address is mapped back to the tensor it is next to).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import launches as capture
import x86_lowering

DRAWS = capture.DRAWS

HERE = Path(__file__).resolve().parent


def _op_names():
    from op_table import OP_TABLE

    return [op.name for op in OP_TABLE]


def _op(name: str):
    from op_table import OP_TABLE

    return next(op for op in OP_TABLE if op.name == name)


def _fault_message(events: list[dict], stderr: str) -> str:
    run = next((e for e in reversed(events) if "call" in e), {"call": "?", "placement": "?"})
    call = f"{run['call']} (guard page {run['placement']} every tensor)"
    launch = next((e for e in reversed(events) if "launch" in e), None)
    match = x86_lowering.FAULT_LINE.search(stderr)
    where = "an unknown address"
    if match and launch is not None and match.group(2) != "(nil)":
        address = int(match.group(2), 16)
        near = [name for start, end, name in launch["layout"] if start <= address < end]
        where = f"{match.group(2)}, beside {near[0]}" if near else f"{match.group(2)}, beside no tensor of the launch"
    kernel = launch["launch"] if launch else "no kernel"
    return f"{call}: {kernel} grid {launch['grid'] if launch else ''} accessed {where}"


@pytest.mark.parametrize("op_name", _op_names())
def test_lowered_kernels_stay_inside_their_tensors(op_name, tmp_path):
    report = tmp_path / "events.jsonl"
    result = subprocess.run([sys.executable, str(HERE / "guarded_run.py"), op_name, str(DRAWS), str(report)],
                            capture_output=True, text=True)
    events = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    if result.returncode == x86_lowering.FAULT_EXIT:
        pytest.fail(f"guard page hit: {_fault_message(events, result.stderr)}")
    assert result.returncode == 0, f"the guarded run failed ({result.returncode}):\n{result.stderr[-3000:]}"
    differ = [f"{e['verdict']} (guard {e['placement']}): {', '.join(e['differ'])}" for e in events if e.get("differ")]
    assert not differ, "lowered kernels disagree with the reference:\n" + "\n".join(differ)
    verdicts = [e for e in events if "verdict" in e]
    calls = len(capture.op_calls(_op(op_name), DRAWS))
    assert len(verdicts) == calls * len(x86_lowering.PLACEMENTS), events[-3:]
    print(f"{op_name}: {len(verdicts)} guarded runs ({calls} calls x {len(x86_lowering.PLACEMENTS)} placements), "
          f"{events[-1]['done']} launches from lowered code, every tensor equal to the reference's, no access "
          "outside a tensor")


def test_a_read_past_a_tensor_is_caught(tmp_path):
    """The guard itself: a kernel that reads one element past its input faults in the child."""
    script = tmp_path / "past_end.py"
    script.write_text(f"""
import sys
sys.path[:0] = [{str(HERE)!r}, {str(HERE.parent)!r}]
import x86_lowering
x86_lowering.install_fault_handler()
import ctypes, torch
values = torch.arange(4, dtype=torch.int32)
span = x86_lowering.GuardedSpan(values.data_ptr(), 16, names=("x",))
span.place("after")
print(ctypes.c_int32.from_address(span.address + 12).value, flush=True)  # the last element: fine
ctypes.c_int32.from_address(span.address + 16).value  # one past it: the guard page
""")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert result.stdout.strip() == "3"
    assert result.returncode == x86_lowering.FAULT_EXIT, result.stderr
    assert x86_lowering.FAULT_LINE.search(result.stderr)


def test_the_docs_state_the_guarded_runs():
    from docs_figures import assert_docs_say

    calls = capture.DEFAULT_DRAWS + 1
    assert_docs_say("device_readiness.md", f"{calls} calls (the valid call and {capture.DEFAULT_DRAWS} random ones) "
                                           f"and their widened variants, {len(x86_lowering.PLACEMENTS)} placements each")


def test_the_widened_calls_reach_every_dtype_of_every_tensor_argument(op_table):
    """Every (tensor argument, dtype) the op table lists is launched by some call of the op."""
    import torch
    from op_table import get_arg

    missing = []
    for op in op_table:
        seen = set()
        for _, call in capture.op_calls(op, 0):
            for key in op.tensors:
                value = get_arg(call, key)
                if isinstance(value, torch.Tensor):
                    seen.add((key, value.dtype))
        missing += [f"{op.name}: {key} {dtype}" for key, arg in op.tensors.items() for dtype in arg.dtypes
                    if (key, dtype) not in seen and isinstance(get_arg(op.valid_call(), key), torch.Tensor)]
    assert not missing, "no valid call takes:\n" + "\n".join(missing)
