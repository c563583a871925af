"""The repository's own scripts (examples/, tools/) loaded as modules by the tests, through one door.

Hypothesis draws a few percent of its values from the constants of the "local" modules loaded so
far: files outside site-packages and outside tests/, which here means these scripts. One loaded
mid-session by a test would change every later draw of its worker, so `make test`'s derandomized
examples, and the figures derived from them (docs/device_readiness.md's build count), would
depend on the order xdist ran the tests in. conftest.py loads every script here before the
first test, so the pool of constants is the same from the first draw on, on every machine."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]

# Every script a test loads into its own process (test_repo_modules checks that none is loaded
# another way).
SCRIPTS = ("examples/async_cp_loop.py", "examples/pcp_draft_step.py", "examples/runner_step.py",
           "tools/device_carry.py", "tools/device_check.py", "tools/instructions.py", "tools/specops_build.py")


def load(script: str) -> ModuleType:
    """A fresh module of `script` (a path relative to the repository root, one of SCRIPTS),
    registered in sys.modules under its own name: dataclasses look their module up there."""
    if script not in SCRIPTS:
        raise ValueError(f"{script} is not in tests/repo_modules.py's SCRIPTS: add it there, so conftest.py "
                         "loads it before the first Hypothesis draw")
    path = ROOT / script
    name = f"{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_all() -> None:
    for script in SCRIPTS:
        load(script)
