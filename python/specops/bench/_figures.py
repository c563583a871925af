"""The bench's figures (matplotlib, the `bench` extra), each drawn from the CSV's rows, so a
CSV redraws them (`specops-bench --replot CSV`):

- the summary: per op, specops' speedup over each baseline at a decode-sized and a
  prefill-sized case (_summary.py picks them), bars from 1x on a log axis, ops by family;
- the runner: launches a step with the runner alone and with specops, per runner, release and
  configuration, and the host syncs inside specops' adapters (_runner_counts.py);
- the details: one figure per op, median time against the batch's size per implementation.

Colours are fixed per baseline (BASELINES) and explained once per figure; legends sit outside
the axes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

import specops
from specops.bench._summary import FAMILIES, OTHER, SIZES, Speedup, family_of, speedups, summary_cases

# A colour per kind of baseline, and what it is; the names of one kind never meet in one case (a
# kind's colour says which baseline a bar is). lean-numpy shares a case with numpy: a shade of its own.
KINDS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "numpy": ("#1f77b4", ("numpy",), "a vectorized numpy version"),
    "lean-numpy": ("#74a9cf", ("lean-numpy",), "the leanest numpy formula"),
    "torch-eager": ("#ff7f0e", ("torch-eager",), "a composition of torch ops"),
    "reference": ("#fdbe85", ("reference",), "specops' pure-torch version"),
    "python": ("#2ca02c", ("python", "python-rows"), "a plain Python loop (the Ascend ops: their AI-CPU kernel)"),
    "unfused": ("#6a51a3", ("native-unfused", "single ops", "one call per group", "per-group-launches"),
                "specops' smaller ops, one launch each"),
    "per-pass": ("#8c6d31", ("per-pass",), "the draft loop pass by pass"),
    "step no-cache": ("#e7969c", ("step no-cache",), "every group built alone"),
}
BASELINES: dict[str, tuple[str, str]] = {name: (color, kind) for kind, (color, names, _) in KINDS.items()
                                         for name in names}
FALLBACK_COLORS = ["#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#8c564b", "#393b79"]
# specops' own implementations in the detail figures: dark, solid, filled.
SPECOPS_COLORS = ["#000000", "#b2182b", "#01665e", "#5e3c99", "#8c510a"]
FLOOR_COLORS = ["#9e9e9e", "#525252", "#c7c7c7"]
RUNNER_ALONE, WITH_SPECOPS = "#9e9e9e", "#b2182b"
SIZE_TITLES = {
    "decode": "decode-sized case\n(the op's largest batch of <= 256 requests, <= 8 tokens each)",
    "prefill": "prefill-sized case\n(the op's case with the most tokens)",
}


def baseline_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour per baseline: the fixed one, else the next fallback colour (in sorted order, so
    a name's colour does not depend on the run's order)."""
    names = list(names)
    unknown = sorted({name for name in names if name not in BASELINES})
    colors = {name: FALLBACK_COLORS[index % len(FALLBACK_COLORS)] for index, name in enumerate(unknown)}
    return {name: BASELINES[name][0] if name in BASELINES else colors[name] for name in names}


def kind_label(kind: str) -> str:
    _, names, what = KINDS[kind]
    return f"{' / '.join(names)}: {what}"


def code_stamp() -> str:
    """A digest of the code that draws the figures (this module and the summary's choices):
    written into every PNG, so a committed figure can be checked against the current code."""
    digest = hashlib.sha256()
    for module in ("_figures.py", "_summary.py", "_runner_counts.py"):
        digest.update((Path(__file__).parent / module).read_bytes())
    return digest.hexdigest()[:16]


def source_stamp(name: str, path) -> str:
    """What a figure was drawn from: the file's name as given and a digest of its bytes."""
    return f"{name} sha256:{hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]}"


def pyplot():
    """matplotlib's pyplot on the Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save(figure, path: str, source: str = "") -> None:
    """Writes the PNG with what made it: the figure code's stamp and, given `source` (the file the
    rows came from), that file's stamp."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight", pad_inches=0.15,
                   metadata={"Software": f"specops-bench {specops.__version__}", "specops-figure-code": code_stamp(),
                             "specops-figure-source": source_stamp(source, source) if source else ""})


