"""`specops-bench` / `python -m specops.bench`: the main job (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import torch

from specops.bench import BENCHMARKS
from specops.bench._harness import run_case
from specops.bench._report import (
    compare,
    format_case,
    markdown_row,
    measurement_rows,
    read_csv,
    run_stamp,
    table_header,
    update_markdown,
    write_csv,
)
from specops.bench._summary import speedups, summary_lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specops-bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny shapes and few samples (for tests and smoke runs)")
    parser.add_argument("--op", action="append", choices=sorted(BENCHMARKS), help="benchmark only this op (repeatable)")
    parser.add_argument("--device", default="cpu", help="device of the tensors: cpu (C++ path), cuda, npu")
    parser.add_argument("--csv", default="bench-results/specops-bench.csv", help="where to write one row per measurement")
    parser.add_argument("--plot", default="bench-results/specops-bench.png",
                        help="where to draw the summary figure: specops' speedup over each baseline, per op "
                             "(needs matplotlib; '' for none)")
    parser.add_argument("--plot-detail", metavar="DIR",
                        help="also draw one figure per op into DIR: median time against the batch's size")
    parser.add_argument("--runner-counts", default="bench-results/vllm-proof.csv",
                        help="the vLLM proof's counts (make test-vllm-integration writes them); when the file "
                             "exists, the runner figure is drawn from it")
    parser.add_argument("--plot-runner", default="bench-results/specops-runner.png",
                        help="where to draw the runner figure: launches a step, the runner alone and with specops")
    parser.add_argument("--replot", metavar="CSV",
                        help="measure nothing: print the summary of CSV (a run's --csv) and draw its figures")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads on the CPU (default 1)")
    parser.add_argument("--samples", type=int, default=None, help="timed samples per implementation")
    parser.add_argument("--markdown", metavar="PAGE",
                        help="rewrite the generated table of PAGE (docs/benchmarks.md) with this run's rows, "
                             "stamped with date, host and commit")
    parser.add_argument("--compare", nargs=2, metavar=("OLD_CSV", "NEW_CSV"), help="print the change per row and exit")
    parser.add_argument("--threshold", type=float, default=1.5, help="new/old ratio that --compare flags")
    return parser.parse_args(argv)


def device_problem(name: str) -> str | None:
    """Why the benchmark cannot run on `name` here (one line), or None when it can."""
    if name.split(":")[0] == "npu":
        try:
            import torch_npu  # noqa: F401  (registers the npu device with torch)
        except ImportError:
            return "torch_npu is not installed, so there is no NPU device here"
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        return f"not a device torch knows ({str(exc).splitlines()[0]})"
    if device.type == "cpu":
        return None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA support"
            return f"no CUDA device is available (torch {torch.__version__}, built with {build})"
    elif device.type == "npu":
        if not torch.npu.is_available():
            return "no NPU device is available (torch_npu is installed but sees no device)"
    else:
        return f"specops-bench runs on cpu, cuda or npu, not {device.type}"
    index = device.index or 0
    count = torch.cuda.device_count() if device.type == "cuda" else torch.npu.device_count()
    if index >= count:
        return f"there is no {device.type}:{index} ({count} device(s))"
    if importlib.util.find_spec("triton") is None:
        return "the device path runs the Triton kernels, and Triton is not installed (triton, or triton-ascend on NPU)"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare:
        lines, regressions = compare(*args.compare, threshold=args.threshold)
        print("\n".join(lines))
        print(f"{regressions} regression(s) at new/old >= {args.threshold}")
        return 1 if regressions else 0
    if args.replot:
        rows = read_csv(args.replot)
        print("\n".join(summary_lines(speedups(rows))))
        draw_figures(args, rows, source=args.replot)
        return 0
    problem = device_problem(args.device)
    if problem is not None:
        print(f"specops-bench: --device {args.device}: {problem}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cpu":
        # Metadata is built on the runner's host thread, and specops' C++ is single-threaded;
        # one intra-op thread also keeps the torch-eager baselines from waiting on pool wake-ups.
        torch.set_num_threads(args.threads)
    samples = args.samples or (5 if args.quick else 15)
    sample_seconds = 0.002 if args.quick else 0.01
    selected = args.op or list(BENCHMARKS)
    measurements = []
    markdown: dict[str, list[str]] = {}
    stamp = run_stamp(os.path.dirname(os.path.abspath(args.markdown))) if args.markdown else None
    started = time.perf_counter()
    print(table_header())
    for name in selected:
        cases = BENCHMARKS[name].cases(device, args.quick)
        for index, case in enumerate(cases, 1):
            print(f"[{name} {index}/{len(cases)}] {case.label}", file=sys.stderr, flush=True)
            result = run_case(case, samples=samples, sample_seconds=sample_seconds, device=device)
            measurements += result
            print("\n".join(format_case(case, result)), flush=True)
            if stamp is not None:
                markdown.setdefault(name, []).append(markdown_row(case, result, stamp))
    print(f"{len(measurements)} measurements in {time.perf_counter() - started:.1f} s")
    rows = measurement_rows(measurements)
    print("\n".join(summary_lines(speedups(rows))))

    if args.csv:
        os.makedirs(os.path.dirname(args.csv) or ".", exist_ok=True)
        write_csv(args.csv, rows)
        print(f"CSV: {args.csv}")
    if args.markdown:
        update_markdown(args.markdown, markdown)
        print(f"markdown: {args.markdown}")
    draw_figures(args, rows, source=args.csv or "")
    return 0


def draw_figures(args: argparse.Namespace, rows: list[dict], source: str) -> None:
    """The summary figure, the runner figure (when the proof's counts are at hand) and, when
    asked, the detail figures; one line each."""
    if not (args.plot or args.plot_detail):
        return
    from specops.bench import _figures

    if _figures.pyplot() is None:
        print("figures: skipped (matplotlib is not installed: pip install 'specops[bench]')")
        return
    if args.plot:
        drawn = _figures.draw(_figures.summary_figure(rows), args.plot, source)
        print(f"summary figure: {args.plot}" if drawn else "summary figure: skipped (no case ran a baseline)")
    if args.plot and args.plot_runner and args.runner_counts:
        if os.path.exists(args.runner_counts):
            from specops.bench._runner_counts import read_runner_counts

            figure = _figures.runner_figure(read_runner_counts(args.runner_counts))
            if _figures.draw(figure, args.plot_runner, args.runner_counts):
                print(f"runner figure: {args.plot_runner} (from {args.runner_counts})")
        else:
            print(f"runner figure: skipped (no {args.runner_counts}; make test-vllm-integration writes it)")
    if args.plot_detail:
        written = _figures.detail_figures(args.plot_detail, rows)
        print(f"detail figures: {len(written)} in {args.plot_detail}")


if __name__ == "__main__":
    sys.exit(main())
