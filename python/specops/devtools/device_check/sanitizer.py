"""Step 3: the kernels with several programs at once under compute-sanitizer.

The driver (tools/device_check.py) runs `python -m specops.devtools.device_check sanitized`
under `compute-sanitizer --tool memcheck` and again under `--tool racecheck`, with torch's
caching allocator off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so that every tensor is an allocation
of its own and an access past it is outside any allocation, which memcheck reports. The body
(`run_body`) calls each op's specops implementation once on the largest case of its benchmark
(hundreds to thousands of requests: persistent grids of one program per SM, whose programs
write neighbouring tiles of the same outputs), round-robin until its deadline, and records the
ops it reached; report.parse_log reads the sanitizer's report back. racecheck sees hazards on shared
memory within a program; races between programs on global memory show as outputs that differ
from the CPU op's (step 2 runs the same kernels with many programs) or from run to run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import specops
from specops.devtools.device_check._common import Deadline, Target, error_text, write_json


def run_body(target: Target, deadline: Deadline, progress_path: Path) -> dict[str, Any]:
    """The sanitized process's work: one call of each benchmark's largest case."""
    from specops.bench import BENCHMARKS

    reached: dict[str, str] = {}
    with specops.backend(target.device_backend):
        for name, module in BENCHMARKS.items():
            _run_one(name, module, target, deadline, reached)
            write_json(progress_path, {"ops": reached})
    return {"ops": reached}


def _run_one(name: str, module, target: Target, deadline: Deadline, reached: dict[str, str]) -> None:
    if deadline.passed():
        reached[name] = "skipped: time budget"
        return
    try:
        cases = module.cases(target.device, False)
        case = max(cases, key=lambda c: (c.num_tokens, c.batch_size))
        case.impls[case.subject]()
        target.synchronize()
        reached[name] = f"ran: {case.label}"
    except Exception as error:  # noqa: BLE001  (reported; the sanitizer's log says the rest)
        reached[name] = f"raised {error_text(error)}"