def ratio_text(ratio: float) -> str:
    if ratio >= 9.95:
        return f"{ratio:.0f}x"
    return f"{ratio:.1f}x" if ratio >= 1 else f"{ratio:.2f}x"


def _times(value: float, _position=None) -> str:
    return f"{value:g}x"


def _facts(rows: list[Mapping[str, object]]) -> str:
    first = rows[0] if rows else {}
    parts = [str(first.get(key) or "") for key in ("machine", "timestamp")]
    torch_version = first.get("torch")
    return " · ".join(part for part in [*parts, f"torch {torch_version}" if torch_version else ""] if part)


def summary_layout(points: list[Speedup]) -> list[tuple[str, str, list[str], dict[str, dict[str, Speedup]]]]:
    """The summary's rows, top to bottom: (family, op, its baselines in bar order, size -> baseline
    -> Speedup). Families in FAMILIES' order; in a family the ops by their largest speedup, most
    first; an op's bars by speedup, most first (decode-sized, else prefill-sized)."""
    picks = summary_cases(points)
    shown: dict[str, dict[str, dict[str, Speedup]]] = {}
    for point in points:
        for size, case in picks.get(point.op, {}).items():
            if point.case == case:
                shown.setdefault(point.op, {}).setdefault(size, {})[point.baseline] = point

    def rank(op: str, baseline: str | None = None) -> float:
        for size in SIZES:
            found = shown[op].get(size, {})
            values = [p.ratio for name, p in found.items() if baseline is None or name == baseline]
            if values:
                return max(values)
        return 0.0

    layout = []
    for family in [*FAMILIES, OTHER]:
        ops = sorted((op for op in shown if family_of(op) == family), key=lambda op: -rank(op))
        for op in ops:
            names = list(dict.fromkeys(name for size in SIZES for name in shown[op].get(size, {})))
            names.sort(key=lambda name: -rank(op, name))
            layout.append((family, op, names, shown[op]))
    return layout


SUMMARY_WIDTH, SUMMARY_LEFT, SUMMARY_RIGHT = 13.5, 0.2, 0.99  # inches; the panels' span, fractions
ROW_INCHES = 0.17  # one bar's row
TEXT_INCHES = 0.4  # a bar's ratio label and its gap, at most ("2648x", "0.13x")


def _legend(colors: dict[str, str], names: Iterable[str]) -> list[tuple[str, str]]:
    """(colour, label) per kind of baseline among `names`, in KINDS' order, then the others."""
    present = set(names)
    entries = [(color, kind_label(kind)) for kind, (color, members, _) in KINDS.items() if present & set(members)]
    return entries + [(colors[name], name) for name in sorted(present - set(BASELINES))]


