"""compute_slot_mapping's CP goal case (1024 requests x 8 tokens, W=4, interleave 16, a
64-column table) in instructions.

The timed figures of `specops-bench --op compute_slot_mapping` (specops against the lean numpy
formula, W=4 against W=1) are ratios of calls of some tens of µs, which a loaded host moves.
This tool runs the benchmark's own goal case under valgrind's callgrind and counts only the
instructions of N calls of the op at W=4 and at W=1 (through its public wrapper, as the benchmark
calls it) and of N empty aten calls (the benchmark's floor), and prints them and their ratios.
Instructions are not time (numpy's vector loops retire more work per instruction than either),
so the goals are judged in time; this shows what a change removes.

    python tools/slot_mapping_instructions.py

Needs valgrind, its callgrind.h and a C compiler; takes a minute or two.
"""

from __future__ import annotations

import argparse
import sys

from drafting_instructions import count_loops, counted_main, instructions_per_call, parse_counted_args

IMPLS = ("specops", "specops W=1", "empty-op")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    return parse_counted_args(parser, argv, calls=200)


def measure(args: argparse.Namespace) -> None:
    import torch

    from specops.bench import compute_slot_mapping

    case = compute_slot_mapping._cp_case(torch.device("cpu"), *compute_slot_mapping.CP_CASE)
    count_loops(args, {name: case.impls[name] for name in IMPLS})


def report(dumps: list[str], args: argparse.Namespace) -> None:
    counts = instructions_per_call(dumps, args.calls)
    cp, single, empty = (counts[name] for name in IMPLS)
    print(f"compute_slot_mapping R=1024 q=8 W=4 I=16 64 cols: {cp:.0f} instructions a call, W=1 {single:.0f} "
          f"(W=4/W=1 {cp / single:.2f}), empty op {empty:.0f} ({cp / empty:.1f} empty ops)")


def main(argv: list[str] | None = None) -> int:
    return counted_main(__file__, argv, parse_args, measure, report)


if __name__ == "__main__":
    sys.exit(main())
