"""No measured figure in the code's comments: a time or an instruction count goes stale with the
next change and no test recomputes it; figures live in the bench and docs/changelog.md. The
bench and the devtools, which compute and print figures, are left out."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [*(ROOT / "python" / "specops").rglob("*.py"), *(ROOT / "triton_kernels").rglob("*.py"),
           *(ROOT / "csrc").rglob("*.h"), *(ROOT / "csrc").rglob("*.cpp")]
EXEMPT = ("bench", "devtools")
NUMBER = r"\d(?:[\d,.]*\d)?"
FIGURE = re.compile(rf"{NUMBER}\s?(?:µs|ns|ms|instructions?|cycles)\b|{NUMBER}\s(?:of an )?empty ops?\b")


def figures(text: str) -> list[str]:
    return [match.group(0) for match in FIGURE.finditer(text)]


def test_the_pattern_finds_the_figures_the_rule_is_about():
    assert figures("# about 900 instructions a call, 1.8 µs less, 0.04 of an empty op per group") == [
        "900 instructions", "1.8 µs", "0.04 of an empty op"]
    assert figures("// ~50 instructions per request; 3,300 instructions") == ["50 instructions", "3,300 instructions"]
    assert figures("for start in range(0, ns, BLOCK): a 2-D tile, 4 ops") == []


def test_no_source_file_states_a_measured_figure():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in SOURCES if not set(EXEMPT) & set(path.relative_to(ROOT).parts)
             for number, line in enumerate(path.read_text().splitlines(), 1) if figures(line)]
    assert not found, "measured figures belong in the bench and docs/changelog.md:\n" + "\n".join(found)
