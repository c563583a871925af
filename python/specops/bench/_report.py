"""The benchmark's outputs: the table, the CSV and the comparison of two CSVs (the figures:
_figures.py, the summary after the table: _summary.py)."""

from __future__ import annotations

import csv
import dataclasses
import datetime
import importlib.metadata
import platform
import subprocess
from collections.abc import Iterable

import torch

import specops
from specops.bench._harness import Case, Measurement

CSV_COLUMNS = [
    "op", "case", "family", "impl", "batch_size", "num_tokens", "median_us", "p20_us", "p80_us",
    "role", "subject", "plotted", "specops_launches", "aten_launches", "machine", "python", "torch", "triton",
    "specops", "timestamp",
]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return ""


def environment_facts() -> dict[str, str]:
    return {
        "machine": f"{platform.machine()} {platform.processor() or platform.node()}".strip(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton") or _version("triton-ascend"),
        "specops": specops.__version__,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def case_notes(case: Case, measurements: list[Measurement]) -> list[str]:
    """The subject's ratios: its speedups over the baselines, its time over the floors, extras."""
    by_impl = {m.impl: m for m in measurements}
    subject = by_impl[case.subject]
    notes = []
    for name in case.baselines:
        if name in by_impl:
            speedup = by_impl[name].median_us / subject.median_us
            # A baseline specops does not beat is said as a time ratio: "0.7x faster" misreads.
            notes.append(f"{speedup:6.1f}x faster than {name}" if speedup >= 1 else
                         f"{1 / speedup:.2f}x the time of {name}")
    for name in case.floors:
        if name in by_impl:
            notes.append(f"{subject.median_us / by_impl[name].median_us:.2f}x the time of {name}")
    return notes + [f"{key} {value:.3f}" for key, value in case.extras.items()]


def format_case(case: Case, measurements: list[Measurement]) -> list[str]:
    lines = []
    for m in measurements:
        notes = case_notes(case, measurements) if m.impl == case.subject else []
        lines.append(
            f"  {m.op:<28} {m.label:<24} {m.impl:<18} {m.median_us:10.2f} {m.p20_us:10.2f} {m.p80_us:10.2f} "
            f"{m.specops_launches:>4}+{m.aten_launches:<4} " + "; ".join(notes)
        )
    return lines


# The generated table of docs/benchmarks.md lies between these two lines; `specops-bench
# --markdown docs/benchmarks.md` rewrites the rows of the ops it ran, each row stamped with its
# run's date, host and commit, and keeps the others.
TABLE_BEGIN = "<!-- specops-bench --markdown: generated rows below, one per case -->"
TABLE_END = "<!-- specops-bench --markdown: end of the generated rows -->"
TABLE_HEAD = ["| op | case | specops median µs | ratios | date | host | commit |",
              "| --- | --- | --- | --- | --- | --- | --- |"]


def run_stamp(checkout: str) -> tuple[str, str, str]:
    """(date, host, commit) of this run: the UTC date, the host's name, the checkout's commit
    (or the installed version when `checkout` is not in a git work tree)."""
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    try:
        commit = subprocess.run(["git", "-C", checkout, "rev-parse", "--short", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = f"specops {specops.__version__}"
    return date, platform.node() or "?", commit


def markdown_row(case: Case, measurements: list[Measurement], stamp: tuple[str, str, str]) -> str:
    """One case's row: the subject's median and its ratios (format_case's notes)."""
    subject = next(m for m in measurements if m.impl == case.subject)
    ratios = "; ".join(" ".join(note.split()) for note in case_notes(case, measurements))
    cells = [subject.op, subject.label, f"{subject.median_us:.2f}", ratios.replace("|", "/"), *stamp]
    return "| " + " | ".join(cells) + " |"


def update_markdown(path: str, rows: dict[str, list[str]]) -> None:
    """Rewrites the generated table in `path`: the rows of every op in `rows` replaced by those,
    the other ops' rows kept, ops in the order of their first appearance."""
    with open(path) as handle:
        text = handle.read()
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise ValueError(f"{path} has no generated table (the lines {TABLE_BEGIN!r} and {TABLE_END!r})")
    head, rest = text.split(TABLE_BEGIN, 1)
    body, tail = rest.split(TABLE_END, 1)
    kept: dict[str, list[str]] = {}
    for line in body.strip().splitlines():
        if line.startswith("| ") and line not in TABLE_HEAD:
            kept.setdefault(line.split("|")[1].strip(), []).append(line)
    for op, op_rows in rows.items():
        kept[op] = op_rows
    table = TABLE_HEAD + [row for op_rows in kept.values() for row in op_rows]
    with open(path, "w") as handle:
        handle.write(head + TABLE_BEGIN + "\n" + "\n".join(table) + "\n" + TABLE_END + tail)


def table_header() -> str:
    return (f"  {'op':<28} {'case':<24} {'impl':<18} {'median µs':>10} {'p20 µs':>10} {'p80 µs':>10} "
            f"{'ops s+a':>9} ratios")


def measurement_rows(measurements: Iterable[Measurement]) -> list[dict[str, object]]:
    """The CSV's rows of a run (values not yet text): what the figures and the summary read,
    from a run or from a CSV alike."""
    facts = environment_facts()
    rows = []
    for m in measurements:
        row = dataclasses.asdict(m)
        row["case"] = row.pop("label")
        row.update(facts)
        rows.append({key: row[key] for key in CSV_COLUMNS})
    return rows


def write_csv(path: str, rows: Iterable[dict[str, object]]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _judged(row: dict[str, str]) -> bool:
    """Whether a row measures specops' own code. CSVs written before the role column existed
    say nothing about their rows; there only the default subject, "specops", is judged."""
    role = row.get("role")
    return role == "specops" if role else row["impl"] == "specops"


def compare(old_path: str, new_path: str, threshold: float = 1.5) -> tuple[list[str], int]:
    """Per-row change of the median from OLD to NEW; returns the lines and the regression count.

    Only specops rows are judged: a baseline (numpy, torch eager) or a floor that got slower or
    faster says something about the machine, not about specops, so it is shown, never counted."""
    old = {(r["op"], r["case"], r["impl"]): float(r["median_us"]) for r in read_csv(old_path)}
    lines = [f"  {'op':<28} {'case':<24} {'impl':<18} {'old µs':>10} {'new µs':>10} {'new/old':>8}"]
    regressions = 0
    for row in read_csv(new_path):
        key = (row["op"], row["case"], row["impl"])
        if key not in old:
            continue
        new_us = float(row["median_us"])
        ratio = new_us / old[key] if old[key] > 0 else float("inf")
        flag = ""
        if not _judged(row):
            flag = f"  ({row.get('role') or 'reference'}, not judged)"
        elif ratio >= threshold:
            flag = "  REGRESSION"
            regressions += 1
        elif ratio <= 1 / threshold:
            flag = "  faster"
        lines.append(f"  {key[0]:<28} {key[1]:<24} {key[2]:<18} {old[key]:10.2f} {new_us:10.2f} {ratio:8.2f}{flag}")
    return lines, regressions
