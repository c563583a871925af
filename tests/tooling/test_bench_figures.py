"""The bench's figures and its summary, drawn from a small CSV written here (not from a run): one
bar per op, baseline and size with the ratio the CSV implies, the cases chosen, nothing of the
legends or labels over the data (judged from matplotlib's layout after drawing), the detail
figures' styles, the runner figure from the proof's counts file, and the README's figure made by
the current code."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

from specops.bench.__main__ import main
from specops.bench._report import CSV_COLUMNS, read_csv
from specops.bench._runner_counts import RUNNER_COLUMNS, read_runner_counts, record_runner_counts
from specops.bench._summary import FAMILIES, OTHER, family_of, speedups, summary_cases, summary_lines

pytest.importorskip("matplotlib")
from matplotlib.legend import Legend  # noqa: E402

from specops.bench import BENCHMARKS, _figures  # noqa: E402

plt = _figures.pyplot()  # on the Agg backend, as the bench draws

ROOT = Path(__file__).resolve().parents[2]


def _row(op, case, family, impl, batch, tokens, median, role="baseline", subject="specops"):
    return dict(op=op, case=case, family=family, impl=impl, batch_size=batch, num_tokens=tokens, median_us=median,
                p20_us=median * 0.9, p80_us=median * 1.1, role=role, subject=subject, plotted=True,
                specops_launches=1, aten_launches=0, machine="x86_64 fixture", python="3", torch="2", triton="3",
                specops="0", timestamp="2026-01-01T00:00:00+00:00")


def _fixture_rows() -> list[dict]:
    # A case as large as the prefill-sized one, listed first, of another family (other baselines):
    # not the one shown beside the decode-sized case of family W=1.
    rows = [_row("compute_slot_mapping", "R=1024 q=8 CP goal", "CP goal", "specops", 1024, 8192, 30.0, "specops"),
            _row("compute_slot_mapping", "R=1024 q=8 CP goal", "CP goal", "lean-numpy", 1024, 8192, 300.0)]
    # Three sizes: a decode, the decode-sized case (the largest batch of <= 256 requests of <= 8
    # tokens) and the prefill-sized one (the most tokens); a floor, which gives no bar.
    for label, batch, tokens, ours, numpy, eager in (("R=8 q=1", 8, 8, 3.0, 60.0, 240.0),
                                                     ("R=256 q=4", 256, 1024, 8.0, 112.0, 330.0),
                                                     ("R=1024 q=8", 1024, 8192, 36.0, 400.0, 770.0)):
        rows += [_row("compute_slot_mapping", label, "W=1", "specops", batch, tokens, ours, "specops"),
                 _row("compute_slot_mapping", label, "W=1", "numpy", batch, tokens, numpy),
                 _row("compute_slot_mapping", label, "W=1", "torch-eager", batch, tokens, eager),
                 _row("compute_slot_mapping", label, "W=1", "empty-op", batch, tokens, 5.0, "floor")]
    # Decode-sized cases only, and one slower than a baseline (R=8: 1.5x the time of single ops).
    for label, batch, ours, single, eager in (("R=8 G=2", 8, 3.0, 2.0, 90.0), ("R=256 G=3", 256, 10.0, 10.5, 200.0)):
        rows += [_row("gather_block_tables_multi", label, "G", "specops", batch, batch, ours, "specops"),
                 _row("gather_block_tables_multi", label, "G", "single ops", batch, batch, single),
                 _row("gather_block_tables_multi", label, "G", "torch-eager", batch, batch, eager)]
    # A subject not called specops, beside another specops row that is not the subject.
    for label, batch, tokens, shared, alone in (("G=2 R=64", 64, 256, 100.0, 180.0),
                                                ("G=2 R=32 prefill", 32, 4096, 400.0, 500.0)):
        rows += [_row("drafting", label, "G=2", "step shared", batch, tokens, shared, "specops", "step shared"),
                 _row("drafting", label, "G=2", "step g0", batch, tokens, shared * 0.6, "specops", "step shared"),
                 _row("drafting", label, "G=2", "step no-cache", batch, tokens, alone, "baseline", "step shared")]
    # An op no family names, with a baseline no colour names.
    rows += [_row("new_op", "R=4", "", "specops", 4, 4, 1.0, "specops"),
             _row("new_op", "R=4", "", "my-baseline", 4, 4, 3.0)]
    return rows


# (size, op, baseline) -> the ratio the rows imply: the baseline's median over the subject's.
EXPECTED = {
    ("decode", "compute_slot_mapping", "numpy"): 112 / 8, ("decode", "compute_slot_mapping", "torch-eager"): 330 / 8,
    ("prefill", "compute_slot_mapping", "numpy"): 400 / 36,
    ("prefill", "compute_slot_mapping", "torch-eager"): 770 / 36,
    ("decode", "gather_block_tables_multi", "single ops"): 10.5 / 10,
    ("decode", "gather_block_tables_multi", "torch-eager"): 200 / 10,
    ("decode", "drafting", "step no-cache"): 1.8, ("prefill", "drafting", "step no-cache"): 1.25,
    ("decode", "new_op", "my-baseline"): 3.0,
}


@pytest.fixture(scope="module")
def fixture_csv(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("figures") / "run.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(_fixture_rows())
    return path


@pytest.fixture(scope="module")
def summary(fixture_csv):
    figure = _figures.summary_figure(read_csv(str(fixture_csv)))
    figure.canvas.draw()
    yield figure
    plt.close(figure)


def _bars(figure) -> dict[tuple[str, str, str], object]:
    return {tuple(patch.get_gid().split("|")): patch for axis in figure.axes for patch in axis.patches
            if patch.get_gid()}


def test_the_summary_has_one_bar_per_op_baseline_and_size_with_the_ratio_the_csv_implies(summary):
    bars = _bars(summary)
    assert bars.keys() == EXPECTED.keys()
    for key, ratio in EXPECTED.items():
        bar = bars[key]
        # A bar runs from 1x to the ratio on the log axis, and its label says the ratio.
        assert min(bar.get_x(), bar.get_x() + bar.get_width()) == pytest.approx(min(1.0, ratio))
        assert max(bar.get_x(), bar.get_x() + bar.get_width()) == pytest.approx(max(1.0, ratio))
        axis = bar.axes
        y = bar.get_y() + bar.get_height() / 2
        labels = [text.get_text() for text in axis.texts if text.get_position()[1] == pytest.approx(y)]
        assert _figures.ratio_text(ratio) in labels, (key, labels)
    # One colour per baseline across the figure, the fixed ones where the name has one.
    colours = {}
    for (_, _, baseline), bar in bars.items():
        colours.setdefault(baseline, set()).add(bar.get_facecolor())
    assert all(len(found) == 1 for found in colours.values())
    assert len({next(iter(found)) for found in colours.values()}) == len(colours)
    import matplotlib.colors

    assert next(iter(colours["numpy"])) == matplotlib.colors.to_rgba(_figures.BASELINES["numpy"][0])


def test_the_summary_marks_1x_and_explains_each_colour_once(summary):
    for axis in summary.axes:
        assert axis.get_xscale() == "log"
        assert any(list(line.get_xdata()) == [1, 1] for line in axis.lines), "no line at 1x"
        assert any(label.get_text() == "1x" for label in axis.get_xticklabels())
    (legend,) = summary.legends
    labels = [text.get_text() for text in legend.get_texts()]
    kinds = ("numpy", "torch-eager", "unfused", "step no-cache")
    assert labels == [_figures.kind_label(kind) for kind in kinds] + ["my-baseline"]
    # Ops by family, in FAMILIES' order, the unnamed op last; each op's name once.
    ticks = [label.get_text() for label in summary.axes[0].get_yticklabels()]
    assert ticks == ["compute_slot_mapping", "gather_block_tables_multi", "drafting", "new_op"]
    headings = [text.get_text() for text in summary.axes[0].texts if text.get_text() in [*FAMILIES, OTHER]]
    assert headings == ["slot mapping and step accounting", "persistent buffers", "drafting layer", OTHER]
    # An op without a case of a size says so where its bars would be.
    left, right = ([text.get_text() for text in axis.texts] for axis in summary.axes)
    assert right.count("no prefill-sized case") == 2 and "R=1024 q=8" in right and "R=256 q=4" in left


def _boxes_apart(figure, outer, inner) -> list[str]:
    renderer = figure.canvas.get_renderer()
    clashes = []
    for first, second in itertools.product(outer, inner):
        if first.get_window_extent(renderer).overlaps(second.get_window_extent(renderer)):
            clashes.append(f"{first} over {second}")
    return clashes


def test_no_legend_or_label_of_the_summary_sits_on_the_data(summary):
    assert not _boxes_apart(summary, summary.legends, summary.axes)
    for axis in summary.axes:
        bars = [patch for patch in axis.patches if patch.get_gid()]
        texts = [text for text in axis.texts if text.get_text()]
        # No label over a bar, nor over another label.
        assert not _boxes_apart(summary, texts, bars)
        renderer = summary.canvas.get_renderer()
        for first, second in itertools.combinations(texts, 2):
            assert not first.get_window_extent(renderer).overlaps(second.get_window_extent(renderer)), (
                first.get_text(), second.get_text())


def test_the_summary_picks_a_decode_and_a_prefill_sized_case_per_op(fixture_csv):
    picks = summary_cases(speedups(read_csv(str(fixture_csv))))
    assert picks == {"compute_slot_mapping": {"decode": "R=256 q=4", "prefill": "R=1024 q=8"},
                     "gather_block_tables_multi": {"decode": "R=256 G=3"},
                     "drafting": {"decode": "G=2 R=64", "prefill": "G=2 R=32 prefill"},
                     "new_op": {"decode": "R=4"}}


def test_every_benchmark_has_a_family():
    assert [op for op in BENCHMARKS if family_of(op) == OTHER] == []


def test_the_terminal_summary_names_the_extremes_and_every_slower_case(fixture_csv):
    lines = summary_lines(speedups(read_csv(str(fixture_csv))), count=2)
    text = "\n".join(lines)
    assert lines[0].startswith("summary: 14 speedups of specops over a baseline, 4 ops")
    largest = lines[lines.index("  the 2 largest:") + 1:lines.index("  the 2 smallest:")]
    assert ["80.00x" in largest[0] and "[R=8 q=1]" in largest[0], "41.25x" in largest[1]] == [True, True]
    smallest = lines[lines.index("  the 2 smallest:") + 1:][:2]
    assert "0.67x" in smallest[0] and "1.50x the time of single ops" in smallest[0] and "1.05x" in smallest[1]
    slower = lines[lines.index("  slower than a baseline (1):") + 1:]
    assert len(slower) == 1 and "gather_block_tables_multi [R=8 G=2]" in slower[0]
    assert "step shared: 1.8x faster than step no-cache" in "\n".join(summary_lines(speedups(read_csv(
        str(fixture_csv))), count=10))
    assert "slower than a baseline: none" in "\n".join(summary_lines(
        [point for point in speedups(read_csv(str(fixture_csv))) if point.ratio >= 1]))
    assert "empty-op" not in text


def test_detail_figures_one_per_op_legends_outside_lines_from_three_sizes(fixture_csv, tmp_path):
    rows = read_csv(str(fixture_csv))
    written = _figures.detail_figures(str(tmp_path), rows)
    assert sorted(Path(path).name for path in written) == sorted(f"{op}.png" for op in
                                                                 {row["op"] for row in rows})
    figures = {op: _figures.detail_figure(plt, op, [row for row in rows if row["op"] == op])
               for op in ("compute_slot_mapping", "drafting")}
    try:
        for op, figure in figures.items():
            figure.canvas.draw()
            (axis,) = figure.axes
            legends = figure.findobj(Legend)
            assert legends and not _boxes_apart(figure, legends, [axis])
            for line in axis.lines:
                points = len(line.get_xdata())
                assert (line.get_linestyle() != "None") == (points >= 3), (op, line.get_label(), points)
        lines = {line.get_color(): line for line in figures["compute_slot_mapping"].axes[0].lines}
        specops_line = lines[_figures.SPECOPS_COLORS[0]]
        numpy_line = lines[_figures.BASELINES["numpy"][0]]
        # specops solid, thicker and filled; a baseline dashed, thinner, hollow.
        assert specops_line.get_linestyle() == "-" and numpy_line.get_linestyle() == "--"
        assert specops_line.get_linewidth() > numpy_line.get_linewidth()
        assert numpy_line.get_markerfacecolor() == "white" != specops_line.get_markerfacecolor()
    finally:
        for figure in figures.values():
            plt.close(figure)


def test_runner_counts_replace_their_own_row_and_draw_one_pair_per_configuration(tmp_path):
    path = str(tmp_path / "counts.csv")
    base = dict(runner="vLLM", release="0.33.0", steps=30, tensor_ops_before=80, tensor_ops_after=70, host_syncs=0)
    record_runner_counts(path, dict(base, configuration="k3_dcp1", launches_before=15.23, launches_after=9.77))
    record_runner_counts(path, dict(base, configuration="k1_dcp1", launches_before=10.0, launches_after=7.0))
    record_runner_counts(path, dict(base, release="0.34.0", configuration="k3_dcp1", launches_before=15.5,
                                    launches_after=9.5))
    record_runner_counts(path, dict(base, configuration="k3_dcp1", launches_before=15.0, launches_after=9.0))
    rows = read_runner_counts(path)
    assert [(row["release"], row["configuration"], row["launches_after"]) for row in rows] == [
        ("0.33.0", "k3_dcp1", "9.0"), ("0.33.0", "k1_dcp1", "7.0"), ("0.34.0", "k3_dcp1", "9.5")]
    with pytest.raises(ValueError, match="columns"):
        record_runner_counts(path, dict(base, configuration="x"))
    figure = _figures.runner_figure(rows)
    try:
        figure.canvas.draw()
        (axis, syncs) = figure.axes
        widths = {patch.get_gid(): patch.get_width() for patch in axis.patches if patch.get_gid()}
        assert widths == {"before|vLLM|0.33.0|k3_dcp1": 15.0, "after|vLLM|0.33.0|k3_dcp1": 9.0,
                          "before|vLLM|0.33.0|k1_dcp1": 10.0, "after|vLLM|0.33.0|k1_dcp1": 7.0,
                          "before|vLLM|0.34.0|k3_dcp1": 15.5, "after|vLLM|0.34.0|k3_dcp1": 9.5}
        assert [label.get_text() for label in axis.get_yticklabels()] == ["k3_dcp1", "k1_dcp1", "k3_dcp1"]
        assert [label.get_text() for label in syncs.get_yticklabels()] == ["0", "0", "0"]
        assert {text.get_text() for text in axis.texts} >= {"vLLM 0.33.0", "vLLM 0.34.0", "9.00 (-40%)"}
        assert not _boxes_apart(figure, figure.legends, [axis])
    finally:
        plt.close(figure)
    assert RUNNER_COLUMNS[:3] == ["runner", "release", "configuration"]


def test_replot_prints_the_summary_and_draws_every_figure(fixture_csv, tmp_path, capsys):
    counts = tmp_path / "counts.csv"
    record_runner_counts(str(counts), dict(runner="vLLM", release="0.33.0", configuration="k1_dcp1", steps=5,
                                           launches_before=3, launches_after=2, tensor_ops_before=1,
                                           tensor_ops_after=1, host_syncs=0))
    summary_png, runner_png, details = tmp_path / "s.png", tmp_path / "r.png", tmp_path / "detail"
    assert main(["--replot", str(fixture_csv), "--plot", str(summary_png), "--plot-detail", str(details),
                 "--runner-counts", str(counts), "--plot-runner", str(runner_png)]) == 0
    output = capsys.readouterr().out
    assert output.startswith("summary: 14 speedups") and "slower than a baseline (1):" in output
    assert summary_png.stat().st_size and runner_png.stat().st_size and len(list(details.iterdir())) == 4
    assert main(["--replot", str(fixture_csv), "--plot", str(summary_png), "--runner-counts",
                 str(tmp_path / "absent.csv")]) == 0
    assert "runner figure: skipped (no " in capsys.readouterr().out


def _png_text(path: Path) -> dict[str, str]:
    from PIL import Image

    with Image.open(path) as image:
        return dict(image.text)


@pytest.mark.parametrize("figure,source", [("specops-bench.png", "specops-bench.csv"),
                                           ("specops-runner.png", "vllm-proof.csv")])
def test_the_readme_shows_the_figures_drawn_by_this_code_from_the_files_beside_them(figure, source):
    """The README's figures carry the stamp of the code that drew them and of the file they were
    drawn from (docs/img/); after a change to the figures' code, redraw them as
    docs/benchmarks.md says (`specops-bench --replot ...`)."""
    assert f"](docs/img/{figure})" in (ROOT / "README.md").read_text()
    text = _png_text(ROOT / "docs" / "img" / figure)
    assert text["specops-figure-code"] == _figures.code_stamp(), f"docs/img/{figure} predates the figures' code"
    assert text["specops-figure-source"] == _figures.source_stamp(f"docs/img/{source}", ROOT / "docs" / "img" / source)
