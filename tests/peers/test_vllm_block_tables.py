"""vLLM 0.33's BlockTables (model runner V2) against specops.PersistentMappings and the ops.

vLLM's own class stages the block ids (`_apply_write_kernel`, one group and several), gathers
the batch's rows (`_gather_block_tables_kernel`, with and without sliding-window masking) and
computes every group's slot mapping (`_compute_slot_mappings_kernel`: several groups, CP
sharded and replicated groups, groups without a slot mapping, idx_mapping with -1 rows, token
padding). specops is fed the same scheduler decisions; every value vLLM defines must agree on
every specops backend. Where vLLM leaves stale values or wraps int32, a test below names the
case and asserts specops' value (docs/conformance.md lists them).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from conftest import BACKENDS
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.buffer_utils import FusedStagedWriter, StagedWriteTensor

import specops
from specops import MappingGroup, PersistentMappings

NULL = specops.NULL_BLOCK_ID
PAD = specops.PAD_SLOT_ID
CPU = torch.device("cpu")


@dataclasses.dataclass(frozen=True)
class Group:
    block_size: int
    width: int  # max blocks per request row
    sharded: bool = True
    slot_mapping: bool = True
    reach: int = 0  # sliding-window reach; 0: full attention


# A full group, a replicated sliding-window group, a group without slot mapping, a narrow one.
GROUPS = (Group(16, 8), Group(8, 16, sharded=False, reach=20), Group(32, 4, slot_mapping=False), Group(4, 32))
CP_CONFIGS = [(1, 0, 1), (2, 1, 4), (4, 2, 2)]  # (cp_size, cp_rank, cp_interleave)
MAX_NUM_REQS, MAX_NUM_TOKENS = 8, 48


def make_pair(groups, cp, max_num_reqs=MAX_NUM_REQS, max_num_tokens=MAX_NUM_TOKENS):
    world, rank, interleave = cp
    ours = PersistentMappings(
        [MappingGroup(g.block_size, 1, g.sharded, g.slot_mapping, g.reach) for g in groups],
        max_num_reqs=max_num_reqs, max_num_blocks_per_req=[g.width for g in groups], max_num_tokens=max_num_tokens,
        cp_world_size=world, cp_rank=rank, cp_interleave=interleave)
    theirs = BlockTables(
        [g.block_size for g in groups], max_num_reqs, max_num_tokens, [g.width for g in groups], CPU,
        cp_size=world, cp_rank=rank, cp_interleave=interleave,
        slot_mapping_enabled=[g.slot_mapping for g in groups], dcp_sharded=[g.sharded for g in groups],
        sliding_window_reach=[g.reach for g in groups])
    return ours, theirs


class Runner:
    """Scheduler decisions applied to both: requests arrive on free rows, grow, finish."""

    def __init__(self, groups, cp, seed: int):
        self.groups, self.cp = groups, cp
        self.rng = random.Random(seed)
        self.ours, self.theirs = make_pair(groups, cp)
        self.tokens: dict[int, int] = {}  # row -> tokens computed so far
        self.num_blocks = [[0] * MAX_NUM_REQS for _ in groups]
        self.next_id = 1

    def _blocks_for(self, g: int, tokens: int) -> int:
        group = self.groups[g]
        world = self.cp[0] if group.sharded else 1
        return -(-tokens // (group.block_size * world))

    def _append(self, row: int, tokens: int, overwrite: bool) -> None:
        ids = []
        for g in range(len(self.groups)):
            have = 0 if overwrite else self.num_blocks[g][row]
            count = max(self._blocks_for(g, tokens) - have, 0)
            # Ids far apart but with every slot below 2^31: vLLM computes slots in int32.
            ids.append([self.rng.randrange(1, 2**31 // 64) for _ in range(count)])
            self.num_blocks[g][row] = have + count
        self.ours.append_blocks(row, ids, overwrite=overwrite)
        self.theirs.append_block_ids(row, tuple(ids), overwrite=overwrite)

    def step(self):
        rng = self.rng
        for row in list(self.tokens):
            if self.tokens[row] > 80 or rng.random() < 0.2:  # 80 + 16 tokens fit every group's width
                del self.tokens[row]
        for row in range(MAX_NUM_REQS):
            if row not in self.tokens and rng.random() < 0.4:
                self.tokens[row] = rng.randint(0, 60)
                self._append(row, self.tokens[row] + 8, overwrite=True)  # room for this step's tokens
        rows = list(self.tokens)
        rng.shuffle(rows)
        rows = rows[: rng.randint(0, len(rows))]
        query_lens, positions = [], []
        num_computed_tokens = torch.randint(0, 1 << 20, (MAX_NUM_REQS,), dtype=torch.int32)  # unread rows: noise
        for row in rows:
            query_len = rng.randint(1, 4) if rng.random() < 0.8 else rng.randint(5, 8)
            start = self.tokens[row]
            self._append(row, start + query_len, overwrite=False)
            num_computed_tokens[row] = start
            positions += range(start, start + query_len)
            query_lens.append(query_len)
            self.tokens[row] = start + query_len
        # Dummy requests (CUDA-graph padding) own no row: -1, after the real ones.
        num_real = len(rows)
        for _ in range(rng.randint(0, min(2, MAX_NUM_REQS - num_real))):
            rows.append(-1)
            query_len = rng.randint(0, 2)
            positions += [rng.randint(0, 40) for _ in range(query_len)]
            query_lens.append(query_len)
        self.ours.apply_staged()
        self.theirs.apply_staged_writes()
        query_start_loc = torch.tensor([0] + torch.tensor(query_lens, dtype=torch.int64).cumsum(0).tolist(),
                                       dtype=torch.int32)
        num_tokens = len(positions)
        return dict(idx_mapping=torch.tensor(rows, dtype=torch.int32), num_real=num_real,
                    query_start_loc=query_start_loc, positions=torch.tensor(positions, dtype=torch.int64),
                    num_computed_tokens=num_computed_tokens,
                    num_reqs_padded=min(MAX_NUM_REQS, len(rows) + rng.randint(0, 2)),
                    num_tokens_padded=min(MAX_NUM_TOKENS, num_tokens + rng.randint(0, 5)))


def their_tables_and_slots(runner: Runner, step: dict) -> tuple[list[torch.Tensor], torch.Tensor]:
    theirs = runner.theirs
    # vLLM's gather takes the real requests; rows past them (the dummy ones, the padding) are zeroed.
    tables = theirs.gather_block_tables(step["idx_mapping"][: step["num_real"]], step["num_reqs_padded"],
                                        num_computed_tokens=step["num_computed_tokens"])
    slots = theirs.compute_slot_mappings(step["idx_mapping"], step["query_start_loc"], step["positions"],
                                         step["num_tokens_padded"])
    return [t.clone() for t in tables], slots.clone()


def check_step(runner: Runner, step: dict, their_tables, their_slots, what: str) -> int:
    """Every value vLLM defines agrees; returns the stale entries vLLM left past a row's count."""
    ours = runner.ours
    ours.refresh(step["idx_mapping"], step["query_start_loc"], step["positions"],
                 num_reqs_padded=step["num_reqs_padded"], num_tokens_padded=step["num_tokens_padded"],
                 num_computed_tokens=step["num_computed_tokens"])
    stale = 0
    for g in range(len(runner.groups)):
        assert ours.num_blocks[g].tolist() == runner.theirs.num_blocks.gpu[g].tolist(), f"{what}: num_blocks[{g}]"
        ours_table = ours.block_tables[g][: step["num_reqs_padded"]]
        padding = [-1] * (step["num_reqs_padded"] - step["idx_mapping"].numel())
        for r, row in enumerate(step["idx_mapping"].tolist() + padding):
            count = int(ours.num_blocks[g][row]) if row >= 0 and r < step["num_real"] else 0
            assert ours_table[r, :count].tolist() == their_tables[g][r, :count].tolist(), f"{what}: group {g} row {r}"
            # Past the count vLLM writes nothing (see test_vllm_leaves_stale_ids_past_a_rows_count).
            assert (ours_table[r, count:] == NULL).all(), f"{what}: group {g} row {r} past its count"
            stale += int((their_tables[g][r, count:] != NULL).sum())
        assert ours.slot_mappings[g][: step["num_tokens_padded"]].tolist() == \
            their_slots[g][: step["num_tokens_padded"]].tolist(), f"{what}: slot_mappings[{g}]"
    return stale


