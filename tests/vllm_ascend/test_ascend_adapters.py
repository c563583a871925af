"""The Ascend points' adapters against vllm-ascend 0.26.0rc1's own code on random and hand-made
inputs (docs/integrations.md, "Ascend"): bitwise equal where vllm-ascend is exact, exact where it
is not (its slot-mapping kernel gathers block ids through float32 and loads 4096 table words a
row), and the slot mappings in the dtype vllm-ascend's consumer takes (int32)."""

from __future__ import annotations

import random

import pytest
import torch
from vllm_ascend.worker.v2.block_table import AscendBlockTables

import specops

CPU = torch.device("cpu")


def _tables(block_sizes, width, max_num_reqs=4, max_tokens=64, cp_size=1, cp_rank=0):
    return AscendBlockTables(block_sizes, max_num_reqs, max_tokens, [width] * len(block_sizes), CPU,
                             cp_size=cp_size, cp_rank=cp_rank)


def _write(tables, rows: list[list[list[int]]]) -> None:
    """rows[g][r]: group g's block ids of request row r, through vllm-ascend's staged writes."""
    for r in range(len(rows[0])):
        tables.append_block_ids(r, tuple(rows[g][r] for g in range(len(rows))), overwrite=True)
    tables.apply_staged_writes()


def _specops_slots(tables, idx_mapping, query_start_loc, positions) -> torch.Tensor:
    """Every group's slot mapping as the Ascend points compute it (the fused target step's op, in
    vllm-ascend's int32 buffers): prepare_spec_decode_inputs in its request-indexed mode."""
    out = torch.full_like(tables.slot_mappings, 7)
    num_reqs = idx_mapping.numel()
    counts = torch.zeros(tables.max_num_reqs, dtype=torch.int32)
    starts = query_start_loc.tolist()
    for r in range(num_reqs):  # the counts that put each request's first token at its position
        counts[int(idx_mapping[r])] = int(positions[starts[r]])
    empty = torch.empty(0, dtype=torch.int32)
    specops.prepare_spec_decode_inputs(
        counts, empty, empty, empty, empty, empty, query_start_loc, [t.gpu for t in tables.block_tables],
        list(tables.kernel_block_sizes), positions=torch.zeros(out.shape[1], dtype=torch.int64),
        seq_lens=torch.zeros(tables.max_num_reqs, dtype=torch.int32), slot_mappings=list(out),
        cp_world_size=tables.cp_size, cp_rank=tables.cp_rank, idx_mapping=idx_mapping,
        num_tokens_padded=out.shape[1], request_indexed_counts=True)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cp", [(1, 0), (2, 1)])
def test_slot_mappings_equal_vllm_ascend_where_it_is_exact(seed, cp):
    rng = random.Random(seed)
    block_sizes = [16, 32]
    tables = _tables(block_sizes, width=12, cp_size=cp[0], cp_rank=cp[1])
    rows = [[[rng.randrange(1, 5000) for _ in range(12)] for _ in range(4)] for _ in block_sizes]
    _write(tables, rows)
    num_reqs = rng.randint(1, 4)
    idx_mapping = torch.tensor(rng.sample(range(4), num_reqs), dtype=torch.int32)
    lens = [rng.randint(1, 6) for _ in range(num_reqs)]
    starts = [rng.randint(0, 150) for _ in range(num_reqs)]
    positions = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, lens)])
    query_start_loc = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    theirs = tables.compute_slot_mappings(idx_mapping, query_start_loc, positions, positions.numel()).clone()
    ours = _specops_slots(tables, idx_mapping, query_start_loc, positions)
    assert ours.dtype == tables.slot_mappings.dtype == torch.int32
    assert torch.equal(ours[:, :positions.numel()], theirs[:, :positions.numel()])
    assert (ours[:, positions.numel():] == -1).all()


def test_slot_past_2_24_is_exact_where_vllm_ascends_kernel_rounds():
    """Block 131072 of block size 128, offset 1: slot 2^24 + 1, which float32 cannot hold."""
    tables = _tables([128], width=4)
    _write(tables, [[[131072], [1], [1], [1]]])
    idx_mapping = torch.tensor([0], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 1], dtype=torch.int32)
    positions = torch.tensor([1])
    theirs = tables.compute_slot_mappings(idx_mapping, query_start_loc, positions, 1)
    assert int(theirs[0, 0]) == 16777216  # vllm-ascend 0.26.0rc1: rounded through float32
    ours = _specops_slots(tables, idx_mapping, query_start_loc, positions)
    assert int(ours[0, 0]) == 131072 * 128 + 1


def test_block_index_past_4096_is_exact():
    """A table wider than the 4096 words vllm-ascend's kernel loads a row: position 5000 * 16 reads
    column 5000."""
    tables = _tables([16], width=6000, max_num_reqs=2)
    row = list(range(1, 6001))
    _write(tables, [[row, row]])
    idx_mapping = torch.tensor([1], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 1], dtype=torch.int32)
    positions = torch.tensor([5000 * 16 + 3])
    ours = _specops_slots(tables, idx_mapping, query_start_loc, positions)
    assert int(ours[0, 0]) == row[5000] * 16 + 3


def test_the_plugin_waits_for_vllm_ascends_worker_patches_then_patches_after_them():
    """On vllm-ascend's platform register() hooks adapt_patch (vLLM loads the plugins before
    NPUWorker.__init__ applies the worker patches) and activates right after it: the points then
    hold what vllm-ascend's patches bound (its post_update). Runs last: it patches this process."""
    import vllm.v1.worker.gpu.model_runner as vllm_model_runner
    import vllm_ascend.utils
    from vllm_ascend.worker.v2 import input_batch as ascend_input_batch

    from specops.integrations import vllm as plugin

    state = plugin.activate({"SPECOPS_VLLM": "1"})
    assert not state.active and "waiting for vllm-ascend's worker patches" in state.reason
    assert getattr(vllm_ascend.utils.adapt_patch, "__specops_hook__", False)
    vllm_ascend.utils.adapt_patch()
    state = plugin.status()
    assert state.active, state.reason
    assert not getattr(vllm_ascend.utils.adapt_patch, "__specops_hook__", False)  # the hook is gone
    # The adapter wraps vllm-ascend's post_update (its worker patch bound it into vLLM's runner).
    assert vllm_model_runner.post_update.__specops_point__ == "post_update"
    assert vllm_model_runner.post_update is ascend_input_batch.post_update
    assert vllm_model_runner.post_update.__wrapped__.__module__ == "vllm_ascend.worker.v2.input_batch"
