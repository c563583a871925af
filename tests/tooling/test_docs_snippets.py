"""Every code block of README.md and docs/*.md runs, so the documentation cannot drift.

Per file, the blocks run in order in one namespace, as a reader pastes them:
- ```python blocks are executed; those written as a session (lines starting with `>>> `) run as
  doctests, so an expected output under a line is compared (NORMALIZE_WHITESPACE).
- ```python no-run blocks are Python that needs what this machine lacks (a GPU, an NPU, several
  processes); they are compiled, so their syntax is still checked.
- ```bash, ```text and ```cpp blocks are not run.
A block without a language is an error: every block says what it is.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import specops

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = {"bash", "text", "cpp"}
FENCE = re.compile(r"^```(.*)$")


def blocks(path: Path) -> list[tuple[int, str, str]]:
    """(line, info string, code) of every fenced block."""
    found, lines = [], path.read_text().splitlines()
    start = info = None
    for number, line in enumerate(lines, 1):
        match = FENCE.match(line)
        if not match:
            continue
        if start is None:
            start, info = number, match.group(1).strip()
        else:
            found.append((start, info, "\n".join(lines[start : number - 1]) + "\n"))
            start = None
    assert start is None, f"{path.name}:{start}: a code block is never closed"
    return found


def _run(path: Path) -> dict[str, int]:
    namespace: dict = {"__name__": f"snippets of {path.name}"}
    counts = {"executed": 0, "doctest": 0, "no-run": 0, "not run": 0}
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for line, info, code in blocks(path):
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{line}"
        if info in NOT_RUN:
            counts["not run"] += 1
        elif info == "python no-run":
            compile(code, where, "exec")
            counts["no-run"] += 1
        elif info == "python" and any(text.startswith(">>> ") for text in code.splitlines()):
            test = doctest.DocTestParser().get_doctest(code, namespace, where, str(path), line)
            result = runner.run(test, clear_globs=False)
            namespace.update(test.globs)  # a DocTest runs in a copy of the namespace
            assert result.failed == 0, f"{where}: the session's output differs (see the report above)"
            counts["doctest"] += 1
        elif info == "python":
            exec(compile(code, where, "exec"), namespace)  # noqa: S102  (our own documentation)
            counts["executed"] += 1
        else:
            pytest.fail(f"{where}: a code block must say what it is (python, python no-run, "
                        f"{', '.join(sorted(NOT_RUN))}), got {info!r}")
    return counts


@pytest.mark.parametrize("path", FILES, ids=[path.name for path in FILES])
def test_every_block_runs(path: Path):
    with specops.backend("native"):
        counts = _run(path)
    print(path.name, counts)


def test_the_readme_shows_runnable_code():
    counts = _run(ROOT / "README.md")
    assert counts["executed"] + counts["doctest"] >= 2


def test_an_unmarked_or_failing_block_is_caught(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("```\nprint(1)\n```\n")
    with pytest.raises(pytest.fail.Exception, match="must say what it is"):
        _run(page)
    page.write_text("```python\n>>> 1 + 1  # a comment on the line above the output is fine\n3\n```\n")
    with pytest.raises(AssertionError, match="output differs"):
        _run(page)
