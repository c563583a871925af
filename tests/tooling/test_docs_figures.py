"""The docs' signatures are the code's: every `specops.NAME(...)` written out in a ```text block
of README.md or docs/*.md lists the parameters inspect.signature gives, in order, with the
keyword-only marker and the defaults (a signature is written once, on its area page; the other
pages link to it). The figures the docs state are checked where they are computed: launch
counts in test_launch_count.py, kernel builds and resources in test_kernel_compile.py.
"""

from __future__ import annotations

import inspect
import re

import pytest
from docs_figures import DOCS

import specops

PAGES = [DOCS.parent / "README.md", *sorted(DOCS.glob("*.md"))]
TEXT_BLOCK = re.compile(r"```text\n(.*?)```", re.S)
ENTRY = re.compile(r"^(?:[\w, ]+ = )?specops\.([A-Za-z_][\w.]*)\(", re.M)


def _split_top_level(params: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in params:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [" ".join(part.split()) for part in parts if part.strip()]


def _written_signatures() -> list[tuple[str, str, list[str]]]:
    """(page, name, parameters as written) of every signature in a text block."""
    found = []
    for page in PAGES:
        for block in TEXT_BLOCK.findall(page.read_text()):
            for match in ENTRY.finditer(block):
                depth, end = 0, match.end() - 1
                for end in range(match.end() - 1, len(block)):
                    depth += {"(": 1, ")": -1}.get(block[end], 0)
                    if depth == 0:
                        break
                params = re.sub(r"#[^\n]*", "", block[match.end():end])  # a comment on a parameter's line
                found.append((page.name, match.group(1), _split_top_level(params)))
    return found


def _parameters(obj) -> list[str]:
    parts, marked = [], False
    for parameter in inspect.signature(obj).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not marked:
            parts.append("*")
            marked = True
        if parameter.kind is parameter.VAR_POSITIONAL:
            marked = True
        value = parameter.default
        default = "" if value is parameter.empty else f'="{value}"' if isinstance(value, str) else f"={value!r}"
        parts.append(f"{parameter.name}{default}")
    return parts


SIGNATURES = _written_signatures()


def test_the_docs_write_signatures():
    assert len(SIGNATURES) >= 10, SIGNATURES


@pytest.mark.parametrize("page,name,written", SIGNATURES, ids=[f"{p}-{n}" for p, n, _ in SIGNATURES])
def test_a_written_signature_is_the_code_s(page, name, written):
    obj = specops
    for part in name.split("."):
        obj = getattr(obj, part)
    assert written == _parameters(obj), f"docs/{page}: specops.{name}"


def test_each_signature_is_written_once():
    pages: dict[str, list[str]] = {}
    for page, name, _ in SIGNATURES:
        pages.setdefault(name, []).append(page)
    again = {name: where for name, where in pages.items() if len(where) > 1}
    assert not again, f"signatures written on more than one page (keep the area page's, link to it): {again}"
