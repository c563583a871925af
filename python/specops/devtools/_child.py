"""The child processes of the kernel builds: compiles without TRITON_INTERPRET, captures with it.

Run as `python -m specops.devtools._child`; what it pickles names the devtools modules (never
__main__), so the parent unpickles it.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

from specops.devtools.kernel_compile import compile_jobs
from specops.devtools.kernel_report import capture_bench_launches
from specops.devtools.targets import NPU_TARGET, TARGETS


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m specops.devtools._child")
    parser.add_argument("--compile", nargs=2, metavar=("JOBS", "BUILDS"))
    parser.add_argument("--capture", metavar="LAUNCHES")
    parser.add_argument("--op", action="append", default=[])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--target", action="append", default=[])
    args = parser.parse_args(argv)
    if args.compile:
        jobs = pickle.loads(Path(args.compile[0]).read_bytes())
        Path(args.compile[1]).write_bytes(pickle.dumps(compile_jobs(jobs)))
        return 0
    if args.capture:
        by_name = {t.name: t for t in (*TARGETS, NPU_TARGET)}
        launches = capture_bench_launches(args.op, args.quick, tuple(by_name[name] for name in args.target))
        Path(args.capture).write_bytes(pickle.dumps(launches))
        return 0
    parser.error("nothing to do")
    return 2


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
