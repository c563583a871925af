"""The benchmark CLI: quick mode end to end (the table, the summary after it, the summary
figure), the CSV's columns, and --compare. The figures' content: test_bench_figures.py."""

from __future__ import annotations

import contextlib
import csv
import io

import pytest

from specops.bench import BENCHMARKS
from specops.bench.__main__ import device_problem, main
from specops.bench._report import CSV_COLUMNS


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    csv_path, plot_path = folder / "run.csv", folder / "run.png"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(["--quick", "--samples", "2", "--csv", str(csv_path), "--plot", str(plot_path),
                     "--runner-counts", str(folder / "no-counts.csv")]) == 0
    return csv_path, plot_path, printed.getvalue()


def test_quick_mode_prints_the_summary_after_the_table_and_draws_the_summary_figure(quick_run):
    _, plot_path, output = quick_run
    table, summary = output.split("\nsummary: ", 1)
    assert " specops " in table and "x faster than" in table
    assert "the 5 largest:" in summary and "the 5 smallest:" in summary and "slower than a baseline" in summary
    assert f"summary figure: {plot_path}" in summary and "runner figure: skipped (no " in summary
    assert plot_path.stat().st_size > 0


def test_quick_mode_writes_a_row_per_measurement_with_the_documented_columns(quick_run):
    csv_path, _, _ = quick_run
    with open(csv_path, newline="") as handle:
        reader = csv.DictReader(handle)
        assert reader.fieldnames == CSV_COLUMNS
        rows = list(reader)
    assert {row["op"] for row in rows} == set(BENCHMARKS)
    for row in rows:
        assert float(row["median_us"]) > 0
        assert float(row["p20_us"]) <= float(row["median_us"]) <= float(row["p80_us"])
        assert row["torch"] and row["timestamp"] and row["machine"]
    assert any(row["impl"] == "specops" for row in rows)
    # Every row names its case's subject, and the subject is one of the case's rows.
    for (op, case), subjects in _by_case(rows, "subject").items():
        assert len(subjects) == 1 and subjects <= _by_case(rows, "impl")[(op, case)], (op, case)


def _by_case(rows, column) -> dict[tuple[str, str], set[str]]:
    found: dict[tuple[str, str], set[str]] = {}
    for row in rows:
        found.setdefault((row["op"], row["case"]), set()).add(row[column])
    return found