@pytest.mark.parametrize("cp", CP_CONFIGS, ids=[f"cp{w}-rank{r}-i{i}" for w, r, i in CP_CONFIGS])
def test_runner_steps_agree_with_vllm_block_tables(cp):
    runner = Runner(GROUPS, cp, seed=cp[0])
    masked = 0
    for index in range(8):
        step = runner.step()
        their_tables, their_slots = their_tables_and_slots(runner, step)
        for backend in BACKENDS:
            with specops.backend(backend):
                check_step(runner, step, their_tables, their_slots, f"step {index} on {backend}")
        window = GROUPS[1]
        for r, row in enumerate(step["idx_mapping"][: step["num_real"]].tolist()):
            first = int(step["num_computed_tokens"][row])
            masked += min(max(first - window.reach, 0) // window.block_size, int(runner.ours.num_blocks[1][row]))
    # The window reached below some rows' blocks: masked without CP, left alone under CP (by
    # vLLM and specops alike, as the comparisons above show).
    assert masked > 0


def test_the_ops_agree_with_vllm_on_every_backend():
    """The same step through the public ops: gather_block_tables with the window arguments and
    compute_slot_mapping, per group, against vLLM's two kernels."""
    runner = Runner(GROUPS, (1, 0, 1), seed=11)
    for _ in range(4):
        step = runner.step()
    their_tables, their_slots = their_tables_and_slots(runner, step)
    assert step["num_real"] > 0
    for backend in BACKENDS:
        with specops.backend(backend):
            for g, group in enumerate(GROUPS):
                out = torch.full((step["num_reqs_padded"], group.width), 777, dtype=torch.int32)
                specops.gather_block_tables(runner.ours.source_block_tables[g], runner.ours.num_blocks[g],
                                            step["idx_mapping"], out, num_computed_tokens=step["num_computed_tokens"],
                                            sliding_window_reach=group.reach, block_size=group.block_size)
                for r in range(step["num_real"]):
                    count = int(runner.ours.num_blocks[g][int(step["idx_mapping"][r])])
                    assert out[r, :count].tolist() == their_tables[g][r, :count].tolist(), f"{backend} group {g}"
                if not group.slot_mapping:
                    continue
                slots = specops.compute_slot_mapping(step["query_start_loc"], step["positions"],
                                                     runner.ours.source_block_tables[g], group.block_size,
                                                     idx_mapping=step["idx_mapping"],
                                                     num_tokens_padded=step["num_tokens_padded"])
                assert slots.tolist() == their_slots[g][: step["num_tokens_padded"]].tolist(), f"{backend} group {g}"


def test_every_groups_gather_in_one_call_agrees_with_vllm_bitwise():
    """gather_block_tables_multi against vLLM's one-launch gather of every group: three groups (a
    full one, a sliding-window one of reach 20, a narrow one), random batches with -1 rows and
    padding, both starting from the same dirty buffers. Every group's whole buffer is bitwise
    vLLM's, except the entries past a row's count, which vLLM leaves stale and specops writes NULL
    (test_vllm_leaves_stale_ids_past_a_rows_count); rows past num_reqs_padded are both's untouched."""
    groups = GROUPS[:3]
    runner = Runner(groups, (1, 0, 1), seed=21)
    generator = torch.Generator().manual_seed(21)
    masked = stale = 0
    for index in range(6):
        step = runner.step()
        real = step["idx_mapping"][: step["num_real"]]
        dirty = [torch.randint(1, 2**31 - 1, (MAX_NUM_REQS, g.width), dtype=torch.int32, generator=generator)
                 for g in groups]
        theirs = [t.clone() for t in dirty]
        runner.theirs.gather_block_tables(real, step["num_reqs_padded"], out=tuple(theirs),
                                          out_ptrs=torch.tensor([t.data_ptr() for t in theirs], dtype=torch.uint64),
                                          num_computed_tokens=step["num_computed_tokens"])
        expected = [t.clone() for t in theirs]
        for g in range(len(groups)):
            for r, row in enumerate(real.tolist()):
                count = int(runner.ours.num_blocks[g][row])
                stale += int((expected[g][r, count:] == dirty[g][r, count:]).sum())
                expected[g][r, count:] = NULL
                if groups[g].reach:
                    first = int(step["num_computed_tokens"][row])
                    masked += min(max(first - groups[g].reach, 0) // groups[g].block_size, count)
        for backend in BACKENDS:
            with specops.backend(backend):
                ours = specops.gather_block_tables_multi(
                    runner.ours.source_block_tables[:3], runner.ours.num_blocks[:3], step["idx_mapping"],
                    [t.clone() for t in dirty], num_reqs_padded=step["num_reqs_padded"],
                    num_computed_tokens=step["num_computed_tokens"],
                    sliding_window_reach=[g.reach for g in groups], block_sizes=[g.block_size for g in groups])
            for g in range(len(groups)):
                assert torch.equal(ours[g], expected[g]), f"step {index} on {backend}: group {g}"
    assert masked > 0 and stale > 0  # the window masked entries; vLLM left dirty ids past a count


def test_vllm_wraps_slots_past_int32_specops_is_exact():
    """Deliberate difference: vLLM computes block_id * block_size in int32. Block 2^27 of 32
    tokens starts at slot 2^32: vLLM's slot wraps, specops' is exact (int64)."""
    groups = (Group(32, 2),)
    ours, theirs = make_pair(groups, (1, 0, 1))
    ours.append_blocks(0, [[2**27, 5]])
    theirs.append_block_ids(0, ([2**27, 5],), overwrite=False)
    ours.apply_staged()
    theirs.apply_staged_writes()
    idx_mapping, query_start_loc, positions = torch.tensor([0], dtype=torch.int32), \
        torch.tensor([0, 2], dtype=torch.int32), torch.tensor([3, 33])
    their_slots = theirs.compute_slot_mappings(idx_mapping, query_start_loc, positions, 2)[0].tolist()
    exact = [2**27 * 32 + 3, 5 * 32 + 1]
    wrapped = [(s + 2**31) % 2**32 - 2**31 for s in exact]
    assert their_slots == wrapped  # 3, the slot of another block: vLLM would write the wrong KV
    for backend in BACKENDS:
        with specops.backend(backend):
            ours.refresh(idx_mapping, query_start_loc, positions, num_tokens_padded=2)
            assert ours.slot_mappings[0][:2].tolist() == exact, backend


def test_vllm_leaves_stale_ids_past_a_rows_count():
    """Deliberate difference: vLLM's gather writes a batch row's first num_blocks entries only,
    so a row that held a longer request last step keeps that request's ids past the new count.
    specops rewrites the whole row (NULL past the count), so a captured graph never reads them."""
    groups = (Group(16, 4),)
    ours, theirs = make_pair(groups, (1, 0, 1))
    for row, ids in ((0, [11, 12, 13, 14]), (1, [21])):
        ours.append_blocks(row, [ids])
        theirs.append_block_ids(row, (ids,), overwrite=False)
    ours.apply_staged()
    theirs.apply_staged_writes()
    for idx in ([0], [1]):  # batch row 0: the long request, then the short one
        idx_mapping = torch.tensor(idx, dtype=torch.int32)
        their_table = theirs.gather_block_tables(idx_mapping, 1)[0][0].tolist()
        ours.refresh(idx_mapping, torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0]), num_reqs_padded=1)
    assert their_table == [21, 12, 13, 14]  # the first request's ids 12, 13, 14 are still there
    assert ours.block_tables[0][0].tolist() == [21, NULL, NULL, NULL]


