"""The step simulator: thousands of async spec-decode steps, every op output against the model.

Long runs use the native backend; the Triton interpreter and the reference get shorter runs.
A correction that ignores prev_positions, or one that stores rows before reading them all,
must be caught.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import specops
from specops import MappingGroup
from specops.simulator import SimulationMismatch, Simulator, SimulatorConfig

LONG_RUNS = {
    "seed0-W1": SimulatorConfig(seed=0),
    "seed1-W2-rank1": SimulatorConfig(seed=1, cp_world_size=2, cp_rank=1, prev_positions_dtype=torch.int64),
    "seed2-W4-rank2-I4-fused": SimulatorConfig(seed=2, cp_world_size=4, cp_rank=2, cp_interleave=4, fused=True,
                                               positions_dtype=torch.int32),
    "seed3-W3-rank0-fused": SimulatorConfig(
        seed=3, cp_world_size=3, cp_rank=0, fused=True,
        groups=(MappingGroup(16), MappingGroup(4, blocks_per_kv_block=4), MappingGroup(32, cp_sharded=False))),
    "seed4-W8-rank5-I2": SimulatorConfig(seed=4, cp_world_size=8, cp_rank=5, cp_interleave=2, num_speculative_tokens=7),
}


@pytest.fixture(autouse=True)
def one_intra_op_thread():
    """The simulator's tensors are tiny; on a busy host, torch's intra-op thread pool turns some
    small CPU ops (repeat_interleave with int64 repeats) into milliseconds of spinning."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_every_case_was_exercised(stats):
    assert stats.continued_rows > stats.steps  # the device correction did real work...
    assert stats.moved_rows > stats.continued_rows // 2  # ...on rows that changed place,
    assert stats.rejected_drafts > 0
    assert stats.partial_prefills > 0 and stats.resumed_rows > 0 and stats.preemptions > 0
    assert stats.finished > 0 and stats.max_batch > 10


@pytest.mark.parametrize("name", list(LONG_RUNS))
def test_native_matches_the_model_for_2000_steps(name):
    config = LONG_RUNS[name]
    assert config.num_steps >= 2000
    with specops.backend("native"):
        stats = Simulator(config).run()
    assert stats.steps == config.num_steps
    assert_every_case_was_exercised(stats)


@pytest.mark.parametrize("fused", [False, True])
def test_reference_matches_the_model(fused):
    config = SimulatorConfig(seed=10, num_steps=150, cp_world_size=2, cp_rank=1, fused=fused)
    with specops.backend("reference"):
        stats = Simulator(config).run()
    assert stats.continued_rows > 0 and stats.moved_rows > 0


@pytest.mark.skipif("triton" not in specops.available_backends(), reason="Triton is not usable here")
@pytest.mark.parametrize("fused", [False, True])
def test_triton_matches_the_model(fused):
    config = SimulatorConfig(seed=11, num_steps=30, cp_world_size=2, cp_rank=0, cp_interleave=2, fused=fused)
    with specops.backend("triton"):
        stats = Simulator(config).run()
    assert stats.continued_rows > 0 and stats.moved_rows > 0


def ignores_prev_positions(num_computed_tokens, num_accepted_tokens, prev_positions, valid, drafts, cpu):
    """Assumes every row kept its place: row i continues row i."""
    same_rows = torch.arange(prev_positions.numel(), dtype=prev_positions.dtype)
    specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, same_rows, valid, drafts, cpu)


def stores_before_reading_every_row(num_computed_tokens, num_accepted_tokens, prev_positions, valid, drafts, cpu):
    """The naive in-place loop: a row read after another row was stored sees the new value."""
    for i, previous in enumerate(prev_positions.tolist()):
        if 0 <= previous < min(valid.numel(), drafts.numel()) and drafts[previous] > 0:
            num_computed_tokens[i] = num_computed_tokens[previous] + valid[previous]
            num_accepted_tokens[i] = valid[previous]
        else:
            num_computed_tokens[i] = cpu[i]


def trusts_the_scheduler(num_computed_tokens, num_accepted_tokens, prev_positions, valid, drafts, cpu):
    """No correction at all: the optimistic counts."""
    num_computed_tokens[: prev_positions.numel()] = cpu


@pytest.mark.parametrize("broken", [ignores_prev_positions, stores_before_reading_every_row, trusts_the_scheduler])
def test_a_broken_correction_is_caught(broken):
    config = SimulatorConfig(seed=0, num_steps=300)
    with pytest.raises(SimulationMismatch, match="num_computed_tokens"):
        Simulator(config, correct_fn=broken).run()


def test_the_injected_correction_is_the_one_that_runs():
    # The same run with the real op injected passes: the failures above come from the breakage.
    config = SimulatorConfig(seed=0, num_steps=300)
    calls = []

    def counting(*args):
        calls.append(1)
        specops.correct_num_computed_tokens(*args)

    Simulator(config, correct_fn=counting).run()
    assert len(calls) == 300


def test_fused_runs_take_no_correct_fn():
    with pytest.raises(ValueError, match="correct_fn"):
        Simulator(dataclasses.replace(SimulatorConfig(), fused=True), correct_fn=ignores_prev_positions)
