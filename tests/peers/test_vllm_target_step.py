"""The target step's metadata: one prepare_spec_decode_inputs call in its request-indexed mode
against model runner V2's own three launches (vLLM 0.33, `GPUModelRunner.prepare_inputs` then
`prepare_attn`), every backend:

- `prepare_pos_seq_lens` (vllm/v1/worker/gpu/input_batch.py) over the runner's persistent
  positions and seq_lens, with query_start_loc sliced to num_reqs_padded + 1 and padded with T;
- `BlockTables.gather_block_tables` into its `input_block_tables` (sliding-window masking from
  the request-indexed counts, clearing the rows a larger previous batch left);
- `BlockTables.compute_slot_mappings` into its `slot_mappings` buffer.

specops is called exactly as the vLLM plugin calls it (python/specops/integrations/vllm/
target_step.py), from vLLM's own BlockTables attributes. Each side owns a BlockTables and
InputBuffers built alike and started from the same random contents, so a write out of range or
one left out shows; the block ids are vLLM's own staged writes. Compared bit for bit over the
whole buffers: seq_lens, the slot mappings, every group's gathered table, positions[:T]. Two
regions differ by design (docs/conformance.md) and are asserted to hold specops' documented
value: positions in [T, width) are 0 (vLLM leaves an earlier step's), and a batch row's gathered
entries past its block count are the null block (vLLM leaves the ids the row held before).

The KV-cache groups are those of test_vllm_block_tables.py: DCP-sharded full attention, a
replicated sliding-window group, a sharded group without slot mapping, a narrow sharded one.
"""

from __future__ import annotations

import dataclasses
import random
import re
import types

import pytest
import torch
from conftest import BACKENDS
from test_vllm_block_tables import GROUPS
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.input_batch import InputBuffers, prepare_pos_seq_lens

import specops

CPU = torch.device("cpu")
NULL = specops.NULL_BLOCK_ID
MAX_NUM_REQS, MAX_NUM_TOKENS = 8, 64
# Every group's row holds 128 tokens per rank: a request's seq_len stays within it.
MAX_SEQ_LEN = 128
WINDOW = 1  # GROUPS' sliding-window group


@dataclasses.dataclass(frozen=True)
class Batch:
    num_reqs: int
    prefills: int = 1  # chunks of 5..12 tokens; the rest decode 1 token plus 0..3 drafts
    pad_reqs: int = 0  # num_reqs_padded - num_reqs (a CUDA-graph batch size)
    pad_tokens: int = 0  # num_tokens_after_padding - T
    min_start: int = 0  # the lowest first position of a request


# (cp_size, cp_rank, cp_interleave), the step's batches on the same BlockTables.
SCENARIOS = {
    "dcp1": ((1, 0, 1), [Batch(5)]),
    "dcp2-rank0": ((2, 0, 1), [Batch(5, pad_tokens=2)]),
    "dcp2-rank1": ((2, 1, 1), [Batch(5, pad_tokens=2)]),
    "dcp4-rank2-interleave2": ((4, 2, 2), [Batch(6, prefills=2)]),
    "mixed-prefill-decode": ((1, 0, 1), [Batch(7, prefills=3)]),
    "padded-requests": ((2, 1, 1), [Batch(3, pad_reqs=3, pad_tokens=5)]),
    # Rows [3, 7) of the gathered tables hold the first batch's ids: both clear them.
    "smaller-second-step": ((1, 0, 1), [Batch(7, prefills=2), Batch(2, pad_reqs=1, pad_tokens=3)]),
    "smaller-second-step-dcp4": ((4, 2, 2), [Batch(6, pad_reqs=1), Batch(1, pad_reqs=2)]),
    # Every first position past the window's reach plus a block: leading entries are masked.
    "sliding-window-masked": ((1, 0, 1), [Batch(4, min_start=40)]),
}


class Side:
    """One runner's persistent state, vLLM's own classes, started from the given contents."""

    def __init__(self, cp, start):
        world, rank, interleave = cp
        self.tables = BlockTables(
            [g.block_size for g in GROUPS], MAX_NUM_REQS, MAX_NUM_TOKENS, [g.width for g in GROUPS], CPU,
            cp_size=world, cp_rank=rank, cp_interleave=interleave,
            slot_mapping_enabled=[g.slot_mapping for g in GROUPS], dcp_sharded=[g.sharded for g in GROUPS],
            sliding_window_reach=[g.reach for g in GROUPS])
        self.inputs = InputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
        # In place: vLLM's kernels read these addresses from its pointer tables.
        for staged, gathered, source, old in zip(self.tables.block_tables, self.tables.input_block_tables,
                                                 start.source, start.gathered):
            staged.gpu.copy_(source)
            gathered.copy_(old)
        self.tables.slot_mappings.copy_(start.slot_mappings)
        self.inputs.positions.copy_(start.positions)
        self.inputs.seq_lens.copy_(start.seq_lens)


