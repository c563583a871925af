"""The whole spec-decode step on the bookkeeping ops (examples/spec_decode_loop.py), checked
against plain Python every step: both max_model_len rules, requests whose drafts pass
max_model_len, discarded partial prefills, requests joining and leaving; on every backend
(200 steps natively, fewer under the Triton interpreter and the reference)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import specops

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "spec_decode_loop.py"


def _example():
    spec = importlib.util.spec_from_file_location("spec_decode_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("rule", ["reset", "clamp"])
def test_the_loop_runs_clean(backend, rule):
    example = _example()
    loop = example.Loop(seed=1, rule=rule)
    steps = 200 if backend == "native" else 25
    for _ in range(steps):
        loop.step()  # every op's outputs are asserted against plain Python inside
    assert loop.counts["steps"] > steps // 2
    assert loop.counts["discarded"] > 0
    if backend == "native":
        assert loop.counts["drafted_past_limit"] > 0


def test_the_loop_uses_the_mappings_buffers_in_place():
    example = _example()
    loop = example.Loop(seed=2, rule="reset")
    pointers = (loop.mappings.draft_positions.data_ptr(), loop.mappings.seq_lens.data_ptr(),
                [slots.data_ptr() for slots in loop.mappings.slot_mappings])
    with specops.backend("native"):
        for _ in range(20):
            loop.step()
    assert pointers == (loop.mappings.draft_positions.data_ptr(), loop.mappings.seq_lens.data_ptr(),
                        [slots.data_ptr() for slots in loop.mappings.slot_mappings])
