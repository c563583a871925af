"""The figures the docs state, found where a test recomputes them (so no figure drifts from the code).

A test computes a figure with the code the figure is about (the launch counter, the compile
test's capture, ...) and asserts the page states exactly that: `assert_docs_say` looks for a
phrase with the page's line breaks folded, `docs_table_rows` reads the rows of a Markdown table.
"""

from __future__ import annotations

from pathlib import Path

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