def random_start(rng: random.Random) -> types.SimpleNamespace:
    """Contents before the first step: ids left in the tables, last steps' positions and slots."""
    g = torch.Generator().manual_seed(rng.randrange(1 << 30))

    def ints(*shape, dtype=torch.int32):
        return torch.randint(1, 1 << 20, shape, generator=g, dtype=dtype)

    return types.SimpleNamespace(
        source=[ints(MAX_NUM_REQS, group.width) for group in GROUPS],
        gathered=[ints(MAX_NUM_REQS, group.width) for group in GROUPS],
        slot_mappings=ints(len(GROUPS), MAX_NUM_TOKENS, dtype=torch.int64),
        positions=ints(MAX_NUM_TOKENS, dtype=torch.int64), seq_lens=ints(MAX_NUM_REQS))


def blocks_needed(group, seq_len: int, world: int) -> int:
    return -(-seq_len // (group.block_size * (world if group.sharded else 1)))


def schedule(rng: random.Random, sides: list[Side], batch: Batch, world: int) -> types.SimpleNamespace:
    """A scheduler's step: blocks for every request (vLLM's staged writes, applied on each side),
    the request-indexed counts and the runner's query_start_loc buffer."""
    rows = rng.sample(range(MAX_NUM_REQS), batch.num_reqs)
    query_lens = [rng.randint(5, 12) for _ in range(batch.prefills)]
    query_lens += [1 + rng.randint(0, 3) for _ in range(batch.num_reqs - batch.prefills)]
    rng.shuffle(query_lens)
    # Rows outside the batch hold noise: neither side may read them.
    counts = torch.tensor([rng.randrange(1 << 20) for _ in range(MAX_NUM_REQS)], dtype=torch.int32)
    for row, query_len in zip(rows, query_lens):
        start = rng.randint(batch.min_start, MAX_SEQ_LEN - query_len)
        counts[row] = start
        # Up to one block ahead of the step's tokens, as the scheduler may allocate.
        ids = tuple([rng.randrange(1, 1 << 20) for _ in range(
            min(blocks_needed(group, start + query_len, world) + rng.randint(0, 1), group.width))] for group in GROUPS)
        for side in sides:
            side.tables.append_block_ids(row, ids, overwrite=True)
    for side in sides:
        side.tables.apply_staged_writes()
    num_tokens = sum(query_lens)
    query_start_loc = torch.full((MAX_NUM_REQS + 1,), num_tokens, dtype=torch.int32)
    query_start_loc[: batch.num_reqs + 1] = torch.tensor([0] + torch.tensor(query_lens).cumsum(0).tolist())
    assert num_tokens + batch.pad_tokens <= MAX_NUM_TOKENS
    return types.SimpleNamespace(
        idx_mapping=torch.tensor(rows, dtype=torch.int64), query_start_loc=query_start_loc, counts=counts,
        num_tokens=num_tokens, num_reqs_padded=batch.num_reqs + batch.pad_reqs,
        num_tokens_padded=num_tokens + batch.pad_tokens)


def vllm_step(side: Side, step) -> None:
    """prepare_inputs' prepare_pos_seq_lens, then prepare_attn's two BlockTables calls."""
    query_start_loc = step.query_start_loc[: step.num_reqs_padded + 1]
    prepare_pos_seq_lens(step.idx_mapping, query_start_loc, step.counts, side.inputs.positions, side.inputs.seq_lens)
    side.tables.gather_block_tables(step.idx_mapping, num_reqs_padded=step.num_reqs_padded,
                                    num_computed_tokens=step.counts)
    side.tables.compute_slot_mappings(step.idx_mapping, query_start_loc,
                                      side.inputs.positions[: step.num_tokens_padded],
                                      num_tokens_padded=step.num_tokens_padded)


def specops_step(side: Side, step) -> None:
    """The plugin's one call (target_step.prepare_pos_seq_lens), from the same BlockTables."""
    tables, num_reqs = side.tables, step.idx_mapping.shape[0]
    query_start_loc = step.query_start_loc[: step.num_reqs_padded + 1]
    width = tables.slot_mappings.shape[1]
    # vLLM's gather also clears the rows the previous batch left in its shared buffers.
    num_rows = max(step.num_reqs_padded, tables._num_dirty_rows)
    empty = torch.empty(0, dtype=torch.int32)
    specops.prepare_spec_decode_inputs(
        step.counts, empty, empty, empty, empty, empty, query_start_loc[: num_reqs + 1],
        [table.gpu for table in tables.block_tables], tables.block_sizes, positions=side.inputs.positions[:width],
        seq_lens=side.inputs.seq_lens, slot_mappings=list(tables.slot_mappings),
        cp_sharded=[g.sharded for g in GROUPS], slot_mapping_enabled=[g.slot_mapping for g in GROUPS],
        cp_world_size=tables.cp_size, cp_rank=tables.cp_rank, cp_interleave=tables.cp_interleave,
        idx_mapping=step.idx_mapping, num_tokens_padded=width, num_blocks=list(tables.num_blocks.gpu.unbind(0)),
        request_indexed_counts=True, gathered_block_tables=list(tables.input_block_tables),
        num_gathered_rows=num_rows,
        sliding_window_reach=tables._sliding_window_reach if tables.has_sliding_window_groups else 0)
    # What the plugin's block_tables adapter records when it finds the gather done.
    tables._num_dirty_rows = num_reqs


def assert_same(name: str, ours: torch.Tensor, want: torch.Tensor, what: str) -> None:
    if not torch.equal(ours, want):
        index = tuple((ours != want).nonzero()[0].tolist())
        raise AssertionError(f"{name}{list(index)}: specops {ours[index].item()}, expected {want[index].item()} "
                             f"({what})")


def assert_agree(ours: Side, theirs: Side, step, what: str) -> int:
    """Every buffer bit for bit, the two documented regions at specops' value; returns how many
    stale ids vLLM left past a batch row's count (the second region, where it shows)."""
    num_tokens = step.num_tokens
    assert_same("positions", ours.inputs.positions[:num_tokens], theirs.inputs.positions[:num_tokens], what)
    assert_same("positions past T", ours.inputs.positions[num_tokens:],
                torch.zeros(MAX_NUM_TOKENS - num_tokens, dtype=torch.int64), what)
    assert_same("seq_lens", ours.inputs.seq_lens, theirs.inputs.seq_lens, what)
    assert_same("slot_mappings", ours.tables.slot_mappings, theirs.tables.slot_mappings, what)
    stale = 0
    for g, (table, their_table) in enumerate(zip(ours.tables.input_block_tables, theirs.tables.input_block_tables)):
        want = their_table.clone()
        for r, row in enumerate(step.idx_mapping.tolist()):
            count = int(theirs.tables.num_blocks.gpu[g, row])
            stale += int((want[r, count:] != NULL).sum())
            want[r, count:] = NULL
        assert_same(f"input_block_tables[{g}]", table, want, what)
    return stale


def masked_entries(theirs: Side, step) -> int:
    """Null entries vLLM wrote inside a row's count of the sliding-window group (the ids are >= 1)."""
    table = theirs.tables.input_block_tables[WINDOW]
    return sum(int((table[r, : int(theirs.tables.num_blocks.gpu[WINDOW, row])] == NULL).sum())
               for r, row in enumerate(step.idx_mapping.tolist()))


def run_scenario(name: str):
    """Both sides through the scenario's steps, compared after each; returns the sides and steps."""
    cp, batches = SCENARIOS[name]
    rng = random.Random(name)
    start = random_start(rng)
    theirs, ours = Side(cp, start), {backend: Side(cp, start) for backend in BACKENDS}
    steps, stale, masked, cleared = [], 0, 0, 0
    for index, batch in enumerate(batches):
        step = schedule(rng, [theirs, *ours.values()], batch, cp[0])
        # Rows between this batch's padded size and the previous batch's: vLLM must clear them.
        dirty = range(step.num_reqs_padded, theirs.tables._num_dirty_rows)
        cleared += sum(int((t[dirty.start: dirty.stop] != NULL).sum()) for t in theirs.tables.input_block_tables)
        vllm_step(theirs, step)
        masked += masked_entries(theirs, step)
        for backend, side in ours.items():
            with specops.backend(backend):
                specops_step(side, step)
            stale += assert_agree(side, theirs, step, f"{name}, step {index}, {backend}")
        steps.append(step)
    return types.SimpleNamespace(theirs=theirs, ours=ours, steps=steps, stale=stale, masked=masked, cleared=cleared)


@pytest.mark.parametrize("name", SCENARIOS)
def test_target_step_agrees_with_model_runner_v2(name):
    result = run_scenario(name)
    # The comparison covers each case's point: the differences' regions are not empty, the
    # window masked where it should and nowhere under CP, a larger batch's rows were cleared.
    assert result.stale > 0
    world = SCENARIOS[name][0][0]
    if name == "sliding-window-masked":
        assert result.masked > 0
    if world > 1:
        assert result.masked == 0
    if name.startswith("smaller-second-step"):
        assert result.cleared > 0
    if name == "padded-requests":
        step = result.steps[0]
        assert step.num_reqs_padded > step.idx_mapping.numel() and step.num_tokens_padded > step.num_tokens


@pytest.mark.parametrize("buffer", ["positions", "seq_lens", "slot_mappings", "input_block_tables[1]"])
def test_the_comparison_sees_one_changed_entry(buffer):
    """Not vacuous: one specops entry off by one, in a region compared bit for bit, is named."""
    result = run_scenario("dcp1")
    step, side = result.steps[-1], result.ours[BACKENDS[0]]
    entry = {"positions": (side.inputs.positions, 0), "seq_lens": (side.inputs.seq_lens, MAX_NUM_REQS - 1),
             "slot_mappings": (side.tables.slot_mappings[2], 0),  # a group without slot mapping: PAD
             "input_block_tables[1]": (side.tables.input_block_tables[1][0], 0)}
    tensor, index = entry[buffer]
    tensor[index] += 1
    with pytest.raises(AssertionError, match="^" + re.escape(buffer) + r"\["):
        assert_agree(side, result.theirs, step, "corrupted")
