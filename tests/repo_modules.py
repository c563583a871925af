"""The repository's own scripts (examples/, tools/) loaded as modules by the tests, through one door.

Hypothesis draws a few percent of its values from the constants of the "local" modules it finds
in sys.modules: files outside site-packages and outside tests/, which here means these scripts.
One left in sys.modules by a test would change every later draw of its worker, so `make test`'s
derandomized examples, and the figures derived from them (docs/device_readiness.md's build count),
would depend on the order xdist ran the tests in and on the scripts' own text. `load` keeps a
script in sys.modules only while it executes (dataclasses look their module up there while the
class is built), so Hypothesis never sees it: the draws depend on neither."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(script: str) -> ModuleType:
    """A fresh module of `script` (a path relative to the repository root), out of sys.modules
    once executed."""
    path = ROOT / script
    if path.suffix != ".py" or not path.is_file():
        raise ValueError(f"script must name a Python file of the repository, got {script!r}")
    name = f"{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if previous is None:
            del sys.modules[name]
        else:
            sys.modules[name] = previous
    return module