def summary_figure(rows: list[Mapping[str, object]]):
    """The summary figure (not saved), or None without matplotlib or without a speedup."""
    plt = pyplot()
    points = speedups(rows)
    if plt is None or not points:
        return None
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    layout = summary_layout(points)
    colors = baseline_colors([point.baseline for point in points])
    # y grows downwards: a family's heading row; per op, a row naming its case, one row per baseline,
    # a gap.
    y, ys, headings, centers, case_rows = 0.0, {}, [], [], {}
    for index, (family, op, names, _) in enumerate(layout):
        if index == 0 or layout[index - 1][0] != family:
            y += 0.8 if index else 0.0
            headings.append((y, family))
            y += 1.0
        case_rows[op] = y
        y += 0.85
        for name in names:
            ys[(op, name)] = y
            y += 1.0
        centers.append((y - (len(names) + 1) / 2, op))
        y += 0.4
    ratios = [point.ratio for point in points]
    panel = SUMMARY_WIDTH * (SUMMARY_RIGHT - SUMMARY_LEFT) / 2.04
    # The axis spans the ratios and, past the longest bar and before the shortest, its label.
    low = min(0.5, min(ratios) / 1.15)
    decades = max(math.log10(max(ratios) * 1.15 / low), 1.0)
    decades *= panel / (panel - 2 * TEXT_INCHES)
    low, high = low / 10 ** (decades * TEXT_INCHES / panel), low * 10 ** (decades * (panel - TEXT_INCHES) / panel)

    entries = _legend(colors, (name for _, _, names, _ in layout for name in names))
    legend_rows = -(-len(entries) // 2)
    top = 0.75 + legend_rows * 0.2 + 0.55  # inches: title and subtitle, the legend, the panels' titles
    bottom = 0.65
    height = y * ROW_INCHES + top + bottom
    figure, axes = plt.subplots(1, 2, sharey=True, figsize=(SUMMARY_WIDTH, height), gridspec_kw=dict(wspace=0.04))
    figure.subplots_adjust(left=SUMMARY_LEFT, right=SUMMARY_RIGHT, top=1 - top / height, bottom=bottom / height)
    for axis, size in zip(axes, SIZES):
        axis.set_xscale("log")
        axis.set_xlim(low, high)
        axis.set_ylim(y, -0.6)
        for (family, op, names, shown) in layout:
            found = shown.get(size, {})
            for name in names:
                point, row = found.get(name), ys[(op, name)]
                if point is None:
                    continue
                axis.barh(row, point.ratio - 1, left=1, height=0.8, color=colors[name], gid=f"{size}|{op}|{name}")
                outward = 1.1 if point.ratio >= 1 else 1 / 1.1
                axis.text(point.ratio * outward, row, ratio_text(point.ratio), va="center",
                          ha="left" if point.ratio >= 1 else "right", fontsize=7.5)
            case = next(iter(found.values())).case if found else f"no {size}-sized case"
            axis.text(1.1, case_rows[op] + 0.1, case, ha="left", va="center", fontsize=7, color="#555555",
                      style="normal" if found else "italic")
        for heading_y, _ in headings[1:]:
            axis.axhline(heading_y - 0.5, color="#bbbbbb", linewidth=0.8)
        axis.axvline(1, color="black", linewidth=1.2)
        axis.xaxis.set_major_locator(LogLocator(base=10))
        axis.xaxis.set_major_formatter(FuncFormatter(_times))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.grid(True, axis="x", which="major", alpha=0.3)
        axis.set_title(SIZE_TITLES[size], fontsize=9.5)
        axis.set_xlabel("speedup of specops (baseline median / specops median; 1x: as fast)", fontsize=8.5)
        axis.tick_params(axis="y", length=0)
    axes[0].set_yticks([middle for middle, _ in centers], [op for _, op in centers], fontsize=8.5)
    for heading_y, family in headings:
        axes[0].text(-0.01, heading_y, family, transform=axes[0].get_yaxis_transform(), ha="right",
                     va="center", fontsize=9.5, fontweight="bold")
    figure.legend(handles=[Patch(color=color, label=label) for color, label in entries], loc="upper center",
                  bbox_to_anchor=(0.5, 1 - 0.68 / height), ncol=2, fontsize=8, frameon=False, handlelength=1.2,
                  columnspacing=2.0, labelspacing=0.35)
    figure.suptitle("How much faster specops is than what a runner would otherwise run, per op", y=1 - 0.12 / height,
                    fontsize=12.5, fontweight="bold")
    figure.text(0.5, 1 - 0.45 / height, f"each bar: a baseline's median time over specops' in one case of one run "
                f"(right of 1x: specops faster)   ·   {_facts(rows)}", ha="center", fontsize=8.5, color="#333333")
    return figure


def runner_figure(runner_rows: list[Mapping[str, object]]):
    """Launches a step, the runner alone and with specops, per configuration, grouped by runner
    and release; host syncs beside each configuration. None without matplotlib or rows."""
    plt = pyplot()
    if plt is None or not runner_rows:
        return None
    from matplotlib.patches import Patch

    groups: dict[tuple[str, str], list[Mapping[str, object]]] = {}
    for row in runner_rows:
        groups.setdefault((str(row["runner"]), str(row["release"])), []).append(row)
    y, ticks, headings = 0.0, [], []
    placed = []
    for (runner, release), members in groups.items():
        headings.append((y, f"{runner} {release}"))
        y += 1.0
        for row in members:
            placed.append((y, row))
            ticks.append((y + 0.5, str(row["configuration"]), int(float(row["host_syncs"]))))
            y += 1.6
        y += 0.3
    height = y * 0.3 + 2.0
    figure, axis = plt.subplots(figsize=(9.5, height))
    figure.subplots_adjust(left=0.2, right=0.86, top=1 - 1.0 / height, bottom=1.0 / height)
    most = max(float(row["launches_before"]) for row in runner_rows)
    for row_y, row in placed:
        before, after = float(row["launches_before"]), float(row["launches_after"])
        key = f"{row['runner']}|{row['release']}|{row['configuration']}"
        axis.barh(row_y + 0.1, before, height=0.75, color=RUNNER_ALONE, align="edge", gid=f"before|{key}")
        axis.barh(row_y + 0.85, after, height=0.75, color=WITH_SPECOPS, align="edge", gid=f"after|{key}")
        axis.text(before + most * 0.01, row_y + 0.475, f"{before:.2f}", va="center", fontsize=8)
        change = f" ({(after - before) / before:+.0%})" if before else ""
        axis.text(after + most * 0.01, row_y + 1.225, f"{after:.2f}{change}", va="center", fontsize=8,
                  fontweight="bold")
    for heading_y, label in headings:
        axis.text(-0.01, heading_y + 0.45, label, transform=axis.get_yaxis_transform(), ha="right", va="center",
                  fontsize=10, fontweight="bold")
        if heading_y:
            axis.axhline(heading_y - 0.15, color="#bbbbbb", linewidth=0.8)
    axis.set_ylim(y, -0.2)
    axis.set_xlim(0, most * 1.25)
    axis.set_yticks([tick for tick, _, _ in ticks], [name for _, name, _ in ticks], fontsize=8.5)
    axis.tick_params(axis="y", length=0)
    axis.grid(True, axis="x", alpha=0.3)
    steps = sorted({int(float(row["steps"])) for row in runner_rows})
    axis.set_xlabel(f"kernel launches a step (Triton kernels + specops ops; mean over {'/'.join(map(str, steps))} "
                    f"steps)", fontsize=9)
    syncs = axis.twinx()
    syncs.set_ylim(axis.get_ylim())
    syncs.set_yticks([tick for tick, _, _ in ticks], [str(count) for _, _, count in ticks], fontsize=9)
    for label, (_, _, count) in zip(syncs.get_yticklabels(), ticks):
        label.set_color("#b2182b" if count else "#1a7f37")
    syncs.set_ylabel("host syncs in specops' adapters (all steps)", fontsize=8.5)
    syncs.tick_params(axis="y", length=0)
    figure.text(0.02, 0.08 / height, "configurations as the proofs name them (docs/integrations.md): kK = K drafts a "
                "step; dcpN / pcpN = decode / prefill context parallelism over N ranks, rankR = the rank measured;\n"
                "v1 = vLLM's V1 runner, else model runner V2; each configuration drives the runner twice, alone and "
                "with specops, on the same requests", fontsize=7.5, color="#444444", va="bottom")
    handles = [Patch(color=RUNNER_ALONE, label="the runner alone"), Patch(color=WITH_SPECOPS, label="with specops")]
    figure.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.53, 1 - 0.45 / height), ncol=2, fontsize=9,
                  frameon=False)
    figure.suptitle("Kernel launches a step: the runner alone and with specops' plugin", y=1 - 0.08 / height,
                    fontsize=12, fontweight="bold")
    return figure


