"""The runner's whole spec-decode step (examples/runner_step.py): the bookkeeping ops, the
target step's slots and the drafting layer's metadata of every draft pass, checked against
plain Python every step: both max_model_len rules, requests whose drafts pass max_model_len,
discarded partial prefills, requests joining and leaving; on every backend (200 steps
natively, fewer under the Triton interpreter and the reference)."""

from __future__ import annotations

import pytest
import repo_modules

import specops


def _example():
    return repo_modules.load("examples/runner_step.py")


@pytest.mark.parametrize("rule", ["reset", "clamp"])
def test_the_loop_runs_clean(backend, rule):
    example = _example()
    loop = example.Loop(seed=1, rule=rule)
    # The Triton interpreter runs every draft pass's drafting kernels too: a few steps there.
    steps = {"native": 200, "reference": 25}.get(backend, 12)
    for _ in range(steps):
        loop.step()  # every op's outputs are asserted against plain Python inside
    assert loop.counts["steps"] > steps // 2
    assert loop.counts["discarded"] > 0
    if backend == "native":
        assert loop.counts["drafted_past_limit"] > 0 and loop.counts["limit_mid_draft"] > 0


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
