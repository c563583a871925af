"""Benchmark goal cases counted in instructions executed, which no other process changes.

The timed goal figures of `specops-bench` are ratios of calls of a few µs to a few tens of µs,
which a loaded host moves. This tool runs the benchmark's own implementations of one case under
valgrind's callgrind, counting only the instructions of N calls of each (instrumentation is
switched on around each loop through callgrind's client requests, so importing torch and
building the case count nothing), and prints the case's figures from those counts.
Instructions are not time (Python and dispatcher code, an op's arithmetic, numpy's vector loops
and memory-bound rows each cost a different time per instruction), so the goals are judged in
time; the counts show what a change removes, whatever else runs on the host.

    python tools/instructions.py --list
    python tools/instructions.py sas_metadata
    python tools/instructions.py drafting --groups 8 --reqs 64 --k 7 --non-causal

Needs valgrind, its callgrind.h and a C compiler; a case takes a minute to a few minutes (most of
it importing torch under valgrind).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import glob
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable

Impls = dict[str, Callable[[], object]]

# Compiled at each run into a scratch library the measured process loads with ctypes: callgrind's
# client requests are C macros, so Python reaches them only through a function of its own.
TOGGLE_SOURCE = """
#include <valgrind/callgrind.h>
void measure_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void measure_stop(const char* label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""


@dataclasses.dataclass(frozen=True)
class Counted:
    """One case of the tool. `impls` runs under valgrind (it imports torch and builds the
    benchmark's case there); `report` runs in the starting process, from each implementation's
    instructions per call, by name."""

    summary: str  # one line, for --list and --help
    calls: int  # calls counted per implementation unless --calls says otherwise
    options: Callable[[argparse.ArgumentParser], None]
    impls: Callable[[argparse.Namespace], Impls]
    report: Callable[[dict[str, float], argparse.Namespace], None]


def _no_options(parser: argparse.ArgumentParser) -> None:
    """The goal cases of the fixed-shape benchmarks take no options: they are the benchmark's own."""


# drafting: the layer's figures (a), (b) and (d) of the contract. The layer's own work is Python
# and dispatcher code like the empty op, so its instructions track its time better than most.

def _drafting_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--groups", type=int, default=4, choices=(2, 4, 8))
    parser.add_argument("--reqs", type=int, default=64)
    parser.add_argument("--k", type=int, default=7, help="speculative tokens")
    parser.add_argument("--non-causal", action="store_true")


def _drafting_impls(args: argparse.Namespace) -> Impls:
    import torch

    from specops.bench import drafting

    case = drafting._case(args.groups, args.reqs, args.k, not args.non_causal, 1, torch.device("cpu"))
    # Without its cache the step rebuilds everything each call: a timing baseline, no figure here.
    return {name: fn for name, fn in case.impls.items() if name != "step no-cache"}


def _drafting_report(counts: dict[str, float], args: argparse.Namespace) -> None:
    import torch

    from specops.bench import drafting

    cpu = torch.device("cpu")
    groups = drafting.GROUPS[:args.groups]
    builders = drafting._builders(drafting.make_model(args.k, 1, cpu), groups, cpu)
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


# prepare_spec_decode_inputs: fused / native-unfused over the benchmark's goal cases, with the
# floors that bound the ratio from below: the `restore` copy both sides run, an empty aten op,
# an empty specops op through its wrapper, and the fused op without its Python wrapper.

PREPARE_IMPLS = ("specops", "native-unfused", "restore")


def _fused_body(case) -> Callable[[], None]:
    """The fused call of `case` without its Python wrapper: the op's FastOp (the dispatcher call
    the wrapper ends in) with the arguments the wrapper passed it once."""
    from specops.ops.registry import OPS

    fused_op = OPS["prepare_spec_decode_inputs"]
    # The wrapper runs what `select()` hands it (its selector holds the FastOp from construction
    # on, so replacing the SpecOp's `native_entry` reaches no call): for one call, select() hands
    # it a recorder that passes the call on to the FastOp, eager on the native backend.
    entry, selector, captured = fused_op.native_entry, fused_op.select, {}

    def record(*args, **kwargs):
        captured["call"] = args, kwargs
        return entry(*args, **kwargs)

    fused_op.select = lambda: record
    try:
        case.impls["specops"]()
    finally:
        fused_op.select = selector
    (args, kwargs), restore = captured["call"], case.impls["restore"]

    def body():
        restore()
        entry(*args, **kwargs)
    return body


def _prepare_impls(args: argparse.Namespace) -> Impls:
    import torch

    from specops.bench import prepare_spec_decode_inputs as bench

    goal_cases = [case for case in bench.cases(torch.device("cpu"), quick=False) if case.derive is not None]
    # The floors are the same in every case: counted once, from the first.
    runs = {"empty aten op": goal_cases[0].impls["empty-op"],
            "empty specops op": goal_cases[0].impls["empty-specops-op"]}
    for case in goal_cases:
        for name in PREPARE_IMPLS:
            runs[f"{case.label}|{name}"] = case.impls[name]
        runs[f"{case.label}|fused body + restore"] = _fused_body(case)
    return runs


def _prepare_report(counts: dict[str, float], args: argparse.Namespace) -> None:
    aten, specops_op = counts["empty aten op"], counts["empty specops op"]
    print(f"floors: empty aten op {aten:.0f} instructions a call, empty specops op (wrapper + dispatcher + checks) "
          f"{specops_op:.0f} ({specops_op / aten:.2f} empty aten ops)")
    # Labels start "R=<requests>": in batch order.
    labels = sorted({key.split("|")[0] for key in counts if "|" in key}, key=lambda label: int(label.split()[0][2:]))
    for label in labels:
        fused, unfused = counts[f"{label}|specops"], counts[f"{label}|native-unfused"]
        restore, body = counts[f"{label}|restore"], counts[f"{label}|fused body + restore"]
        print(f"{label}: fused {fused:.0f}, native-unfused {unfused:.0f}, restore {restore:.0f}, fused without its "
              f"wrapper {body - restore:.0f} instructions a call; fused/native-unfused {fused / unfused:.3f} "
              f"(goal <= 0.7), without the restore both run {(fused - restore) / (unfused - restore):.3f}")


# sas_metadata: specops / empty op at one layer and batch (the goal case by default).

def _sas_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--layer", default="CFA", choices=("SCFA", "CFA", "SWA"))
    parser.add_argument("--reqs", type=int, default=256)


def _sas_impls(args: argparse.Namespace) -> Impls:
    import torch

    from specops.bench import sas_metadata

    case = sas_metadata._case(args.layer, args.reqs, torch.device("cpu"))
    return {name: case.impls[name] for name in ("specops", "empty-op")}


def _sas_report(counts: dict[str, float], args: argparse.Namespace) -> None:
    op, empty = counts["specops"], counts["empty-op"]
    print(f"sas_metadata {args.layer} R={args.reqs}: {op:.0f} instructions a call, empty op {empty:.0f}: "
          f"{op / empty:.2f} empty ops")


# compute_slot_mapping: the CP goal case, the op at W=4 against W=1 and the empty op.

SLOT_IMPLS = ("specops", "specops W=1", "empty-op")


def _slot_impls(args: argparse.Namespace) -> Impls:
    import torch

    from specops.bench import compute_slot_mapping

    case = compute_slot_mapping._cp_case(torch.device("cpu"), *compute_slot_mapping.CP_CASE)
    return {name: case.impls[name] for name in SLOT_IMPLS}


def _slot_report(counts: dict[str, float], args: argparse.Namespace) -> None:
    from specops.bench.compute_slot_mapping import CP_CASE

    reqs, query_len, columns, interleave = CP_CASE
    cp, single, empty = (counts[name] for name in SLOT_IMPLS)
    print(f"compute_slot_mapping R={reqs} q={query_len} W=4 I={interleave} {columns} cols: {cp:.0f} instructions a "
          f"call, W=1 {single:.0f} (W=4/W=1 {cp / single:.2f}), empty op {empty:.0f} ({cp / empty:.1f} empty ops)")


CASES: dict[str, Counted] = {
    "drafting": Counted(
        "the drafting layer: later/first group, layer/empty op, first/repeat build", 200,
        _drafting_options, _drafting_impls, _drafting_report),
    "prepare_spec_decode_inputs": Counted(
        "the fused prepare's goal cases: fused/native-unfused and its floors", 300,
        _no_options, _prepare_impls, _prepare_report),
    "sas_metadata": Counted(
        "sas_metadata against the empty op (goal case: CFA, 256 requests)", 500,
        _sas_options, _sas_impls, _sas_report),
    "compute_slot_mapping": Counted(
        "compute_slot_mapping's CP goal case: W=4 against W=1 and the empty op", 200,
        _no_options, _slot_impls, _slot_report),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the cases and their defaults")
    cases = parser.add_subparsers(dest="case", metavar="CASE")
    for name, counted in CASES.items():
        case = cases.add_parser(name, help=counted.summary, description=counted.summary)
        counted.options(case)
        case.add_argument("--calls", type=int, default=counted.calls, help="calls counted per implementation")
        case.add_argument("--measure", metavar="TOGGLE_LIBRARY", help=argparse.SUPPRESS)  # the run under valgrind
    args = parser.parse_args(argv)
    if args.case is None and not args.list:
        parser.error("name a case (--list prints them)")
    return args


def defaults(name: str) -> dict[str, object]:
    """A case's options as it runs when none is given."""
    options = vars(parse_args([name]))
    return {key: value for key, value in options.items() if key not in ("list", "case", "measure")}


def count_loops(impls: Impls, calls: int, toggle_library: str) -> None:
    """Under valgrind, on one thread: `calls` calls of each implementation after a warm-up,
    instrumented and dumped under its name."""
    import torch

    toggle = ctypes.CDLL(toggle_library)
    torch.set_num_threads(1)
    for name, fn in impls.items():
        for _ in range(10):
            fn()
        toggle.measure_start()
        for _ in range(calls):
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


def run_counted(argv: list[str], calls: int) -> dict[str, float]:
    """Runs this tool with `argv --measure TOGGLE_LIBRARY` under callgrind, instrumentation off
    except around the loops count_loops brackets, and reads the instructions per call of each
    loop from callgrind's dumps (one per loop)."""
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "toggle.c")
        library = os.path.join(scratch, "toggle.so")
        with open(source, "w") as handle:
            handle.write(TOGGLE_SOURCE)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source], check=True)
        out = os.path.join(scratch, "callgrind.out")
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                   sys.executable, os.path.abspath(__file__), *argv, "--measure", library]
        # One OpenMP thread: the counts are of one thread's work, the same on every host.
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        return instructions_per_call(sorted(glob.glob(out + ".*")), calls)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.list:
        for name, counted in CASES.items():
            options = " ".join(f"{key}={value}" for key, value in defaults(name).items())
            print(f"{name}: {counted.summary} [{options}]")
        return 0
    counted = CASES[args.case]
    if args.measure:
        count_loops(counted.impls(args), args.calls, args.measure)
        return 0
    counted.report(run_counted(argv, args.calls), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
