"""One op's calls with every kernel launch run from its lowered x86 code between guard pages.

Run as a child process (a guard fault ends it): `python guarded_run.py OP DRAWS REPORT`. For
each of the op's calls (the op table's valid call and DRAWS random valid calls, as the NPU
compile suite draws them) it runs the reference on one copy of the call and then, once per guard
placement, the Triton backend on another, each kernel launch replaced by
`x86_lowering.GuardedLaunch` of the launch's own specialization (compiled through the NPU route,
cached), launchers on their NPU route (`assumed_npu`). REPORT gets one JSON line per event: the
call and placement about to run, the tensor layout of each launch about to run (so a fault
address names a tensor), and each run's verdict (the tensors of the call, inputs included, that
differ from the reference's).
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import torch  # noqa: E402

import launches as capture  # noqa: E402
import npu_compile  # noqa: E402
import x86_lowering  # noqa: E402


_LOWERED: dict[str, x86_lowering.LoweredKernel] = {}  # by kernel and specialization, for the process


class Executor:
    """Runs each captured launch from its lowered code; compiles specializations on first use."""

    def __init__(self, placement: str, report):
        self.placement = placement
        self.report = report
        self.lowered = _LOWERED
        self.launches = 0

    @staticmethod
    def prepare(jobs: list[tuple[str, capture.NpuSpecialization]]) -> None:
        """Compiles and lowers the specializations of `jobs` in one go (one compile process at most)."""
        jobs = [(kernel, spec) for kernel, spec in jobs if kernel + spec.key() not in _LOWERED]
        builds = npu_compile.compile_all(jobs)
        for (kernel, _), build in zip(jobs, builds):
            if build.failed_stage in ("frontend", "adapter"):
                raise RuntimeError(f"{capture.kernel_name(kernel)} has no linalg to lower "
                                   f"({build.failed_stage}): {build.error}")
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:  # the tools run as processes
            lowered = list(pool.map(lambda build: x86_lowering.lower(build.linalg), builds))
        for (kernel, spec), kernel_code in zip(jobs, lowered):
            _LOWERED[kernel + spec.key()] = kernel_code

    def kernel_for(self, launch: capture.Launch) -> x86_lowering.LoweredKernel:
        specialization = capture.specialization(launch)
        self.prepare([(launch.kernel, specialization)])
        return self.lowered[launch.kernel + specialization.key()]

    def __call__(self, launch: capture.Launch) -> None:
        lowered = self.kernel_for(launch)
        values = launch.args
        specialization = capture.specialization(launch)
        names = [name for name in specialization.signature if name not in specialization.constants]
        guarded = x86_lowering.GuardedLaunch(lowered, names, [values[name] for name in names], self.placement)
        self.report({"launch": capture.kernel_name(launch.kernel), "grid": list(launch.grid),
                     "layout": guarded.layout()})
        try:
            guarded.run(launch.grid)
        finally:
            guarded.release()
        self.launches += 1


def _tensors(call: dict) -> dict[str, torch.Tensor]:
    """Every tensor of a call by name (`out[1]` for a list's), inputs included: an input the
    lowered code must not change is compared too."""
    found = {}
    for name, value in call.items():
        if isinstance(value, torch.Tensor):
            found[name] = value
        elif isinstance(value, (list, tuple)):
            found.update({f"{name}[{i}]": item for i, item in enumerate(value) if isinstance(item, torch.Tensor)})
    return found


def main(op_name: str, draws: int, report_path: str) -> int:
    import specops
    from op_table import OP_TABLE
    from specops.triton_kernels._launch import assumed_npu

    x86_lowering.install_fault_handler()
    (op,) = [op for op in OP_TABLE if op.name == op_name]
    with open(report_path, "w", buffering=1) as out:
        def report(event: dict) -> None:
            out.write(json.dumps(event) + "\n")

        calls = capture.op_calls(op, draws)
        jobs = {}
        for label, call in calls:  # every specialization first, to compile them together
            with assumed_npu(), specops.backend("triton"), capture.capture_launches(label) as launched:
                op.wrapper(**capture.clone_call(call))
            for launch in launched:
                if capture.specialization(launch) is not None:
                    jobs[launch.kernel + capture.specialization(launch).key()] = (launch.kernel,
                                                                                 capture.specialization(launch))
        Executor.prepare(list(jobs.values()))
        launches = 0
        for label, call in calls:
            expected = capture.clone_call(call)
            with specops.backend("reference"):
                op.wrapper(**expected)
            for placement in x86_lowering.PLACEMENTS:
                report({"call": label, "placement": placement})
                executor = Executor(placement, report)
                actual = capture.clone_call(call)
                with assumed_npu(), specops.backend("triton"), capture.capture_launches(label, run=executor):
                    op.wrapper(**actual)
                wanted, got = _tensors(expected), _tensors(actual)
                differ = [name for name in wanted if not torch.equal(wanted[name], got[name])]
                report({"verdict": label, "placement": placement, "differ": differ})
                launches += executor.launches
        report({"done": launches})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
