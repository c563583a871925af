"""`specops-kernels`: resources per kernel and target, and grids per benchmark case.

The benchmark cases' specops implementations run on the Triton backend with launches captured
(kernel_capture.py, kernels not run), each distinct variant is compiled (kernel_compile.py), and
the report prints one row per build and the grids of each case's launches.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from specops.devtools.kernel_capture import Launch, capture_launches, kernel_name
from specops.devtools.kernel_compile import KernelBuild, compile_jobs, distinct_jobs, interpreting
from specops.devtools.targets import NPU_TARGET, TARGETS, Target, installed_targets


def capture_bench_launches(selected: list[str], quick: bool, targets: Iterable[Target]) -> list[Launch]:
    """Each benchmark case's specops implementation on the Triton backend, kernels not run,
    grids sized for each target's device. Needs TRITON_INTERPRET=1 (CPU tensors reach the
    Triton launchers only through the interpreter's entry)."""
    import torch

    import specops
    from specops.bench import BENCHMARKS
    from specops.launch_target import assumed_cores

    device = torch.device("cpu")
    launches = []
    for name in selected:
        for case in BENCHMARKS[name].cases(device, quick):
            for target in targets:
                with assumed_cores(target.cores), specops.backend("triton"), \
                        capture_launches([target], execute=False, label=f"{case.op} {case.label}") as captured:
                    case.impls[case.subject]()
                for launch in captured:
                    launch.label += f" [{case.subject}]"
                    launch.grid_target = target.name
                launches += captured
    return launches


def _capture_in_interpreter(selected: list[str], quick: bool, targets: tuple[Target, ...]) -> list[Launch]:
    if interpreting():
        return capture_bench_launches(selected, quick, targets)
    with tempfile.TemporaryDirectory() as folder:
        reply = Path(folder) / "launches.pickle"
        command = [sys.executable, "-m", "specops.devtools._child", "--capture", str(reply),
                   *[arg for name in selected for arg in ("--op", name)], *(["--quick"] if quick else []),
                   *[arg for target in targets for arg in ("--target", target.name)]]
        result = subprocess.run(command, env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"capturing the benchmark launches failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return pickle.loads(reply.read_bytes())


def _value(value: int | None) -> str:
    return "-" if value is None else str(value)


def report_lines(launches: list[Launch], builds: list[KernelBuild], targets: tuple[Target, ...]) -> list[str]:
    lines = ["Kernel builds: one row per kernel variant and target (spill B: bytes spilled to local memory per "
             "thread; sgpr sp: SGPRs spilled into VGPR lanes; shared B: shared memory / LDS; specializations in "
             "the CSV)",
             f"  {'kernel':<40} {'target':<7} {'regs':>5} {'sgprs':>5} {'spill B':>7} {'sgpr sp':>7} "
             f"{'stack B':>7} {'shared B':>8} {'warps':>5}  variant"]
    order = {name: index for index, name in enumerate(dict.fromkeys(b.kernel for b in builds))}
    variants = {key: index for index, key in enumerate(dict.fromkeys((b.kernel, b.summary) for b in builds))}
    target_order = {t.name: index for index, t in enumerate(targets)}
    for build in sorted(builds, key=lambda b: (order[b.kernel], variants[(b.kernel, b.summary)],
                                               target_order.get(b.target, 0))):
        head = f"  {kernel_name(build.kernel):<40} {build.target:<7}"
        if build.error is not None or build.skipped is not None:
            lines.append(f"{head} {'FAILED: ' + build.error if build.error else 'skipped: ' + str(build.skipped)}")
            continue
        lines.append(
            f"{head} {_value(build.registers):>5} {_value(build.scalar_registers):>5} {_value(build.spill_bytes):>7} "
            f"{_value(build.scalar_spills):>7} {_value(build.stack_bytes):>7} {_value(build.shared_bytes):>8} {_value(build.num_warps):>5}  "
            f"{build.summary}")
    devices = ", ".join(f"{t.name}: {t.device}, {t.cores} cores" for t in targets)
    lines += ["", f"Grids per benchmark case: programs per launch on {devices}",
              f"  {'case':<60} {'kernel':<40} {'launches':>8} " + " ".join(f"{t.name:>7}" for t in targets)]
    # (case, kernel) -> target -> the grids of its launches, in order
    grids: dict[tuple[str, str], dict[str, list[tuple[int, ...]]]] = {}
    for launch in launches:
        grids.setdefault((launch.label, launch.kernel), {}).setdefault(launch.grid_target, []).append(launch.grid)
    for (label, kernel), per_target in grids.items():
        count = max(len(g) for g in per_target.values())
        cells = []
        for target in targets:
            sizes = sorted({"x".join(map(str, grid)) for grid in per_target.get(target.name, [])})
            cells.append(f"{'/'.join(sizes) or '-':>7}")
        lines.append(f"  {label:<60} {kernel_name(kernel):<40} {count:>8} " + " ".join(cells))
    return lines


def write_builds_csv(path: str, builds: list[KernelBuild]) -> None:
    import csv

    fields = [field.name for field in dataclasses.fields(KernelBuild)]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for build in builds:
            writer.writerow(dataclasses.asdict(build))


def report_main(selected: list[str], quick: bool, csv_path: str | None) -> int:
    """Resources per kernel and target, grids per benchmark case (of `selected`, names of
    specops.bench.BENCHMARKS)."""
    targets = installed_targets()
    started = time.perf_counter()
    launches = _capture_in_interpreter(selected, quick, targets)
    builds = compile_jobs(distinct_jobs(launches, targets, per_variant=True))
    print("\n".join(report_lines(launches, builds, targets)))
    failed = [b for b in builds if b.error is not None]
    spilled = [b for b in builds if b.spill_bytes]
    kernel_count = len({b.kernel for b in builds})
    print(f"{len(builds)} builds of {kernel_count} kernels in {time.perf_counter() - started:.1f} s; "
          f"{len(failed)} failed, {len(spilled)} spill to local memory")
    for target in (*TARGETS, NPU_TARGET):
        if not target.installed():
            print(f"{target.name}: not compiled (the installed Triton has no '{target.plugin}' backend)")
    if csv_path:
        os.makedirs(os.path.dirname(csv_path) or ".", exist_ok=True)
        write_builds_csv(csv_path, builds)
        print(f"CSV: {csv_path}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """`specops-kernels` / `python -m specops.devtools.kernel_report`. A tool over the benchmark
    cases (it imports specops.bench; the bench imports nothing of devtools)."""
    import argparse

    from specops.bench import BENCHMARKS

    parser = argparse.ArgumentParser(
        prog="specops-kernels",
        description="compile every Triton kernel the benchmark cases launch for CUDA sm_80/sm_90 and AMD gfx942 (no "
                    "device needed) and print registers, spills, shared memory and each case's grid")
    parser.add_argument("--quick", action="store_true", help="the benchmark's tiny shapes")
    parser.add_argument("--op", action="append", choices=sorted(BENCHMARKS), help="only this op's cases (repeatable)")
    parser.add_argument("--csv", default="bench-results/specops-kernels.csv",
                        help="where to write one row per kernel build")
    args = parser.parse_args(argv)
    return report_main(args.op or list(BENCHMARKS), args.quick, args.csv)


if __name__ == "__main__":
    sys.exit(main())
