"""sas_metadata's goal figure (specops/empty-op at the CFA layer, 256 requests) in instructions.

The timed figure of `specops-bench --op sas_metadata` is a ratio of two calls of a few µs, which
a loaded host moves. This tool runs the benchmark's own goal case under valgrind's callgrind and
counts only the instructions of N calls of the op (through its public wrapper, as the benchmark
calls it) and of N empty aten calls (the benchmark's floor), and prints both and their ratio.
Instructions are not time (the empty op is Python and dispatcher code at a lower cost per
instruction than the op's arithmetic), so the goal is judged in time; this shows what a change
removes.

    python tools/sas_metadata_instructions.py

Needs valgrind, its callgrind.h and a C compiler; takes a minute or two.
"""

from __future__ import annotations

import argparse
import sys

from drafting_instructions import count_loops, counted_main, instructions_per_call, parse_counted_args


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layer", default="CFA", choices=("SCFA", "CFA", "SWA"))
    parser.add_argument("--reqs", type=int, default=256)
    return parse_counted_args(parser, argv, calls=500)


def measure(args: argparse.Namespace) -> None:
    from specops.bench import sas_metadata

    case = sas_metadata._case(args.layer, args.reqs)
    count_loops(args, {name: case.impls[name] for name in ("specops", "empty-op")})


def report(dumps: list[str], args: argparse.Namespace) -> None:
    counts = instructions_per_call(dumps, args.calls)
    op, empty = counts["specops"], counts["empty-op"]
    print(f"sas_metadata {args.layer} R={args.reqs}: {op:.0f} instructions a call, empty op {empty:.0f}: "
          f"{op / empty:.2f} empty ops")


def main(argv: list[str] | None = None) -> int:
    return counted_main(__file__, argv, parse_args, measure, report)


if __name__ == "__main__":
    sys.exit(main())
