"""The drafting benchmark's figures in instructions executed, which no other process changes.

On a shared host the timed figures of `specops-bench --op drafting` (small differences between
steps) move with the load. This tool runs the same implementations of one case under
valgrind's callgrind, counting only the instructions of N calls of each (instrumentation is
switched on around each loop through callgrind's client requests), and prints the contract's
figures from those counts: (a) a later group that shares everything over the first group (both
from its prefix steps and, as the benchmark takes it, from its pair of small steps), (b)
each later group's layer work over one empty op, (d) a first build over a repeat. Instructions
are not time (memory-bound work, such as the DSpark rows, costs more time per instruction), so
this is a check of the layer's own work, which is Python and dispatcher code like the empty op.

    python tools/drafting_instructions.py --groups 8 --reqs 64 --k 7 --non-causal

Needs valgrind, its callgrind.h and a C compiler; takes a few minutes (most of it importing
torch under valgrind).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable

TOGGLE_SOURCE = """
#include <valgrind/callgrind.h>
void measure_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void measure_stop(const char* label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=4, choices=(2, 4, 8))
    parser.add_argument("--reqs", type=int, default=64)
    parser.add_argument("--k", type=int, default=7, help="speculative tokens")
    parser.add_argument("--non-causal", action="store_true")
    return parse_counted_args(parser, argv, calls=200)


def parse_counted_args(parser: argparse.ArgumentParser, argv: list[str] | None, calls: int) -> argparse.Namespace:
    """The options of every counting tool: the calls counted per implementation and, for the run
    under valgrind, the toggle library."""
    parser.add_argument("--calls", type=int, default=calls, help="calls counted per implementation")
    parser.add_argument("--measure", metavar="TOGGLE_LIBRARY", help=argparse.SUPPRESS)  # the run under valgrind
    return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> None:
    """Under valgrind: every implementation of the case, its calls counted apart."""
    import torch

    from specops.bench import drafting

    case = drafting._case(args.groups, args.reqs, args.k, not args.non_causal, 1, torch.device("cpu"))
    count_loops(args, {name: fn for name, fn in case.impls.items() if name != "step no-cache"})


def count_loops(args: argparse.Namespace, impls: dict[str, Callable[[], object]]) -> None:
    """Under valgrind, on one thread: `args.calls` calls of each implementation after a warm-up,
    instrumented and dumped under its name."""
    import torch

    toggle = ctypes.CDLL(args.measure)
    torch.set_num_threads(1)
    for name, fn in impls.items():
        for _ in range(10):
            fn()
        toggle.measure_start()
        for _ in range(args.calls):
            fn()
        toggle.measure_stop(name.encode())


def instructions_per_call(dumps: list[str], calls: int) -> dict[str, float]:
    """Each measured loop's instructions per call, by its label, from callgrind's dumps."""
    counts = {}
    for path in dumps:
        text = open(path).read()
        label = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        total = re.search(r"^totals: (\d+)", text, re.M)
        if label and total:
            counts[label.group(1)] = int(total.group(1)) / calls
    return counts


def report(dumps: list[str], args: argparse.Namespace) -> None:
    import torch

    from specops.bench import drafting

    counts = instructions_per_call(dumps, args.calls)
    groups = drafting.GROUPS[:args.groups]
    builders = drafting._builders(drafting.make_model(args.k, 1, torch.device("cpu")), groups, torch.device("cpu"))
    pairs = {pair.group: pair for pair in drafting.sharing_pairs(groups, builders, not args.non_causal)}
    empty = counts["empty-op"]
    steps = [drafting._step_name(count, args.groups) for count in range(1, args.groups + 1)]
    layers = [drafting._layer_name(count) for count in range(1, args.groups + 1)]
    first = counts["step g0"]
    kind = "non-causal" if args.non_causal else "causal"
    print(f"G={args.groups} R={args.reqs} k={args.k} {kind}: empty op {empty:.0f} instructions, "
          f"step g0 {first / empty:.2f} empty ops, first/repeat {counts['first build'] / counts['repeat build']:.3f}")
    for k in range(1, len(steps)):
        step = (counts[steps[k]] - counts[steps[k - 1]]) / first
        layer = (counts[layers[k]] - counts[layers[k - 1]]) / empty
        line = f"  g{k}: later/first {step:.3f}, layer/empty-op {layer:.2f}"
        if k in pairs:  # figure (a) as the benchmark takes it: the group's pair of small steps
            pair = pairs[k]
            line += f", shares everything: ({pair.with_name} - {pair.base_name})/first " \
                    f"{(counts[pair.with_name] - counts[pair.base_name]) / first:.3f}"
        print(line)


def run_counted(script: str, argv: list[str], on_dumps: Callable[[list[str]], None]) -> None:
    """Runs `script --measure TOGGLE_LIBRARY argv...` under callgrind with instrumentation off
    except around the loops the script brackets with the toggle library, then hands callgrind's
    dumps (one per loop) to on_dumps."""
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "toggle.c")
        library = os.path.join(scratch, "toggle.so")
        with open(source, "w") as handle:
            handle.write(TOGGLE_SOURCE)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
        out = os.path.join(scratch, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                   sys.executable, os.path.abspath(script), "--measure", library, *argv]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        on_dumps(sorted(glob.glob(out + ".*")))


def counted_main(tool: str, argv: list[str] | None, parse_args: Callable, measure: Callable, report: Callable) -> int:
    """A counting tool's entry: under valgrind (--measure) its loops, else the run that starts
    valgrind on `tool` and reports from the dumps."""
    args = parse_args(argv)
    if args.measure:
        measure(args)
        return 0
    run_counted(tool, list(argv or sys.argv[1:]), lambda dumps: report(dumps, args))
    return 0


def main(argv: list[str] | None = None) -> int:
    return counted_main(__file__, argv, parse_args, measure, report)


if __name__ == "__main__":
    sys.exit(main())