def _rewrite_medians(source, target, factor, impl="specops"):
    with open(source, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        if row["impl"] == impl:
            for column in ("median_us", "p20_us", "p80_us"):
                row[column] = str(float(row[column]) * factor)
    with open(target, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def test_compare_flags_a_2x_regression(quick_run, tmp_path, capsys):
    csv_path, _, _ = quick_run
    slower = tmp_path / "slower.csv"
    _rewrite_medians(csv_path, slower, 2.0)
    assert main(["--compare", str(csv_path), str(slower)]) == 1
    output = capsys.readouterr().out
    assert "REGRESSION" in output
    regressed = [line for line in output.splitlines() if "REGRESSION" in line]
    assert regressed and all(" specops " in line for line in regressed)


def test_compare_passes_an_unchanged_run(quick_run, capsys):
    csv_path, _, _ = quick_run
    assert main(["--compare", str(csv_path), str(csv_path)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out


def test_compare_judges_specops_rows_only(quick_run, tmp_path, capsys):
    csv_path, _, _ = quick_run
    slower_baselines = tmp_path / "slower-baselines.csv"
    _rewrite_medians(csv_path, slower_baselines, 3.0, impl="numpy")
    assert main(["--compare", str(csv_path), str(slower_baselines)]) == 0
    output = capsys.readouterr().out
    numpy_lines = [line for line in output.splitlines() if " numpy " in line]
    assert numpy_lines and all("(baseline, not judged)" in line for line in numpy_lines)
    assert "0 regression(s)" in output
    # The drafting subject is not called "specops"; its rows are specops' code all the same.
    slower_step = tmp_path / "slower-step.csv"
    _rewrite_medians(csv_path, slower_step, 2.0, impl="step shared")
    assert main(["--compare", str(csv_path), str(slower_step)]) == 1
    assert "1 regression(s)" in capsys.readouterr().out


def test_rows_carry_their_role_and_launch_counts(quick_run):
    csv_path, _, _ = quick_run
    with open(csv_path, newline="") as handle:
        rows = {(row["op"], row["case"], row["impl"]): row for row in csv.DictReader(handle)}
    fused = [row for (op, case, impl), row in rows.items()
             if op == "prepare_spec_decode_inputs" and impl == "specops" and not case.startswith("MRV2")]
    # The fused step: one specops op, and the copy that restores the counts between timed calls.
    assert fused and all((row["specops_launches"], row["aten_launches"]) == ("1", "1") for row in fused)
    # Model runner V2's target step (with its joined parts or without): one specops op, no counts
    # to restore.
    target = [row for (op, case, impl), row in rows.items()
              if op == "prepare_spec_decode_inputs" and impl == "specops" and case.startswith("MRV2")]
    assert target and all((row["specops_launches"], row["aten_launches"]) == ("1", "0") for row in target)
    for (op, case, impl), row in rows.items():
        if op == "prepare_spec_decode_inputs" and impl == "native-unfused":
            groups = int(case.split("G=")[1].split()[0])
            width = int(case.split("W=")[1].split()[0])
            # The correction (or the gather), the positions, one slot mapping per group; the whole
            # target step adds the input ids and, under DCP, the DCP-local seq_lens.
            joined = (1 + (width > 1)) if case.startswith("MRV2 whole target") else 0
            assert int(row["specops_launches"]) == 2 + groups + joined and row["role"] == "baseline", (case, row)
        if impl == "numpy":
            assert (row["specops_launches"], row["aten_launches"], row["role"]) == ("0", "0", "baseline")
        if impl in ("restore", "empty-op") or impl.startswith("write floor"):
            assert row["role"] == "floor"


@pytest.mark.parametrize("device", ["cuda", "npu", "cuda:7", "tpu"])
def test_a_missing_device_is_one_line_and_a_failure(device, capsys):
    problem = device_problem(device)
    if problem is None:
        pytest.skip(f"this machine has a {device} device")
    assert main(["--device", device, "--quick", "--csv", "", "--plot", ""]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"specops-bench: --device {device}: {problem}\n"
    assert "\n" not in problem and "Traceback" not in problem


def test_markdown_rewrites_the_rows_of_the_ops_it_ran_and_keeps_the_others(tmp_path):
    from specops.bench._report import TABLE_BEGIN, TABLE_END, TABLE_HEAD, update_markdown

    page = tmp_path / "benchmarks.md"
    old = ["| sas_metadata | 256 decodes | 4.89 | x | 2026-01-01 | a | abc |",
           "| drafting | G=2 | 200.00 | y | 2026-01-01 | a | abc |"]
    page.write_text("# Benchmarks\n\n" + TABLE_BEGIN + "\n" + "\n".join(TABLE_HEAD + old) + "\n" + TABLE_END
                    + "\n\nAfter the table.\n")
    new = "| drafting | G=2 | 150.00 | z | 2026-02-02 | b | def |"
    update_markdown(str(page), {"drafting": [new]})
    text = page.read_text()
    assert text.startswith("# Benchmarks\n\n" + TABLE_BEGIN) and text.endswith(TABLE_END + "\n\nAfter the table.\n")
    assert old[0] in text and new in text and old[1] not in text
    with pytest.raises(ValueError, match="has no generated table"):
        (tmp_path / "other.md").write_text("no table\n")
        update_markdown(str(tmp_path / "other.md"), {"drafting": [new]})


def test_a_baseline_specops_does_not_beat_is_said_as_a_time_ratio():
    from specops.bench._harness import Case, Measurement
    from specops.bench._report import case_notes

    case = Case("op", "R=8", 8, 8, {}, baselines=("fast", "slow"))
    runs = [Measurement("op", "R=8", "", impl, 8, 8, median, median, median)
            for impl, median in (("specops", 3.0), ("fast", 2.0), ("slow", 6.0))]
    assert case_notes(case, runs) == ["1.50x the time of fast", "   2.0x faster than slow"]
