"""Tests load the repository's scripts through tests/repo_modules.py only: one loaded any other
way mid-session changes Hypothesis' later draws in its worker (the module says why)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import repo_modules

TESTS = Path(__file__).resolve().parents[1]
LOADERS = re.compile(r"spec_from_file_location|runpy\.|SourceFileLoader|sys\.path\.(insert|append)")


def test_every_script_of_the_door_exists():
    missing = [script for script in repo_modules.SCRIPTS if not (repo_modules.ROOT / script).is_file()]
    assert not missing, missing


def test_no_test_loads_a_script_past_the_door():
    # tests/ascend loads its own helpers from its folder, which is under tests/ (not a local
    # module to Hypothesis); everything else goes through repo_modules.
    found = [f"{path.relative_to(TESTS)}:{number}"
             for path in TESTS.rglob("*.py") if path.name not in ("repo_modules.py", Path(__file__).name)
             and path.parent.name != "ascend"
             for number, line in enumerate(path.read_text().splitlines(), 1) if LOADERS.search(line)]
    assert not found, f"load these through tests/repo_modules.py: {found}"


def test_the_door_refuses_a_script_it_does_not_preload():
    # Every script of tools/ and examples/ is in SCRIPTS, so the refused one is a name of no file:
    # the door refuses by the list, before it looks for the file.
    with pytest.raises(ValueError, match="SCRIPTS"):
        repo_modules.load("tools/not_preloaded.py")
    assert "tools_not_preloaded" not in sys.modules
