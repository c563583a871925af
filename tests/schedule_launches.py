"""The schedule family's launch recorder, a fixture the host-route tests import (a conftest.py
under tests/ops would shadow tests/conftest.py for the modules that import from it)."""

from __future__ import annotations

import importlib

import pytest

# The host-planned schedule family: their launchers share one kernel launch (launch_schedule).
SCHEDULE_FAMILY = ("sas_metadata", "kv_quant_sas_metadata", "lightning_indexer_metadata")


@pytest.fixture
def launched(monkeypatch) -> list[str]:
    """The names of the schedule family's members whose launcher reached the family's kernel
    launch (which is replaced: nothing is launched)."""
    calls: list[str] = []
    # Every launcher imported before any is patched: the members import launch_schedule by name.
    modules = {name: importlib.import_module(f"specops.triton_kernels.{name}") for name in SCHEDULE_FAMILY}
    for name, module in modules.items():
        monkeypatch.setattr(module, "launch_schedule", lambda *args, name=name, **kwargs: calls.append(name))
    return calls