def test_vllm_keeps_an_overwritten_rows_old_tail_in_its_source_table():
    """Deliberate difference: an overwrite that shortens a row leaves vLLM's old ids past the new
    count in its request-indexed table; specops writes NULL over them, so a slot mapping read
    past the count (a runner bug) finds the NULL block, never a freed one."""
    groups = (Group(16, 4),)
    ours, theirs = make_pair(groups, (1, 0, 1))
    for overwrite, ids in ((False, [5, 6, 7]), (True, [8])):
        ours.append_blocks(0, [ids], overwrite=overwrite)
        theirs.append_block_ids(0, (ids,), overwrite=overwrite)
        ours.apply_staged()
        theirs.apply_staged_writes()
    assert theirs.num_blocks.gpu[0, 0] == ours.num_blocks[0][0] == 1
    assert theirs.block_tables[0].gpu[0].tolist() == [8, 6, 7, 0]
    assert ours.source_block_tables[0][0].tolist() == [8, NULL, NULL, NULL]


def test_both_reject_an_append_past_the_row_width():
    ours, theirs = make_pair((Group(16, 2),), (1, 0, 1))
    with pytest.raises(RuntimeError, match="exceeds row capacity"):
        theirs.append_block_ids(0, ([1, 2, 3],), overwrite=False)
    with pytest.raises(ValueError, match=r"more than the width of group 0"):
        ours.append_blocks(0, [[1, 2, 3]])


