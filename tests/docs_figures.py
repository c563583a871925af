"""The figures the docs state, found where a test recomputes them (so no figure drifts from the code).

A test computes a figure with the code the figure is about (the launch counter, the compile
test's capture, ...) and asserts the page states exactly that: `assert_docs_say` looks for a
phrase with the page's line breaks folded, `docs_table_rows` reads the rows of a Markdown table.
A table the code gives whole (the kernels' resource rows) is rewritten from it on request:
`SPECOPS_UPDATE_DOCS=1` (`rewrite_table_rows`), so a new op's row is generated, not typed.
"""

from __future__ import annotations

import os
from pathlib import Path

# Set: the tests that compare a generated table with the page rewrite the page instead.
UPDATE_DOCS = os.environ.get("SPECOPS_UPDATE_DOCS", "0") == "1"

DOCS = Path(__file__).resolve().parents[1] / "docs"


def docs_text(page: str) -> str:
    return (DOCS / page).read_text()


def assert_docs_say(page: str, phrase: str) -> None:
    """docs/<page> contains `phrase` (white space folded, so a phrase may wrap across lines)."""
    folded = " ".join(docs_text(page).split())
    assert " ".join(phrase.split()) in folded, f"docs/{page} must say {phrase!r}: the figure the code gives now"


def docs_table_rows(page: str, first_cell_prefix: str) -> dict[str, list[str]]:
    """The rows of docs/<page>'s tables whose first cell starts with `first_cell_prefix`, keyed by
    that cell, as lists of the other cells (stripped)."""
    rows = {}
    for line in docs_text(page).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith(first_cell_prefix):
            rows[cells[0]] = cells[1:]
    return rows


def rewrite_table_rows(page: str, first_cell_prefix: str, rows: dict[str, list[str]]) -> None:
    """Replaces the rows of docs/<page> whose first cell starts with `first_cell_prefix` (one
    contiguous block of one table) by `rows`, in the order given."""
    lines = docs_text(page).splitlines(keepends=True)
    matching = [index for index, line in enumerate(lines)
                if line.startswith("|") and line.strip().strip("|").split("|")[0].strip().startswith(first_cell_prefix)]
    assert matching and matching == list(range(matching[0], matching[-1] + 1)), \
        f"docs/{page}: the rows starting {first_cell_prefix!r} must be one block of one table"
    block = [f"| {key} | {' | '.join(cells)} |\n" for key, cells in rows.items()]
    lines[matching[0]:matching[-1] + 1] = block
    (DOCS / page).write_text("".join(lines))
