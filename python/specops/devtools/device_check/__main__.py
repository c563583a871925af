"""The child processes of tools/device_check.py (one per step), and the in-process run.

    python -m specops.devtools.device_check environment --out DIR
    python -m specops.devtools.device_check step NAME --out DIR --seconds S [--op-specs tests] [--carry DIR]
    python -m specops.devtools.device_check sanitized --out DIR --seconds S --tool memcheck
    python -m specops.devtools.device_check all --out DIR [--seconds S]   (every step here, no build)

Each writes its result as JSON under DIR/steps/ (a step also writes its progress there, so a
step stopped at its limit still says how far it got).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specops.devtools.device_check._common import Deadline, environment, find_target, write_json
from specops.devtools.device_check.run import run_in_process, run_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specops.devtools.device_check")
    parser.add_argument("what", choices=["environment", "step", "sanitized", "all"])
    parser.add_argument("name", nargs="?", help="the step (with `step`)")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--op-specs", default="tests", help="the folder of op_table.py")
    parser.add_argument("--carry", default="build/device-carry", help="the folder of vllm_kernels.py")
    parser.add_argument("--random-calls", type=int, default=6, help="random valid calls per op (step 2)")
    parser.add_argument("--edge-cases", type=int, default=6, help="edge-case calls per op (step 2)")
    parser.add_argument("--tool", default="memcheck", help="the sanitizer tool (with `sanitized`)")
    args = parser.parse_args(argv)
    steps = args.out / "steps"
    if args.what == "environment":
        write_json(steps / "environment.json", environment(find_target()))
        return 0
    if args.what == "sanitized":
        from specops.devtools.device_check.sanitizer import run_body

        target = find_target()
        path = steps / f"sanitizer_{args.tool}.body.json"
        write_json(path, run_body(target, Deadline.after(args.seconds), path))
        return 0
    if args.what == "all":
        report = run_in_process(args.out, op_specs=args.op_specs, carry=args.carry, budget_s=args.seconds,
                                random_calls=args.random_calls, edge_cases=args.edge_cases)
        print(f"report: {args.out}; failed: {report['summary']['failed'] or 'none'}")
        return 1 if report["summary"]["failed"] else 0
    if not args.name:
        parser.error("`step` needs the step's name")
    path = steps / f"{args.name}.json"
    result = run_step(args.name, find_target(), args.seconds, op_specs=args.op_specs, carry=args.carry,
                      random_calls=args.random_calls, edge_cases=args.edge_cases, progress=path)
    write_json(path, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
