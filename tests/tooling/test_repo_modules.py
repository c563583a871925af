"""Tests load the repository's scripts through tests/repo_modules.py only, which keeps them out of
the pool of constants Hypothesis draws from (the module says why)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import repo_modules
from hypothesis.internal.conjecture import providers
from hypothesis.internal.constants_ast import constants_from_module

TESTS = Path(__file__).resolve().parents[1]
LOADERS = re.compile(r"spec_from_file_location|runpy\.|SourceFileLoader|sys\.path\.(insert|append)")


def test_no_test_loads_a_script_past_the_door():
    # tests/ascend loads its own helpers from its folder, which is under tests/ (not a local
    # module to Hypothesis); everything else goes through repo_modules.
    found = [f"{path.relative_to(TESTS)}:{number}"
             for path in TESTS.rglob("*.py") if path.name not in ("repo_modules.py", Path(__file__).name)
             and path.parent.name != "ascend"
             for number, line in enumerate(path.read_text().splitlines(), 1) if LOADERS.search(line)]
    assert not found, f"load these through tests/repo_modules.py: {found}"


def _pool() -> dict[str, set]:
    # Hypothesis' pool: the constants of the local modules in sys.modules (a pinned version, so its
    # private accessors are stable here). Where specops itself is imported from outside
    # site-packages (make test-asan's PYTHONPATH), the pool already holds the package's constants.
    constants = providers._get_local_constants()
    return {kind: set(getattr(constants, kind)) for kind in ("integers", "floats", "strings")}


def test_a_loaded_script_leaves_sys_modules_and_the_draws_alone():
    before_modules = set(sys.modules)
    before = _pool()
    module = repo_modules.load("examples/runner_step.py")
    assert callable(module.main)
    assert not [name for name in set(sys.modules) - before_modules if name.startswith(("examples_", "tools_"))]
    assert _pool() == before
    # The script has constants of its own that the pool lacks: in sys.modules it would change the draws.
    own = constants_from_module(module)
    assert any(set(getattr(own, kind)) - before[kind] for kind in before)


def test_a_module_of_the_same_name_is_put_back():
    placeholder = type(sys)("tools_device_carry")
    sys.modules["tools_device_carry"] = placeholder
    try:
        module = repo_modules.load("tools/device_carry.py")
        assert module is not placeholder and sys.modules["tools_device_carry"] is placeholder
    finally:
        del sys.modules["tools_device_carry"]


@pytest.mark.parametrize("script", ["tools/no_such_script.py", "README.md", "tools"])
def test_the_door_refuses_what_is_not_a_python_file(script):
    with pytest.raises(ValueError, match="script must name a Python file"):
        repo_modules.load(script)
