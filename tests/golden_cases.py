"""The golden vectors of the DSA metadata family's AI-CPU kernels (produced by the kernels' own
code), read from the shared folder beside the repository (sas_checker.golden_dir), and the
argument each kernel message is about. A missing file is one failing case naming where it
looked."""

from __future__ import annotations

import json
import re

import pytest
from sas_checker import golden_dir

UNTOUCHED = 0x0BADF00D


def golden_cases(file_name: str) -> list:
    directory, looked = golden_dir()
    path = directory / file_name if directory is not None else None
    if path is None or not path.is_file():
        where = ", ".join(looked)
        return [pytest.param(None, f"{file_name} not found; looked in: {where}", id="golden-file-missing")]
    cases = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [pytest.param(case, str(path), id=f"{i}-{case['label']}") for i, case in enumerate(cases)]


def argument_of(kernel_message: str, table: list[tuple[str, str]]) -> str:
    for pattern, argument in table:
        if re.search(pattern, kernel_message):
            return argument
    raise AssertionError(f"no argument known for the kernel's message {kernel_message!r}")


def is_undefined(case: dict) -> bool:
    """A call the kernel leaves undefined (the harness refused to run it)."""
    return case.get("error", "").startswith("harness:")


def check_unwritten_words_are_zero(case: dict) -> None:
    written = set(case["written"])
    assert all(word == 0 for i, word in enumerate(case["words"]) if i not in written), "golden: unwritten word != 0"