def detail_figure(plt, op: str, points: list[Mapping[str, object]]):
    """One op's detail figure (not saved): median time against the batch's size, a series per
    implementation and case family."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogFormatter

    by_tokens = all(int(row["num_tokens"]) > 0 for row in points)

    def size(row) -> int:
        return int(row["num_tokens"]) if by_tokens else int(row["batch_size"])

    families = list(dict.fromkeys(str(row["family"]) for row in points))
    markers = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">"]
    impls = list(dict.fromkeys(str(row["impl"]) for row in points))
    roles = {str(row["impl"]): str(row.get("role") or "specops") for row in points}
    colors = baseline_colors(name for name in impls if roles[name] == "baseline")
    ours = [name for name in impls if roles[name] == "specops"]
    floors = [name for name in impls if roles[name] not in ("specops", "baseline")]
    figure, axis = plt.subplots(figsize=(8.5, 4.8))
    impl_handles, family_handles = [], []
    for impl in impls:
        role = roles[impl]
        if role == "specops":
            style = dict(color=SPECOPS_COLORS[ours.index(impl) % len(SPECOPS_COLORS)], linestyle="-", linewidth=2.2,
                         markersize=6, zorder=3)
        elif role == "baseline":
            style = dict(color=colors[impl], linestyle="--", linewidth=1.3, markersize=5, markerfacecolor="white",
                         zorder=2)
        else:
            style = dict(color=FLOOR_COLORS[floors.index(impl) % len(FLOOR_COLORS)], linestyle=":", linewidth=1.2,
                         markersize=4, markerfacecolor="white", zorder=1)
        for index, family in enumerate(families):
            series = sorted((size(row), float(row["median_us"])) for row in points
                            if row["impl"] == impl and row["family"] == family)
            if series:
                # A line joins three sizes or more; one or two points stand alone.
                axis.plot([x for x, _ in series], [us for _, us in series], marker=markers[index % len(markers)],
                          **dict(style, linestyle=style["linestyle"] if len(series) >= 3 else "none"))
        label = {"specops": f"{impl} (specops)", "baseline": impl}.get(role, f"{impl} (floor)")
        label = "specops" if impl == "specops" else label
        impl_handles.append(Line2D([], [], label=label, **style))
    for index, family in enumerate(families):
        family_handles.append(Line2D([], [], color="#555555", linestyle="none", marker=markers[index % len(markers)],
                                     label=family or "(one family)"))
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
    # Plain numbers; the minor ticks labelled only where the axis spans about a decade or less.
    axis.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    axis.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))
    axis.tick_params(axis="y", which="minor", labelsize=7)
    axis.set_title(f"{op}: median time per call (solid: specops; dashed: baselines; dotted: floors)", fontsize=10)
    axis.set_xlabel("tokens in the batch" if by_tokens else "requests in the batch")
    axis.set_ylabel("median µs per call")
    axis.grid(True, which="both", alpha=0.3)
    # Figure legends beside the axes: outside the data, and inside the saved image's bounds.
    figure.legend(handles=impl_handles, title="implementation", loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  bbox_transform=axis.transAxes, fontsize=8, title_fontsize=8.5, frameon=False)
    if len(families) > 1 or families[0]:
        figure.legend(handles=family_handles, title="case family", loc="lower left", bbox_to_anchor=(1.02, 0.0),
                      bbox_transform=axis.transAxes, fontsize=8, title_fontsize=8.5, frameon=False)
    return figure


def detail_figures(directory: str, rows: list[Mapping[str, object]]) -> list[str]:
    """One PNG per op in `directory` (DIR/OP.png); returns their paths (none without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return []
    written = []
    ops = list(dict.fromkeys(str(row["op"]) for row in rows))
    for op in ops:
        points = [row for row in rows if row["op"] == op and str(row.get("plotted", True)) != "False"]
        if not points:
            continue
        figure = detail_figure(plt, op, points)
        path = str(Path(directory) / f"{op}.png")
        save(figure, path)
        plt.close(figure)
        written.append(path)
    return written


def draw(figure, path: str, source: str = "") -> bool:
    """Saves and closes `figure`; False when there is none."""
    if figure is None:
        return False
    save(figure, path, source)
    pyplot().close(figure)
    return True