@pytest.mark.parametrize("num_groups", [1, 3])
def test_staged_writes_agree_with_vllms_apply_write_kernel(num_groups):
    """vLLM's `_apply_write_kernel`: one table (StagedWriteTensor.apply_write) and several
    (FusedStagedWriter through BlockTables), against specops.apply_staged_writes."""
    rng = random.Random(num_groups)
    rows, cols = 6, 40
    theirs = [StagedWriteTensor((rows, cols), torch.int32, CPU) for _ in range(num_groups)]
    writes = []  # (group, row, start, values); one write per (group, row): any order is right
    for g in range(num_groups):
        for row in rng.sample(range(rows), 4):
            start = rng.randrange(cols)
            values = [rng.randrange(1, 2**31) for _ in range(rng.randint(1, cols - start))]
            theirs[g].stage_write(row, start, values)
            writes.append((g, row, start, values))
    if num_groups == 1:
        theirs[0].apply_write()
    else:  # as BlockTables.apply_staged_writes does it: a table of the groups' addresses and strides
        pointers = torch.tensor([t.gpu.data_ptr() for t in theirs], dtype=torch.uint64)
        strides = torch.tensor([t.gpu.stride(0) for t in theirs], dtype=torch.int64)
        FusedStagedWriter(CPU, num_groups * rows).apply(theirs, pointers, strides)
    for backend in BACKENDS:
        with specops.backend(backend):
            ours = torch.zeros(num_groups * rows, cols, dtype=torch.int32)  # the groups' tables, stacked
            lens = [len(values) for _, _, _, values in writes]
            specops.apply_staged_writes(
                ours, torch.tensor([g * rows + row for g, row, _, _ in writes]),
                torch.tensor([start for _, _, start, _ in writes], dtype=torch.int32),
                torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32),
                torch.tensor([v for *_, values in writes for v in values], dtype=torch.int32))
            for g in range(num_groups):
                assert ours[g * rows : (g + 1) * rows].tolist() == theirs[g].gpu.tolist(), f"{backend} group {g}"


