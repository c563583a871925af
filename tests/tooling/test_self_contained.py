"""The repository stands on its own: no test, tool, example, build file or doc reads or points at a
path outside it, and the golden vectors load from inside it. A fresh clone with nothing beside it
runs the whole suite (.ci/run proves that case by running it from such a clone)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import sas_checker
from golden_cases import golden_cases

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_FILES = ("sas_metadata.jsonl", "kv_quant_sas_metadata.jsonl", "lightning_indexer_metadata.jsonl",
                "store_kv_block_metadata.jsonl")
# Text that only a reference to a folder beside the repository would contain.
OUTSIDE = re.compile(r"\.\./shared\b|\bshared/(golden\b|[A-Z][A-Z_]*\b)"
                     r"|SPECOPS_GOLDEN_DIR|/work/")
# Walking up past the repository root: iterating a path's parents, or parents[k] with k past the root.
PARENTS_WALK = re.compile(r"\.parents\b(?!\[)")
PARENTS_INDEX = re.compile(r"\.parents\[(\d+)\]")


def tracked_files() -> list[Path]:
    listing = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listing.returncode != 0:  # an unpacked source tree without git: walk it instead
        return [p for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts and "build" not in p.parts]
    return [ROOT / name for name in listing.stdout.splitlines()]


def text_files() -> list[Path]:
    kept = []
    for path in tracked_files():
        if path.suffix in {".jsonl", ".png", ".whl"} or not path.is_file():
            continue
        try:
            path.read_text()
        except UnicodeDecodeError:
            continue
        kept.append(path)
    return kept


def test_no_file_points_outside_the_repository():
    hits = []
    for path in text_files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "references outside the repository:\n" + "\n".join(hits)


def test_no_python_file_walks_above_the_repository_root():
    hits = []
    for path in text_files():
        if path.suffix != ".py" or path == Path(__file__).resolve():
            continue
        depth = len(path.relative_to(ROOT).parts) - 1  # Path(__file__).parents[depth] is ROOT
        for number, line in enumerate(path.read_text().splitlines(), 1):
            from_file = "__file__" in line
            too_far = from_file and any(int(k) > depth for k in PARENTS_INDEX.findall(line))
            if too_far or (PARENTS_WALK.search(line) and not line.lstrip().startswith("#")):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not hits, "paths above the repository root:\n" + "\n".join(hits)


def test_the_golden_folder_is_inside_the_repository():
    directory, looked = sas_checker.golden_dir()
    assert directory is not None, f"golden folder missing; looked in {looked}"
    assert directory.resolve().is_relative_to(ROOT)
    assert looked == [str(directory)], "the loader looks only inside the repository"


@pytest.mark.parametrize("file_name", GOLDEN_FILES)
def test_every_golden_file_loads_from_the_repository(file_name):
    cases = golden_cases(file_name)
    assert len(cases) > 10 and all(case.values[0] is not None for case in cases), cases[:1]
    assert all(Path(case.values[1]).resolve().is_relative_to(ROOT) for case in cases)


def test_a_missing_golden_folder_fails_naming_where_it_looked(monkeypatch, tmp_path):
    # Hidden, the folder is not looked for anywhere else: the loader's one case fails by name.
    monkeypatch.setattr(sas_checker, "GOLDEN_DIR", tmp_path / "absent")
    monkeypatch.setattr("golden_cases.golden_dir", sas_checker.golden_dir)
    (case,) = golden_cases("sas_metadata.jsonl")
    assert case.values[0] is None and str(tmp_path / "absent") in case.values[1]
