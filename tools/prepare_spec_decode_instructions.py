"""The fused prepare_spec_decode_inputs goal (fused / native-unfused) in instructions executed.

The timed figure of `specops-bench --op prepare_spec_decode_inputs` is a ratio of calls of a few
µs, which a loaded host moves. This tool runs the benchmark's own goal cases under valgrind's
callgrind and counts only the instructions of N calls of each implementation (through the
public wrappers, as the benchmark calls them), and prints the ratio. It also counts the floors
that bound the ratio from below: the `restore` copy both sides run, an empty aten op (one
dispatcher call from Python), an empty correct_num_computed_tokens through its wrapper (one
specops op call: wrapper, argument boxing, dispatcher, checks, no work) and the fused op
without its Python wrapper (its FastOp called with the packed arguments: boxing, dispatcher,
checks and the C++ body).
Instructions are not time (the wrappers are Python and dispatcher code, the bodies loads and
stores at a different cost per instruction), so the goal is judged in time; this shows what a
change removes, whatever else runs on the host.

    python tools/prepare_spec_decode_instructions.py

Needs valgrind, its callgrind.h and a C compiler; takes a few minutes.
"""

from __future__ import annotations

import argparse
import sys

from drafting_instructions import count_loops, counted_main, instructions_per_call, parse_counted_args

IMPLS = ("specops", "native-unfused", "restore")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    return parse_counted_args(parser, argv, calls=300)


def _floors():
    """The per-call floors: an empty aten op, an empty specops op through its wrapper."""
    import torch

    import specops
    from specops.bench._harness import empty_op_call

    empty = torch.zeros(0, dtype=torch.int32)
    return {
        "empty aten op": empty_op_call(torch.device("cpu")),
        "empty specops op": lambda: specops.correct_num_computed_tokens(empty, empty, empty, empty, empty, empty),
    }


def _fused_body(case):
    """The fused call of the case without its Python wrapper: the op's FastOp (the dispatcher
    call the wrapper ends in) with the arguments the wrapper passed it once."""
    from specops.ops.registry import OPS

    fused_op = OPS["prepare_spec_decode_inputs"]
    captured = {}
    # What the wrapper calls on the usual arguments, eager on the native backend.
    entry = fused_op.native_entry

    def record(*args):
        captured["args"] = args
        return entry(*args)

    fused_op.native_entry = record
    try:
        case.impls["specops"]()
    finally:
        fused_op.native_entry = entry
    args = captured["args"]
    op = fused_op.native_entry
    restore = case.impls["restore"]

    def body():
        restore()
        op(*args)
    return body


def _goal_cases():
    import torch

    from specops.bench import prepare_spec_decode_inputs as bench

    return [case for case in bench.cases(torch.device("cpu"), quick=False) if case.derive is not None]


def measure(args: argparse.Namespace) -> None:
    runs = dict(_floors())
    for case in _goal_cases():
        for name in IMPLS:
            runs[f"{case.label}|{name}"] = case.impls[name]
        runs[f"{case.label}|fused body + restore"] = _fused_body(case)
    count_loops(args, runs)


def report(dumps: list[str], args: argparse.Namespace) -> None:
    counts = instructions_per_call(dumps, args.calls)
    aten, specops_op = counts["empty aten op"], counts["empty specops op"]
    print(f"floors: empty aten op {aten:.0f} instructions a call, empty specops op (wrapper + dispatcher + checks) "
          f"{specops_op:.0f} ({specops_op / aten:.2f} empty aten ops)")
    labels = sorted({key.split("|")[0] for key in counts if "|" in key}, key=lambda label: int(label.split()[0][2:]))
    for label in labels:
        fused, unfused = counts[f"{label}|specops"], counts[f"{label}|native-unfused"]
        restore, body = counts[f"{label}|restore"], counts[f"{label}|fused body + restore"]
        print(f"{label}: fused {fused:.0f}, native-unfused {unfused:.0f}, restore {restore:.0f}, fused without its "
              f"wrapper {body - restore:.0f} instructions a call; fused/native-unfused {fused / unfused:.3f} "
              f"(goal <= 0.7), without the restore both run {(fused - restore) / (unfused - restore):.3f}")


def main(argv: list[str] | None = None) -> int:
    return counted_main(__file__, argv, parse_args, measure, report)


if __name__ == "__main__":
    sys.exit(main())
