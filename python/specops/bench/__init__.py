"""specops-bench: op-level microbenchmarks against the baselines a runner would otherwise use.

Every public module here that defines `cases(device, quick) -> list[Case]` is a benchmark, found
by its name (a new op's python/specops/bench/NAME.py needs no registration); BENCHMARKS maps
each name to its module, in the order of the names.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def _discovered() -> dict[str, ModuleType]:
    found = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        if info.name.startswith("_"):
            continue  # the harness, the report, shared helpers
        module = importlib.import_module(f"{__name__}.{info.name}")
        if callable(getattr(module, "cases", None)):
            found[info.name] = module
    return found


BENCHMARKS: dict[str, ModuleType] = _discovered()
