"""Step 5: each op timed on the device against the torch-eager composition and vLLM's kernels.

Two sources of rows, one CSV (report.CSV_FIELDS):
- every benchmark case of `specops-bench` (specops.bench.BENCHMARKS) built on the device: the
  specops implementation and the case's other implementations on the same device tensors (the
  torch-eager composition a runner would write, the unfused sequences, floors), each through
  `triton.testing.do_bench` (device time between events, after a synchronize); host-only
  implementations (NumPy) are left out. `speedup` is the implementation's median over specops';
- vLLM's own kernels for the same work (vllm_peers.py), after a check that both write the same
  values; `speedup` is vLLM's median over specops'.
The graph-capture step adds its rows (the runner step replayed and eager) to the same CSV.
Cases run in the order of BENCHMARKS, round-robin over the ops, until the deadline.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import torch

import specops
from specops.devtools.device_check._common import Deadline, Target, error_text, round_robin, skipped
import specops.devtools.device_check.vllm_peers as vllm_peers

HOST_ONLY = ("numpy", "lean-numpy", "python", "python-rows")  # implementations that run on the host whatever the device
PEER_BATCHES = (64, 512)


def _bench(fn, target: Target) -> tuple[float, float, float]:
    """(median, p20, p80) microseconds of one call on the device."""
    import triton.testing

    fn()
    target.synchronize()
    median, p20, p80 = triton.testing.do_bench(fn, quantiles=[0.5, 0.2, 0.8], warmup=3, rep=15)
    return median * 1e3, p20 * 1e3, p80 * 1e3


def _row(source: str, op: str, label: str, impl: str, role: str, times: tuple[float, float, float],
         subject_us: float | None, device: str) -> dict[str, Any]:
    median, p20, p80 = times
    speedup = round(median / subject_us, 3) if subject_us else ""
    return {"source": source, "op": op, "label": label, "impl": impl, "role": role, "median_us": round(median, 2),
            "p20_us": round(p20, 2), "p80_us": round(p80, 2), "speedup": speedup, "device": device}


def bench_rows(target: Target, deadline: Deadline, ops: dict[str, Any]) -> tuple[list[dict], list[str]]:
    """Every benchmark case on the device; (rows, problems)."""
    from specops.bench import BENCHMARKS

    rows, problems = [], []
    queues = {}
    for name, module in BENCHMARKS.items():
        if deadline.passed():
            break
        try:
            queues[name] = module.cases(target.device, False)
        except Exception as error:  # noqa: BLE001  (one benchmark's set-up must not stop the others)
            problems.append(f"{name}: building its cases raised {error_text(error)}")
            ops[name] = {"status": "failed", "reason": error_text(error)}
    for name, case in round_robin(queues):
        if deadline.passed():
            ops.setdefault(name, {"status": "partial", "cases": 0})["status"] = "partial"
            continue
        entry = ops.setdefault(name, {"status": "ok", "cases": 0})
        try:
            timed = {impl: _bench(fn, target) for impl, fn in case.impls.items() if impl not in HOST_ONLY}
        except Exception as error:  # noqa: BLE001
            problems.append(f"{name} {case.label}: {error_text(error)}")
            entry.update(status="failed", reason=error_text(error))
            continue
        entry["cases"] += 1
        subject = timed.get(case.subject, (None,))[0]
        rows += [_row("bench", case.op, case.label, impl, case.role(impl), times, subject, str(target.device))
                 for impl, times in timed.items()]
    return rows, problems


def peer_rows(target: Target, deadline: Deadline, carry_dir: str | Path) -> tuple[list[dict], dict[str, Any]]:
    """vLLM's kernels against specops' ops; (rows, the per-pair report)."""
    vllm = vllm_peers.load_kernels(carry_dir)
    if vllm is None:
        return [], skipped(f"{Path(carry_dir) / 'vllm_kernels.py'} is missing: run `make device-carry` where vLLM's "
                           f"wheel is unpacked (make test-peers) and carry build/device-carry")
    rows, pairs = [], {}
    device = target.tensor_device
    batches = PEER_BATCHES if target.device is not None else (8,)
    for num_reqs in batches:
        for case in vllm_peers.cases(vllm, device, num_reqs):
            key = f"{case.op} {case.label}"
            if deadline.passed():
                pairs[key] = skipped("time budget")
                continue
            try:
                inputs, ours, theirs = case.make()
                ours()
                theirs()
                target.synchronize()
                problem = vllm_peers.disagreement(case, inputs)
                if problem is not None:
                    pairs[key] = {"status": "failed", "reason": f"outputs differ: {problem}"}
                    continue
                if target.device is None:
                    pairs[key] = {"status": "ok", "timed": False, "reason": "values agree (interpreter); no timing"}
                    continue
                mine, vllm_times = _bench(ours, target), _bench(theirs, target)
            except Exception as error:  # noqa: BLE001
                # Under the interpreter a kernel may use what only a compiler takes (vLLM's slot
                # mapping masks with scalar_bool & block_bool): not a finding without a device.
                status = "failed" if target.device is not None else "skipped"
                pairs[key] = {"status": status, "reason": error_text(error)}
                continue
            pairs[key] = {"status": "ok", "specops_us": round(mine[0], 2), "vllm_us": round(vllm_times[0], 2),
                          "vllm_over_specops": round(vllm_times[0] / mine[0], 3)}
            rows.append(_row("vllm", case.op, case.label, "specops", "specops", mine, mine[0], str(target.device)))
            rows.append(_row("vllm", case.op, case.label, "vllm", "baseline", vllm_times, mine[0], str(target.device)))
    failed = [key for key, pair in pairs.items() if pair["status"] == "failed"]
    status = "failed" if failed else "ok"
    return rows, {"status": status, "reason": f"failed: {', '.join(failed)}" if failed else "", "pairs": pairs}


def run(target: Target, deadline: Deadline, carry_dir: str | Path) -> dict[str, Any]:
    started = time.monotonic()
    if target.device is None:
        # The vLLM pairs' values still agree under the interpreter (when the kernels are carried).
        _, peers = peer_rows(target, deadline, carry_dir)
        return skipped(f"{target.reason}: timings need a CUDA or NPU device", vllm=peers, csv_rows=[])
    ops: dict[str, Any] = {}
    # vLLM's pairs first: they are few and the comparison the bench cases cannot make.
    peer_deadline = Deadline(min(deadline.end, time.monotonic() + max(deadline.left() / 3, 5)))
    rows, peers = peer_rows(target, peer_deadline, carry_dir)
    bench, problems = bench_rows(target, deadline, ops)
    rows += bench
    speedups = [row["speedup"] for row in bench if row["impl"] == "torch-eager" and row["speedup"]]
    summary = {"torch_eager_over_specops_median": round(statistics.median(speedups), 3) if speedups else None}
    partial = [name for name, entry in ops.items() if entry.get("status") == "partial"]
    status = "failed" if problems else "partial" if partial else "ok"
    reason = ("; ".join(problems[:5]) if problems
              else f"time budget: not every case of {', '.join(partial)}" if partial else "")
    return {"status": status, "reason": reason, "ops": ops, "vllm": peers, "summary": summary, "csv_rows": rows,
            "wall_s": round(time.monotonic() - started, 1)}


def run_isolated(target: Target, deadline: Deadline, carry_dir: str | Path) -> dict[str, Any]:
    try:
        with specops.backend(target.device_backend):
            return run(target, deadline, carry_dir)
    except Exception as error:  # noqa: BLE001
        return {"status": "failed", "reason": error_text(error), "csv_rows": []}
