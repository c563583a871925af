"""The benchmark CLI: quick mode end to end, the CSV's columns, and --compare."""

from __future__ import annotations

import csv

import pytest

from specops.bench import BENCHMARKS
from specops.bench.__main__ import main
from specops.bench._report import CSV_COLUMNS


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    csv_path, plot_path = folder / "run.csv", folder / "run.png"
    assert main(["--quick", "--samples", "2", "--csv", str(csv_path), "--plot", str(plot_path)]) == 0
    return csv_path, plot_path


def test_quick_mode_writes_a_row_per_measurement_with_the_documented_columns(quick_run, capsys):
    csv_path, plot_path = quick_run
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
    assert plot_path.stat().st_size > 0


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
    csv_path, _ = quick_run
    slower = tmp_path / "slower.csv"
    _rewrite_medians(csv_path, slower, 2.0)
    assert main(["--compare", str(csv_path), str(slower)]) == 1
    output = capsys.readouterr().out
    assert "REGRESSION" in output
    regressed = [line for line in output.splitlines() if "REGRESSION" in line]
    assert regressed and all(" specops " in line for line in regressed)


def test_compare_passes_an_unchanged_run(quick_run, capsys):
    csv_path, _ = quick_run
    assert main(["--compare", str(csv_path), str(csv_path)]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
