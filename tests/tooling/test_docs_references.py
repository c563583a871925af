"""Every doc page named in the code or the docs exists: a `docs/NAME.md` anywhere in the
sources, tests, tools, examples or docs, and a relative link `](NAME.md)` inside docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ("README.md", "CMakeLists.txt", "Makefile", "pyproject.toml", "csrc", "python", "triton_kernels", "tests",
            "tools", "examples", "docs", ".ci")
SUFFIXES = {".py", ".h", ".cpp", ".md", ".txt", ".toml", ".in", ""}
PAGE = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)\b")
LINK = re.compile(r"\]\(([A-Za-z0-9_-]+\.md)(?:#[^)]*)?\)")


def searched_files() -> list[Path]:
    files = []
    for name in SEARCHED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in SUFFIXES
                      and "__pycache__" not in p.parts]
    return [path for path in files if path != Path(__file__).resolve()]  # this file names made-up pages


def named_pages(path: Path) -> set[str]:
    text = path.read_text(errors="replace")
    pages = set(PAGE.findall(text))
    if path.parent == ROOT / "docs":
        pages |= set(LINK.findall(text))
    return pages


def test_every_doc_page_named_exists():
    missing = [f"{path.relative_to(ROOT)} names docs/{page}" for path in searched_files()
               for page in sorted(named_pages(path)) if not (ROOT / "docs" / page).is_file()]
    assert not missing, "\n".join(missing)


def test_the_reference_finder_finds_names_and_links(tmp_path):
    source = tmp_path / "op.py"
    source.write_text('"""See docs/slot_mapping.md and (docs/no_such_page.md)."""\n')
    assert named_pages(source) == {"slot_mapping.md", "no_such_page.md"}
    assert LINK.findall("[the family](dsa_metadata_family.md#store) and [x](https://e.org/a.md)") == [
        "dsa_metadata_family.md"]
