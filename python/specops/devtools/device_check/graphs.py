"""Step 4: a whole runner step (runner_step.py) captured in a device graph and replayed.

The step runs twice eagerly on a side stream (Triton compiles its kernels, the layers fill their
per-shape caches), is captured once (`torch.cuda.CUDAGraph`; `torch.npu.NPUGraph` on Ascend),
then:

1. 50 steps of changing inputs, each written into the captured input buffers and replayed: the
   allocator's allocation count before and after (zero new allocations expected; what the
   capture itself allocated is reported beside it), and the replay's time per step;
2. the same 50 steps again, each replayed and then run eagerly on the same buffers from the same
   inputs: every output tensor of the graph equals the eager one's (and the mean time of a
   replay and of an eager step go to the CSV: wall time with a synchronize, per step).

Without a device the capture is skipped; two eager steps run on the CPU (native ops), which
exercises the step's wiring.
"""

from __future__ import annotations

import time
from typing import Any

import torch

import specops
from specops.devtools.device_check._common import Deadline, Target, error_text, skipped
from specops.devtools.device_check.runner_step import BOOKKEEPING, DRAFT_PASSES, GROUPS, K, NUM_REQS, RunnerStep

STEPS = 50


class GraphApi:
    """torch.cuda's or torch.npu's graph, stream and allocator-statistics calls."""

    def __init__(self, target: Target):
        self.module = torch.cuda if target.kind == "cuda" else torch.npu
        self.device = target.device
        self.graph_class = self.module.CUDAGraph if target.kind == "cuda" else self.module.NPUGraph

    def allocations(self) -> int:
        return int(self.module.memory_stats(self.device).get("allocation.all.allocated", 0))

    def synchronize(self) -> None:
        self.module.synchronize(self.device)


def _first_difference(name: str, got: torch.Tensor, want: torch.Tensor) -> str:
    if got.shape != want.shape:
        return f"{name}: shape {tuple(got.shape)} vs eager {tuple(want.shape)}"
    mismatch = (got != want).nonzero()
    index = tuple(mismatch[0].tolist())
    return (f"{name}: {mismatch.size(0)} entries differ, first at {index}: {got[index].item()} vs eager "
            f"{want[index].item()}")


def _snapshot(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().to("cpu", copy=True) for name, tensor in outputs.items()}


def structure() -> dict[str, list[str]]:
    """What one captured step holds, by name (the report lists it)."""
    return {"mappings": ["PersistentMappings.prepare_step"], "bookkeeping": [f.__name__ for f in BOOKKEEPING],
            "draft_passes": [f.__name__ for f in DRAFT_PASSES]}


def run(target: Target, deadline: Deadline) -> dict[str, Any]:
    started = time.monotonic()
    if target.device is None:
        with specops.backend("native" if target.native else "reference"):
            step = RunnerStep(torch.device("cpu"))
            for index in range(2):
                step.write_inputs(index)
                outputs = step.run()
        return skipped(f"{target.reason}: a graph needs a CUDA or NPU device",
                       plumbing=f"ok: 2 eager steps on the CPU ({len(outputs)} output tensors)", captured=structure())
    api = GraphApi(target)
    step = RunnerStep(target.device)
    side = api.module.Stream(device=target.device)
    side.wait_stream(api.module.current_stream(target.device))
    with api.module.stream(side):
        for index in range(2):
            step.write_inputs(index)
            step.run()
    api.module.current_stream(target.device).wait_stream(side)
    api.synchronize()
    step.write_inputs(0)
    api.synchronize()
    graph = api.graph_class()
    before = api.allocations()
    with api.module.graph(graph):
        captured = step.run()
    api.synchronize()
    capture_allocations = api.allocations() - before
    result: dict[str, Any] = {"captured": structure(), "output_tensors": len(captured),
                              "allocations_during_capture": capture_allocations}

    # 1. Replays alone: allocations and time.
    before = api.allocations()
    replay_seconds = 0.0
    for index in range(1, STEPS + 1):
        step.write_inputs(index)
        api.synchronize()
        start = time.perf_counter()
        graph.replay()
        api.synchronize()
        replay_seconds += time.perf_counter() - start
    result["allocations_during_replay"] = api.allocations() - before
    result["replay_us_per_step"] = round(replay_seconds / STEPS * 1e6, 1)

    # 2. Replay against eager, step by step.
    differences: list[str] = []
    eager_seconds, compared = 0.0, 0
    for index in range(1, STEPS + 1):
        if deadline.passed():
            break
        step.write_inputs(index)
        graph.replay()
        api.synchronize()
        replayed = _snapshot(captured)
        step.write_inputs(index)
        api.synchronize()
        start = time.perf_counter()
        eager = step.run()
        api.synchronize()
        eager_seconds += time.perf_counter() - start
        eager = _snapshot(eager)
        compared += 1
        for name, want in eager.items():
            got = replayed.get(name)
            if got is None:
                differences.append(f"step {index}: {name} is not among the captured outputs")
            elif got.shape != want.shape or not torch.equal(got, want):
                differences.append(f"step {index}: {_first_difference(name, got, want)}")
        if len(differences) > 20:
            break
    result["steps_compared"] = compared
    result["eager_us_per_step"] = round(eager_seconds / max(compared, 1) * 1e6, 1)
    result["differences"] = differences[:10]
    problems = []
    if differences:
        problems.append(f"{len(differences)} outputs differ from eager")
    if result["allocations_during_replay"]:
        problems.append(f"{result['allocations_during_replay']} allocations during replay")
    if compared < STEPS and not differences:
        result.update(status="partial", reason=f"time budget: {compared} of {STEPS} steps compared")
    else:
        result.update(status="failed" if problems else "ok", reason="; ".join(problems))
    replay, eager = result["replay_us_per_step"], result["eager_us_per_step"]
    label = f"R={NUM_REQS} K={K} groups={len(GROUPS)}"
    result["csv_rows"] = [
        {"source": "graph", "op": "runner_step", "label": label, "impl": "graph-replay", "role": "specops",
         "median_us": replay, "speedup": 1.0, "device": str(target.device)},
        {"source": "graph", "op": "runner_step", "label": label, "impl": "eager", "role": "baseline",
         "median_us": eager, "speedup": round(eager / replay, 3) if replay else "", "device": str(target.device)},
    ]
    result["wall_s"] = round(time.monotonic() - started, 1)
    return result


def run_isolated(target: Target, deadline: Deadline) -> dict[str, Any]:
    """run(), with a failure (a capture that syncs or allocates, say) reported, not raised."""
    try:
        if target.device is None:
            return run(target, deadline)
        with specops.backend(target.device_backend):
            return run(target, deadline)
    except Exception as error:  # noqa: BLE001
        return {"status": "failed", "reason": error_text(error), "captured": structure()}
