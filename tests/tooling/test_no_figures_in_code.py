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
# A figure in words: a fraction (a third, two fifths, half) or a count (one, twice) of a cost.
COUNT = r"(?:one|two|three|four|five|six|seven|eight|nine|ten|twice|half)"
WORD_NUMBER = rf"(?:a|an|{COUNT})"
FRACTION = r"(?:half|halves|thirds?|quarters?|fifths?|sixths?|sevenths?|eighths?|ninths?|tenths?)"
COST = r"(?:ops?|calls?|cost|boxing|time|launch(?:es)?|overhead)"
FIGURE = re.compile(
    rf"{NUMBER}\s?(?:µs|us|ns|ms|(?:micro|nano|milli)seconds?|instructions?|cycles)\b"
    rf"|(?:{NUMBER}|\b{COUNT})\s(?:of\s)?(?:an?\s)?(?:empty|small)\sops?\b"
    rf"|\b{WORD_NUMBER}\s+{FRACTION}\s+of\s+(?:[\w']+\s+){{0,3}}?{COST}\b"
    rf"|\bhalf\s+(?:of\s+)?(?:an?|the|its)\s+(?:[\w']+\s+){{0,3}}?{COST}\b")


def figures(text: str) -> list[str]:
    return [match.group(0) for match in FIGURE.finditer(text)]


def test_the_pattern_finds_the_figures_the_rule_is_about():
    assert figures("# about 900 instructions a call, 1.8 µs less, 0.04 of an empty op per group") == [
        "900 instructions", "1.8 µs", "0.04 of an empty op"]
    assert figures("// ~50 instructions per request; 3,300 instructions") == ["50 instructions", "3,300 instructions"]
    assert figures("for start in range(0, ns, BLOCK): a 2-D tile, 4 ops") == []
    # In words: fractions and counts of a cost, and the microsecond spelled "us".
    assert figures("# a size() call per group costs a fifth of an empty op; a copy per launch would cost a third "
                   "of an empty op") == ["a fifth of an empty op", "a third of an empty op"]
    assert figures("// call (a sixth of sas_metadata's boxing); at a third of a small op's cost") == [
        "a sixth of sas_metadata's boxing", "a third of a small op"]
    assert figures("// 1.3 of 1.9 us on the build machine; two fifths of the call; half an empty op; twice a small op") == [
        "1.9 us", "two fifths of the call", "half an empty op", "twice a small op"]
    assert figures("# cos and sin: the two halves of the cache's row; twice the width for core pairs; half its "
                   "last block; one of the ops; cost more than a small op's body; as a small op") == []


def test_no_source_file_states_a_measured_figure():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in SOURCES if not set(EXEMPT) & set(path.relative_to(ROOT).parts)
             for number, line in enumerate(path.read_text().splitlines(), 1) if figures(line)]
    assert not found, "measured figures belong in the bench and docs/changelog.md:\n" + "\n".join(found)