def test_row_moves_agree_with_vllms_v1_block_table():
    """vLLM's V1 runner keeps host block tables (vllm/v1/worker/block_table.py): add_row,
    append_row, clear_row, move_row (the vacated row is cleared) and swap_row, the moves a
    runner makes when it condenses and reorders its persistent batch. The same sequence through
    PersistentMappings (append_blocks, move_row, swap_rows, applied in one launch) gives the
    same ids and counts; past a row's count specops holds NULL where vLLM may keep old ids."""
    from vllm.v1.worker.block_table import MultiGroupBlockTable

    rng = random.Random(5)
    num_rows, block_sizes, widths = 6, [16, 8], [8, 16]
    theirs = MultiGroupBlockTable(num_rows, 64, False, CPU, block_sizes, widths)
    ours = PersistentMappings([MappingGroup(size) for size in block_sizes], max_num_reqs=num_rows,
                              max_num_blocks_per_req=widths, max_num_tokens=64)
    counts = [[0] * num_rows for _ in widths]
    stale = 0
    for step in range(60):
        action, row, other = rng.choice(["add", "append", "clear", "move", "swap"]), rng.randrange(num_rows), \
            rng.randrange(num_rows)
        if action in ("add", "append"):
            ids = tuple([rng.randrange(1, 1000) for _ in range(rng.randint(0, width - (0 if action == "add"
                                                                                        else counts[g][row])))]
                        for g, width in enumerate(widths))
            getattr(theirs, f"{action}_row")(ids, row)
            ours.append_blocks(row, list(ids), overwrite=action == "add")
            for g, group_ids in enumerate(ids):
                counts[g][row] = len(group_ids) + (0 if action == "add" else counts[g][row])
        elif action == "clear":
            theirs.clear_row(row)
            ours.append_blocks(row, [[] for _ in widths], overwrite=True)
            for g in range(len(widths)):
                counts[g][row] = 0
        elif action == "move" and row != other:
            theirs.move_row(row, other)
            ours.move_row(row, other)
            for g in range(len(widths)):
                counts[g][other], counts[g][row] = counts[g][row], 0
        elif action == "swap":
            theirs.swap_row(row, other)
            ours.swap_rows(row, other)
            for g in range(len(widths)):
                counts[g][row], counts[g][other] = counts[g][other], counts[g][row]
        if step % 5 == 4:
            ours.apply_staged()
            for g, table in enumerate(theirs.block_tables):
                assert ours.num_blocks[g].tolist() == table.num_blocks_per_row.tolist() == counts[g], f"step {step}"
                for r in range(num_rows):
                    count = counts[g][r]
                    assert ours.source_block_tables[g][r, :count].tolist() == table.block_table.np[r, :count].tolist()
                    assert (ours.source_block_tables[g][r, count:] == NULL).all()
                    stale += int((table.block_table.np[r, count:widths[g]] != NULL).sum())
    assert stale > 0  # vLLM kept old ids past some count (a moved-over or shortened row)
