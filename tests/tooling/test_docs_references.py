"""Every doc page named in the code or the docs exists: a `docs/NAME.md` anywhere in the
sources, tests, tools, examples or docs, and a relative link `](NAME.md)` inside docs/. A section
cited beside its page (`docs/NAME.md, "Section"`) is one the page has: a heading or a paragraph
that opens with those words. And nothing cites a document the repository does not hold: the
product brief's contract and notes (SPEC 3.7.5, PEERS.md, a bare section sign) are cited as the
docs page and section that state the same thing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ("README.md", "CMakeLists.txt", "Makefile", "pyproject.toml", "csrc", "python", "triton_kernels", "tests",
            "tools", "examples", "docs", ".ci")
SUFFIXES = {".py", ".h", ".cpp", ".md", ".txt", ".toml", ".in", ""}
PAGE = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)\b")
LINK = re.compile(r"\]\(([A-Za-z0-9_-]+\.md)(?:#[^)]*)?\)")
# A docs page and the section cited beside it; the quoted words may wrap onto a comment's next line.
SECTION = re.compile(r'\bdocs/([A-Za-z0-9_-]+\.md)(?:,?[ \t]+|,[ \t]*\n\s*(?:#|//|\*)?[ \t]*)"([^"]+)"')
WRAP = re.compile(r"\s*\n\s*(?:#|//|\*)?\s*")
# The documents beside the repository that the code once cited: by file name, by name and section
# number (SPEC 3.7.5, SPEC's 1.1), the contract by its bare name, and a section sign with a number.
OUTSIDE_DOCS = r"(?:SPEC|PEERS|ASCEND|STYLE|METADATA_FAMILY|HELPERS)"
OUTSIDE_CITATION = re.compile(rf"\b{OUTSIDE_DOCS}\.md\b|\b{OUTSIDE_DOCS}(?:'s)?(?:\s+|\s*§\s*)\d+(?:\.\d+)*\b"
                              r"|\bSPEC\b|§\s*\d")


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


def cited_sections(text: str) -> list[tuple[str, str]]:
    """(page, section) of every `docs/PAGE.md, "Section"` in text, a wrapped section joined."""
    return [(page, WRAP.sub(" ", section).strip()) for page, section in SECTION.findall(text)]


def section_openings(page: Path) -> list[str]:
    """Each heading and each paragraph or list item of page, its lines joined, markup stripped
    from its start (#, -, 1., **)."""
    openings, current = [], []
    for line in page.read_text().splitlines() + [""]:
        stripped = line.strip()
        starts = not stripped or stripped.startswith(("#", "- ", "* ", "|", "```")) or re.match(r"\d+\. ", stripped)
        if starts and current:
            openings.append(" ".join(current))
            current = []
        if stripped:
            current.append(stripped)
        if stripped.startswith("#"):
            openings.append(stripped)
            current = []
    return [re.sub(r"^(?:#+\s*|[-*]\s+|\d+\.\s+)", "", opening).replace("**", "") for opening in openings]


def has_section(page: Path, section: str) -> bool:
    return any(opening.startswith(section) for opening in section_openings(page))


def test_every_section_cited_beside_its_page_exists():
    missing = []
    for path in searched_files():
        for page, section in cited_sections(path.read_text(errors="replace")):
            if (ROOT / "docs" / page).is_file() and not has_section(ROOT / "docs" / page, section):
                missing.append(f'{path.relative_to(ROOT)} cites docs/{page}, "{section}", which the page does not open')
    assert not missing, "\n".join(missing)


def outside_citations(text: str) -> list[str]:
    return [match.group(0) for match in OUTSIDE_CITATION.finditer(text)]


def test_nothing_cites_a_document_the_repository_does_not_hold():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}" for path in searched_files()
             for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if outside_citations(line)]
    assert not found, ("cite the docs page and section that state it (docs/PAGE.md, \"Section\"):\n"
                       + "\n".join(found))


def test_the_citation_finders_find_what_they_are_about(tmp_path):
    assert outside_citations("SPEC 3.7.5's formulas give 0; (SPEC 1.1); SPEC's example; see PEERS.md; "
                             "ASCEND 2.1; per § 4 and §3.2") == [
        "SPEC 3.7.5", "SPEC 1.1", "SPEC", "PEERS.md", "ASCEND 2.1", "§ 4", "§3"]
    assert outside_citations("TORCH_SPEC ?= torch; $(PEERS)/wheels; VLLM_SPEC; ASCEND950; a spec-decode step") == []
    text = ('rule (docs/hardening.md, "Sizes an op\n    # allocates from") and docs/sas_metadata.md "Core counts and '
            'SoC"; (docs/drafting.md,\n  # "Compressed groups"); # docs/pcp.md\n    "PCPLayout",')
    assert cited_sections(text) == [("hardening.md", "Sizes an op allocates from"),
                                    ("sas_metadata.md", "Core counts and SoC"), ("drafting.md", "Compressed groups")]
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## On a device: host lengths\n\n**Batches and lengths.** B is\nthe count.\n\n"
                    "Scalar types (`a test`): an int\nis taken.\n\n- Optional outputs of\n  an op\n")
    assert all(has_section(page, section) for section in ("On a device", "Batches and lengths", "Scalar types",
                                                          "Optional outputs of an op", "Title"))
    assert not any(has_section(page, section) for section in ("Not yet patched", "B is the count", "an int"))
