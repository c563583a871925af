"""The steps of the device check, each run in isolation, and the report they make together.

`run_step` runs one step in this process and returns its result (a dict with "status": "ok",
"partial" (time budget), "failed", "unsupported" or "skipped", and "reason"); an exception in a
step is its failure, never the others'. The driver (tools/device_check.py) runs each step in a
child process of its own (`python -m specops.devtools.device_check step <name>`), so that a
crash or a device fault (which poisons a CUDA context for the rest of its process) stops one
step only; `run_in_process` runs them one after another here (the CPU run of `make test`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import specops.devtools.device_check.device_path as device_path
import specops.devtools.device_check.graphs as graphs
import specops.devtools.device_check.schedules as schedules
import specops.devtools.device_check.timing as timing
from specops.devtools.device_check._common import (
    NO_DEVICE, Deadline, Target, environment, error_text, find_target, load_op_table, skipped,
)
from specops.devtools.device_check.report import SANITIZER_TOOLS, STEPS, assemble, write_json



def run_step(name: str, target: Target, seconds: float, *, op_specs: str | Path, carry: str | Path,
             random_calls: int, edge_cases: int, progress: Path | None = None) -> dict[str, Any]:
    """One step in this process."""
    deadline = Deadline.after(seconds)
    started = time.monotonic()
    try:
        if name == "device_path":
            table = load_op_table(op_specs)

            def save(ops):
                if progress is not None:
                    write_json(progress, {"status": "partial", "reason": "the step stopped before its end", "ops": ops})
            result = device_path.run(target, table, deadline, random_calls=random_calls, edge_cases=edge_cases,
                                     progress=save)
        elif name in SANITIZER_TOOLS:
            reason = target.reason if target.device is None else (
                "compute-sanitizer wraps a child process: run through tools/device_check.py (make device-check)")
            if target.kind == "npu":
                reason = "compute-sanitizer is CUDA's; no sanitizer run on an NPU"
            result = skipped(reason)
        elif name == "graph_capture":
            result = graphs.run_isolated(target, deadline)
        elif name == "timing":
            result = timing.run_isolated(target, deadline, carry)
        elif name == "host_planned_schedules":
            result = schedules.run_isolated(target)
        else:
            result = {"status": "failed", "reason": f"unknown step {name!r}"}
    except Exception as error:  # noqa: BLE001  (one step's failure is reported, the others still run)
        result = {"status": "failed", "reason": error_text(error)}
    result.setdefault("wall_s", round(time.monotonic() - started, 1))
    return result


def run_in_process(out_dir: str | Path, *, op_specs: str | Path, carry: str | Path = "build/device-carry",
                   budget_s: float = 420, random_calls: int = 2, edge_cases: int = 2,
                   build: dict[str, Any] | None = None, cpu_only: bool = False) -> dict[str, Any]:
    """Every step in this process, one after another (tests; a machine without a device).
    cpu_only: as on a machine without a device, whatever this one has (make test's run)."""
    started = time.monotonic()
    target = find_target()
    if cpu_only and target.device is not None:
        target = Target(None, f"{NO_DEVICE}: a CPU-only run (cpu_only) on a machine with {target.device}",
                        target.native)
    steps: dict[str, dict[str, Any]] = {"build": build or skipped(
        "in-process run: the extension this process imported is the one checked (its build ran before)")}
    for name, step in STEPS.items():
        left = budget_s - (time.monotonic() - started)
        if step["device_only"] and target.device is None and name in SANITIZER_TOOLS:
            steps[name] = skipped(target.reason)
        elif left < 5:
            steps[name] = skipped("time budget: the whole run's budget was spent")
        else:
            steps[name] = run_step(name, target, min(step["cap"], left), op_specs=op_specs, carry=carry,
                                   random_calls=random_calls, edge_cases=edge_cases)
        steps[name]["what"] = step["what"]
    op_names = [spec.name for spec in load_op_table(op_specs)]
    return assemble(Path(out_dir), environment(target), steps, op_names, started, budget_s)
