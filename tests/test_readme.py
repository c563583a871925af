"""The README's Python examples run, in order, in one namespace, as a reader would paste them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_examples():
    assert len(python_blocks()) >= 2


def test_readme_examples_run():
    namespace: dict = {}
    for index, block in enumerate(python_blocks()):
        code = compile(block, f"README.md python block {index}", "exec")
        exec(code, namespace)  # noqa: S102  (our own documentation)
