"""PersistentMappings: in-place refresh of every group's captured buffers.

The ground truth is a plain-Python model of the scheduler (block lists per request row) and
compute_slot_mapping's slot formula written out again here, independent of the ops and their
references.
"""

from __future__ import annotations

import ctypes
import dataclasses
import random

import numpy as np
import pytest
import torch
from conftest import BACKENDS
from host_syncs import OpLog
from strategies import assert_same

import specops
import specops.persistent.staging as staging_module
from specops import MappingGroup, PersistentMappings

NULL = specops.NULL_BLOCK_ID
PAD = specops.PAD_SLOT_ID

# A full group, one with two kernel blocks per allocation block, a sliding-window group that
# every CP rank stores, and a group without a slot mapping; each with its own table width.
GROUPS = [MappingGroup(16), MappingGroup(4, blocks_per_kv_block=2),
          MappingGroup(8, cp_sharded=False, sliding_window_reach=12), MappingGroup(32, slot_mapping_enabled=False)]
CP_CONFIGS = [(1, 0, 1), (2, 1, 2), (4, 2, 4)]  # (cp_world_size, cp_rank, cp_interleave)


@dataclasses.dataclass
class Step:
    idx_mapping: torch.Tensor
    query_start_loc: torch.Tensor
    positions: torch.Tensor
    num_reqs_padded: int
    num_tokens_padded: int
    num_computed_tokens: torch.Tensor | None = None  # request-indexed first positions

    def refresh(self, mappings: PersistentMappings) -> None:
        mappings.refresh(self.idx_mapping, self.query_start_loc, self.positions,
                         num_reqs_padded=self.num_reqs_padded, num_tokens_padded=self.num_tokens_padded,
                         num_computed_tokens=self.num_computed_tokens)


class Scheduler:
    """Requests arrive, grow and finish on the rows of a PersistentMappings; the batch size
    rises and falls. Keeps the block ids of every (group, row) as Python lists."""

    def __init__(self, mappings: PersistentMappings, cp: tuple[int, int, int], seed: int, max_seq_len: int):
        self.mappings = mappings
        self.world, self.rank, self.interleave = cp
        self.rng = random.Random(seed)
        self.max_seq_len = max_seq_len
        self.blocks = [[[] for _ in range(mappings.max_num_reqs)] for _ in mappings.groups]
        self.seq_lens: dict[int, int] = {}  # running row -> tokens stored so far
        self.first_positions: dict[int, int] = {}  # row -> first position it scheduled last step
        self.next_block_id = 1
        self.step_index = 0

    def columns_needed(self, group: MappingGroup, seq_len: int) -> int:
        world = self.world if group.cp_sharded else 1
        tokens_per_allocation = group.block_size * group.blocks_per_kv_block * world
        return -(-seq_len // tokens_per_allocation) * group.blocks_per_kv_block

    def _new_ids(self, count: int) -> list[int]:
        ids = list(range(self.next_block_id, self.next_block_id + count))
        self.next_block_id += count
        return ids

    def _grow(self, row: int, seq_len: int, overwrite: bool = False) -> None:
        new_ids = []
        for g, group in enumerate(self.mappings.groups):
            have = 0 if overwrite else len(self.blocks[g][row])
            new_ids.append(self._new_ids(self.columns_needed(group, seq_len) - have))
        self.mappings.append_blocks(row, new_ids, overwrite=overwrite)
        for g, ids in enumerate(new_ids):
            self.blocks[g][row] = ids if overwrite else self.blocks[g][row] + ids

    def _finish(self, row: int) -> None:
        del self.seq_lens[row]
        self.mappings.append_blocks(row, [[] for _ in self.mappings.groups], overwrite=True)
        for g in range(len(self.mappings.groups)):
            self.blocks[g][row] = []

    def _move(self, src: int, dst: int) -> None:
        """The request on row src moves to the free row dst (a runner condensing its batch);
        src is left empty."""
        self.mappings.move_row(src, dst)
        self.seq_lens[dst] = self.seq_lens.pop(src)
        for g in range(len(self.mappings.groups)):
            self.blocks[g][dst], self.blocks[g][src] = self.blocks[g][src], []

    def _swap(self, a: int, b: int) -> None:
        self.mappings.swap_rows(a, b)
        seq_a, seq_b = self.seq_lens.pop(a, None), self.seq_lens.pop(b, None)
        if seq_b is not None:
            self.seq_lens[a] = seq_b
        if seq_a is not None:
            self.seq_lens[b] = seq_a
        for g in range(len(self.mappings.groups)):
            self.blocks[g][a], self.blocks[g][b] = self.blocks[g][b], self.blocks[g][a]

    def step(self, apply: bool = True) -> Step:
        rng, max_reqs = self.rng, self.mappings.max_num_reqs
        self.step_index += 1
        # A batch that swells and drains every ~40 steps, with jitter.
        phase = self.step_index % 40
        target = max(1, min(max_reqs, (phase if phase < 20 else 40 - phase) * max_reqs // 20 + rng.randint(-2, 2)))
        for row in list(self.seq_lens):
            if self.seq_lens[row] >= self.max_seq_len - 8 or (len(self.seq_lens) > target and rng.random() < 0.5):
                self._finish(row)
        free = [row for row in range(max_reqs) if row not in self.seq_lens]
        rng.shuffle(free)
        for row in free[: max(0, target - len(self.seq_lens))]:
            self.seq_lens[row] = rng.randint(0, 40)
            self._grow(row, self.seq_lens[row], overwrite=True)
            if rng.random() < 0.3:  # a stale row being reused: an overwrite that shrinks it
                self._grow(row, 0, overwrite=True)
                self._grow(row, self.seq_lens[row])
        for _ in range(rng.randint(0, 2)):  # the runner reorders and condenses its rows
            running = list(self.seq_lens)
            free = [row for row in range(max_reqs) if row not in self.seq_lens]
            if running and free and rng.random() < 0.5:
                self._move(rng.choice(running), rng.choice(free))
            elif running:
                self._swap(rng.choice(running), rng.randrange(max_reqs))

        rows = list(self.seq_lens)
        rng.shuffle(rows)
        batch = rows[: max(0, len(rows) - rng.randint(0, 2))]
        batch += [-1] * min(rng.randint(0, 2), max_reqs - len(batch))  # requests without a row
        rng.shuffle(batch)
        query_lens, positions = [], []
        # Rows outside the batch hold values the refresh must not read.
        first_positions = torch.randint(0, 1 << 20, (max_reqs,), dtype=torch.int32)
        for row in batch:
            if row < 0:
                query_len = rng.randint(0, 3)
                positions += [rng.randint(0, 20) for _ in range(query_len)]
            else:
                query_len = 1 + rng.randint(0, 7) * (rng.random() < 0.2)
                start = self.seq_lens[row]
                first_positions[row] = start
                self.first_positions[row] = start
                self.seq_lens[row] = start + query_len
                self._grow(row, start + query_len)
                positions += range(start, start + query_len)
            query_lens.append(query_len)
        if apply:
            self.mappings.apply_staged()

        query_start_loc = torch.zeros(len(batch) + 1, dtype=torch.int32)
        query_start_loc[1:] = torch.cumsum(torch.tensor(query_lens, dtype=torch.int32), 0)
        num_tokens = len(positions)
        return Step(
            idx_mapping=torch.tensor(batch, dtype=torch.int32 if self.step_index % 2 else torch.int64),
            query_start_loc=query_start_loc,
            positions=torch.tensor(positions, dtype=torch.int64),
            num_reqs_padded=min(max_reqs, len(batch) + rng.randint(0, 4)),
            num_tokens_padded=min(self.mappings.max_num_tokens, num_tokens + rng.randint(0, 9)),
            num_computed_tokens=first_positions if rng.random() < 0.8 else None,
        )

    # ------------------------------------------------------------------ ground truth

    def slot(self, g: int, row: int, position: int) -> int:
        group = self.mappings.groups[g]
        world, rank, interleave = (self.world, self.rank, self.interleave) if group.cp_sharded else (1, 0, 1)
        virtual_block, offset = divmod(position, group.block_size * group.blocks_per_kv_block * world)
        if (offset // interleave) % world != rank:
            return PAD
        local_offset = (offset // (world * interleave)) * interleave + offset % interleave
        column = virtual_block * group.blocks_per_kv_block + local_offset // group.block_size
        return self.blocks[g][row][column] * group.block_size + local_offset % group.block_size

    def expected_table(self, g: int, step: Step) -> list[list[int]]:
        group = self.mappings.groups[g]
        width = self.mappings.max_num_blocks_per_group[g]
        rows = step.idx_mapping.tolist() + [-1] * (step.num_reqs_padded - step.idx_mapping.numel())
        # Sliding-window masking, only with the counts and never under CP.
        masking = group.sliding_window_reach > 0 and step.num_computed_tokens is not None and self.world == 1
        table = []
        for row in rows:
            ids = list(self.blocks[g][row]) if row >= 0 else []
            if masking and row >= 0:
                below = max(self.first_positions[row] - group.sliding_window_reach, 0) // group.block_size
                ids[:below] = [NULL] * min(below, len(ids))
            table.append(ids + [NULL] * (width - len(ids)))
        return table

    def expected_slots(self, g: int, step: Step) -> list[int]:
        if not self.mappings.groups[g].slot_mapping_enabled:
            return [PAD] * step.num_tokens_padded
        qsl, positions = step.query_start_loc.tolist(), step.positions.tolist()
        slots = []
        for r, row in enumerate(step.idx_mapping.tolist()):
            for position in positions[qsl[r] : qsl[r + 1]]:
                slots.append(PAD if row < 0 else self.slot(g, row, position))
        return slots + [PAD] * (step.num_tokens_padded - len(slots))

    def check_sources(self) -> None:
        for g in range(len(self.mappings.groups)):
            width = self.mappings.max_num_blocks_per_group[g]
            counts = [len(ids) for ids in self.blocks[g]]
            assert self.mappings.num_blocks[g].tolist() == counts, f"num_blocks[{g}]"
            assert self.mappings.staged_num_blocks[g].tolist() == counts, f"staged_num_blocks[{g}]"
            expected = [ids + [NULL] * (width - len(ids)) for ids in self.blocks[g]]
            assert self.mappings.source_block_tables[g].tolist() == expected, f"source_block_tables[{g}]"

    def check_captured(self, step: Step, tables: list[torch.Tensor], slots: list[torch.Tensor]) -> None:
        for g in range(len(self.mappings.groups)):
            got = tables[g][: step.num_reqs_padded].tolist()
            assert got == self.expected_table(g, step), f"block_tables[{g}] at step {self.step_index}"
            got = slots[g][: step.num_tokens_padded].tolist()
            assert got == self.expected_slots(g, step), f"slot_mappings[{g}] at step {self.step_index}"


MAX_SEQ_LEN = 160


# Each group's width: the columns MAX_SEQ_LEN tokens need in it, with room to spare.
WIDTHS = [MAX_SEQ_LEN // 16 + 2, MAX_SEQ_LEN // 4, MAX_SEQ_LEN // 8 + 1, MAX_SEQ_LEN // 32 + 1]


def make_mappings(cp: tuple[int, int, int], *, max_num_reqs: int = 12, max_num_tokens: int = 128) -> PersistentMappings:
    world, rank, interleave = cp
    return PersistentMappings(GROUPS, max_num_reqs=max_num_reqs, max_num_blocks_per_req=WIDTHS,
                              max_num_tokens=max_num_tokens, cp_world_size=world, cp_rank=rank,
                              cp_interleave=interleave)


def all_buffers(mappings: PersistentMappings) -> list[torch.Tensor]:
    return [*mappings.source_block_tables, *mappings.num_blocks, *mappings.block_tables, *mappings.slot_mappings]


@pytest.mark.parametrize("cp", CP_CONFIGS)
def test_many_refreshes_match_a_fresh_computation(backend, cp):
    steps = 240 if backend == "native" else 30
    mappings = make_mappings(cp)
    addresses = [t.data_ptr() for t in all_buffers(mappings)]
    scheduler = Scheduler(mappings, cp, seed=len(backend) * 31 + cp[0], max_seq_len=MAX_SEQ_LEN)
    batch_sizes = set()
    for _ in range(steps):
        step = scheduler.step()
        step.refresh(mappings)
        batch_sizes.add(step.idx_mapping.numel())
        assert [t.data_ptr() for t in all_buffers(mappings)] == addresses
        scheduler.check_sources()
        scheduler.check_captured(step, mappings.block_tables, mappings.slot_mappings)
    assert len(batch_sizes) >= 8  # the batch really grew and shrank


def test_hand_computed():
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(4, 2, cp_sharded=False)], max_num_reqs=4,
                                  max_num_blocks_per_req=6, max_num_tokens=10, cp_world_size=2, cp_rank=1)
    mappings.append_blocks(0, [[5, 6], [1, 2, 3]])
    mappings.append_blocks(2, [[7], [4]])
    mappings.append_blocks(0, [[9], [8]])
    assert mappings.num_blocks[0].tolist() == [0, 0, 0, 0]  # staged, not applied yet
    mappings.apply_staged()
    assert mappings.num_blocks[0].tolist() == [3, 0, 1, 0]
    assert mappings.num_blocks[1].tolist() == [4, 0, 1, 0]
    assert mappings.source_block_tables[0][0].tolist() == [5, 6, 9, 0, 0, 0]
    mappings.refresh(torch.tensor([2, 0], dtype=torch.int32), torch.tensor([0, 1, 5], dtype=torch.int32),
                     torch.tensor([3, 10, 11, 12, 13]), num_reqs_padded=3, num_tokens_padded=7)
    assert mappings.block_tables[0][:3].tolist() == [[7, 0, 0, 0, 0, 0], [5, 6, 9, 0, 0, 0], [0] * 6]
    assert mappings.block_tables[1][:3].tolist() == [[4, 0, 0, 0, 0, 0], [1, 2, 3, 8, 0, 0], [0] * 6]
    # Group 0, W = 2, rank 1: odd positions are local; local offset = position // 2.
    # Position 3 of row 2 -> block 7, offset 1; 11 -> block 5, offset 5; 13 -> offset 6.
    assert mappings.slot_mappings[0][:7].tolist() == [113, PAD, 85, PAD, 86, PAD, PAD]
    # Group 1 is not sharded: position 3 of row 2 -> block 4 slot 19; 10, 11 -> block 3 (14, 15);
    # 12, 13 -> column 3, block 8 (32, 33).
    assert mappings.slot_mappings[1][:7].tolist() == [19, 14, 15, 32, 33, PAD, PAD]

    mappings.append_blocks(0, [[8], [7, 7]], overwrite=True)
    mappings.apply_staged()
    assert mappings.source_block_tables[0][0].tolist() == [8, 0, 0, 0, 0, 0]  # old tail cleared
    assert mappings.source_block_tables[1][0].tolist() == [7, 7, 0, 0, 0, 0]
    assert mappings.num_blocks[0].tolist() == [1, 0, 1, 0]

    mappings.fill_dummy()
    for table, slots in zip(mappings.block_tables, mappings.slot_mappings):
        assert (table == NULL).all() and (slots == PAD).all()
    assert mappings.num_blocks[0].tolist() == [1, 0, 1, 0]  # fill_dummy leaves the requests' state alone


def test_per_group_widths_and_the_append_past_a_width():
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(4)], max_num_reqs=2, max_num_blocks_per_req=[2, 5],
                                  max_num_tokens=4)
    assert [tuple(t.shape) for t in mappings.source_block_tables] == [(2, 2), (2, 5)]
    assert [tuple(t.shape) for t in mappings.block_tables] == [(2, 2), (2, 5)]
    assert all(t.is_contiguous() for t in mappings.source_block_tables + mappings.block_tables)
    mappings.append_blocks(1, [[7, 8], [1, 2, 3, 4, 5]])
    with pytest.raises(ValueError, match=r"block_ids\[0\] would give row 1 3 blocks, more than the width of group 0 "
                                         r"\(max_num_blocks_per_req\[0\] = 2\)"):
        mappings.append_blocks(1, [[9], []])
    mappings.apply_staged()
    assert [t.tolist() for t in mappings.source_block_tables] == [[[0, 0], [7, 8]], [[0] * 5, [1, 2, 3, 4, 5]]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 2], [0, 5]]
    mappings.refresh(torch.tensor([1]), torch.tensor([0, 2], dtype=torch.int32), torch.tensor([17, 18]),
                     num_reqs_padded=2, num_tokens_padded=3)
    assert [t.tolist() for t in mappings.block_tables] == [[[7, 8], [0, 0]], [[1, 2, 3, 4, 5], [0] * 5]]
    # Position 17: group 0 block 8 offset 1; group 1 (block size 4) column 4 = id 5, offset 1.
    assert [t[:3].tolist() for t in mappings.slot_mappings] == [[129, 130, PAD], [21, 22, PAD]]


def test_move_and_swap_rows_are_staged_like_appends(backend):
    mappings = PersistentMappings([MappingGroup(4), MappingGroup(8)], max_num_reqs=4, max_num_blocks_per_req=[3, 2],
                                  max_num_tokens=4)
    mappings.append_blocks(0, [[1, 2, 3], [4]])
    mappings.append_blocks(1, [[5], [6, 7]])
    mappings.apply_staged()
    mappings.move_row(1, 3)  # row 1 is left empty
    mappings.swap_rows(0, 2)
    assert [t.tolist() for t in mappings.num_blocks] == [[3, 1, 0, 0], [1, 2, 0, 0]]  # nothing applied yet
    assert mappings.staged_num_blocks.tolist() == [[0, 0, 3, 1], [0, 0, 1, 2]]
    mappings.append_blocks(3, [[8], []])  # a staged append, then a move: the move takes it along
    mappings.move_row(3, 1)
    mappings.move_row(1, 3)
    mappings.apply_staged()
    assert mappings.source_block_tables[0].tolist() == [[0, 0, 0], [0, 0, 0], [1, 2, 3], [5, 8, 0]]
    assert mappings.source_block_tables[1].tolist() == [[0, 0], [0, 0], [4, 0], [6, 7]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 0, 3, 2], [0, 0, 1, 2]]
    mappings.swap_rows(3, 2)
    mappings.move_row(0, 3)  # an empty row moved over a full one: the full one is cleared
    mappings.apply_staged()
    assert mappings.source_block_tables[0].tolist() == [[0, 0, 0], [0, 0, 0], [5, 8, 0], [0, 0, 0]]
    assert mappings.source_block_tables[1].tolist() == [[0, 0], [0, 0], [6, 7], [0, 0]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 0, 2, 0], [0, 0, 2, 0]]


@pytest.mark.parametrize("call,argument", [("move_row(4, 0)", "src"), ("move_row(0, -1)", "dst"),
                                           ("swap_rows(-1, 0)", "a"), ("swap_rows(0, 4)", "b")])
def test_move_and_swap_reject_rows_outside_the_table_and_stage_nothing(call, argument):
    mappings = PersistentMappings([MappingGroup(4)], max_num_reqs=4, max_num_blocks_per_req=2, max_num_tokens=4)
    mappings.append_blocks(0, [[1]])
    mappings.apply_staged()
    with pytest.raises(ValueError, match=rf"{argument} must be in \[0, max_num_reqs = 4\)"):
        eval(f"mappings.{call}")
    assert mappings.num_staged_writes == 0


def test_sliding_window_masking_in_refresh():
    # Group 1 keeps a window: its attention reads 6 tokens below a request's first position.
    groups = [MappingGroup(4), MappingGroup(4, sliding_window_reach=6)]
    mappings = PersistentMappings(groups, max_num_reqs=3, max_num_blocks_per_req=5, max_num_tokens=4)
    mappings.append_blocks(2, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    mappings.apply_staged()
    counts = torch.tensor([0, 99, 17], dtype=torch.int32)  # request-indexed; row 2 starts at position 17
    mappings.refresh(torch.tensor([2]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([17]),
                     num_reqs_padded=1, num_tokens_padded=1, num_computed_tokens=counts)
    # max(17 - 6, 0) // 4 = 2 leading entries of the window group's row are NULL; the full
    # group and the slot mappings are untouched by the window.
    assert mappings.block_tables[0][0].tolist() == [1, 2, 3, 4, 5]
    assert mappings.block_tables[1][0].tolist() == [0, 0, 8, 9, 10]
    assert [int(t[0]) for t in mappings.slot_mappings] == [5 * 4 + 1, 10 * 4 + 1]
    mappings.refresh(torch.tensor([2]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([17]),
                     num_reqs_padded=1, num_tokens_padded=1)  # without the counts: no masking
    assert mappings.block_tables[1][0].tolist() == [6, 7, 8, 9, 10]


def test_sliding_window_masking_is_off_under_cp():
    groups = [MappingGroup(4, cp_sharded=False, sliding_window_reach=1)]
    mappings = PersistentMappings(groups, max_num_reqs=1, max_num_blocks_per_req=3, max_num_tokens=2, cp_world_size=2)
    mappings.append_blocks(0, [[1, 2, 3]])
    mappings.apply_staged()
    mappings.refresh(torch.tensor([0]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([11]),
                     num_computed_tokens=torch.tensor([11], dtype=torch.int32))
    assert mappings.block_tables[0][0].tolist() == [1, 2, 3]


def test_a_group_without_slot_mapping_gets_pad_and_its_table_is_never_read():
    # Group 1's rows hold one block: position 40 is far past them, which the native slot
    # mapping would reject, but the group has no slot mapping.
    groups = [MappingGroup(16), MappingGroup(4, slot_mapping_enabled=False)]
    mappings = PersistentMappings(groups, max_num_reqs=2, max_num_blocks_per_req=[4, 1], max_num_tokens=4)
    mappings.append_blocks(0, [[1, 2, 3], [9]])
    mappings.apply_staged()
    with specops.backend("native"):
        mappings.refresh(torch.tensor([0]), torch.tensor([0, 2], dtype=torch.int32), torch.tensor([40, 41]))
    assert mappings.slot_mappings[0].tolist() == [3 * 16 + 8, 3 * 16 + 9, PAD, PAD]
    assert mappings.slot_mappings[1].tolist() == [PAD] * 4
    assert mappings.block_tables[1].tolist() == [[9], [0]]  # its block table is still gathered


def test_overlapping_stages_of_one_row_apply_in_order(backend):
    """Once applied the earlier writes itself at the overlap; now merged on the host, so nothing
    reaches the device before apply_staged(), as the docstring says."""
    mappings = PersistentMappings([MappingGroup(4)], max_num_reqs=2, max_num_blocks_per_req=8, max_num_tokens=4)
    mappings.append_blocks(1, [[1, 2, 3, 4, 5]])
    mappings.append_blocks(1, [[6]])
    mappings.append_blocks(1, [[10, 11]], overwrite=True)  # overlaps the pending writes
    mappings.append_blocks(1, [[12]])  # lands on the old tail being cleared
    mappings.append_blocks(0, [[20]])
    assert mappings.source_block_tables[0].unique().tolist() == [0] and mappings.num_blocks[0].tolist() == [0, 0]
    assert mappings.staged_num_blocks[0].tolist() == [1, 3]
    mappings.apply_staged()
    assert mappings.source_block_tables[0].tolist() == [[20] + [0] * 7, [10, 11, 12] + [0] * 5]
    assert mappings.num_blocks[0].tolist() == [1, 3]


def record_staged_launches(monkeypatch) -> list[list[tuple[int, int]]]:
    """The cells written by each apply_staged_writes call PersistentMappings makes, on whichever
    backend runs it (the Triton backend launches its kernel directly, past the dispatcher)."""
    launches: list[list[tuple[int, int]]] = []
    launch = staging_module.apply_staged_writes

    def recording(table, rows, starts, cu_lens, values):
        bounds = cu_lens.tolist()
        launches.append([(row, start + i) for k, (row, start) in enumerate(zip(rows.tolist(), starts.tolist()))
                         for i in range(bounds[k + 1] - bounds[k])])
        return launch(table, rows, starts, cu_lens, values)

    monkeypatch.setattr(staging_module, "apply_staged_writes", recording)
    return launches


def test_writes_of_one_launch_are_disjoint(backend, monkeypatch):
    """Device kernels apply one launch's writes in parallel, in no order; CPU backends (and the
    Triton interpreter, one program after another) apply them in order, so only this property
    shows that staging never relies on the order. Checked on the launches of every backend."""
    launches = record_staged_launches(monkeypatch)
    test_overlapping_stages_of_one_row_apply_in_order(backend)
    test_staging_past_its_capacity_grows_and_applies_in_order(backend)
    assert len(launches) == 2  # the two tests above apply once each: staging merges and grows
    mappings = make_mappings(CP_CONFIGS[0])
    scheduler = Scheduler(mappings, CP_CONFIGS[0], seed=2, max_seq_len=MAX_SEQ_LEN)
    steps = 40 if backend == "native" else 12  # the interpreter is slow
    for _ in range(steps):
        scheduler.step()
    scheduler.check_sources()
    assert len(launches) >= 2 + steps * 3 // 4
    for cells in launches:
        assert len(cells) == len(set(cells)), "two writes of one launch touch the same cell"


def test_packed_copy_path_applies_the_same_writes():
    """The staging path of device tensors (one packed host-to-device copy), run on CPU."""
    direct, packed = make_mappings(CP_CONFIGS[1], max_num_reqs=6), make_mappings(CP_CONFIGS[1], max_num_reqs=6)
    packed._staging.stage_through_copy(pin_memory=False)
    schedulers = [Scheduler(m, CP_CONFIGS[1], seed=4, max_seq_len=MAX_SEQ_LEN) for m in (direct, packed)]
    for _ in range(30):
        for scheduler in schedulers:
            scheduler.step()
        schedulers[1].check_sources()
        for a, b in zip(all_buffers(direct), all_buffers(packed)):
            assert_same(a, b)


def test_staging_past_its_capacity_grows_and_applies_in_order(backend):
    """Once flushed to the device when the host arrays filled up; they grow instead."""
    mappings = PersistentMappings([MappingGroup(1), MappingGroup(2)], max_num_reqs=3, max_num_blocks_per_req=40,
                                  max_num_tokens=4)
    for block_id in range(1, 35):
        mappings.append_blocks(0, [[block_id], []])
    mappings.append_blocks(0, [list(range(100, 130)), []], overwrite=True)
    for row in (1, 2):
        mappings.append_blocks(row, [list(range(200, 240)), list(range(300, 340))])
    assert mappings.num_blocks[0].tolist() == [0, 0, 0] and mappings.source_block_tables[0].unique().tolist() == [0]
    mappings.apply_staged()
    assert mappings.source_block_tables[1][1:].tolist() == [list(range(300, 340))] * 2
    assert mappings.source_block_tables[0][0].tolist() == list(range(100, 130)) + [0] * 10
    assert mappings.num_blocks[0].tolist() == [30, 40, 40]
    assert mappings.num_staged_writes == 0


def _recorded_view(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor over the memory at tensor's address, built from the address alone, the way a
    captured graph holds on to a buffer."""
    c_type = {torch.int32: ctypes.c_int32, torch.int64: ctypes.c_int64}[tensor.dtype]
    memory = (c_type * tensor.numel()).from_address(tensor.data_ptr())
    return torch.frombuffer(memory, dtype=tensor.dtype).view(tensor.shape)


def test_capture_simulation_reads_through_recorded_addresses():
    cp = CP_CONFIGS[1]
    mappings = make_mappings(cp)
    tables = [_recorded_view(t) for t in mappings.block_tables]  # "capture": addresses only
    slots = [_recorded_view(t) for t in mappings.slot_mappings]
    scheduler = Scheduler(mappings, cp, seed=3, max_seq_len=MAX_SEQ_LEN)
    for index in range(60):
        step = scheduler.step()
        if index % 10 == 9:  # a dummy run between real steps
            mappings.fill_dummy()
            assert all((t == NULL).all() for t in tables) and all((s == PAD).all() for s in slots)
        step.refresh(mappings)
        scheduler.check_captured(step, tables, slots)


def _staged_and_steps(mappings: PersistentMappings, count: int) -> list[Step]:
    scheduler = Scheduler(mappings, (1, 0, 1), seed=5, max_seq_len=MAX_SEQ_LEN)
    return [scheduler.step() for _ in range(count)]


def test_steady_state_allocates_nothing():
    with specops.backend("native"):
        mappings = make_mappings((1, 0, 1))
        steps = _staged_and_steps(mappings, 20)
        # Every row allocated in full, so that the earlier steps' positions stay inside their rows.
        for row in range(mappings.max_num_reqs):
            mappings.append_blocks(row, [list(range(1, width + 1)) for width in mappings.max_num_blocks_per_group],
                                   overwrite=True)
        mappings.apply_staged()
        steps[0].refresh(mappings)  # warm-up
        with OpLog() as counter:
            for step in steps:
                step.refresh(mappings)
            for row in range(mappings.max_num_reqs):
                mappings.append_blocks(row, [[1], [2, 3], [4], [5]], overwrite=True)
            mappings.move_row(0, 1)
            mappings.swap_rows(2, 3)
            mappings.apply_staged()
            mappings.fill_dummy()
    assert counter.ops, "the counter saw no op: it is not counting"
    assert counter.allocations() == []


def test_the_counter_sees_an_allocation():
    with OpLog() as counter:
        torch.zeros(3).add(1)
    assert len(counter.allocations()) == 2


def test_op_calls_do_not_grow_with_the_batch():
    with specops.backend("native"):
        mappings = make_mappings((2, 1, 2), max_num_reqs=48, max_num_tokens=400)
        scheduler = Scheduler(mappings, (2, 1, 2), seed=1, max_seq_len=MAX_SEQ_LEN)
        calls = {}
        for _ in range(40):
            step = scheduler.step(apply=False)
            launches = ["specops.apply_staged_writes.default"] if mappings.num_staged_writes else []
            with OpLog() as counter:
                mappings.apply_staged()
            assert [op for op in counter.ops if op.startswith("specops.")] == launches
            with OpLog() as counter:
                step.refresh(mappings)
            calls[step.idx_mapping.numel()] = [op for op in counter.ops if op.startswith("specops.")]
    assert max(calls) >= 4 * min(calls)
    # One host check of every mapped group first (a rejected refresh changes nothing), then every
    # mapped group's slot mapping, then one gather per group (a group without a slot mapping costs
    # one gather, and a fill, not a specops op). Under CP no window masks, so no gather goes first.
    mapped = sum(g.slot_mapping_enabled for g in GROUPS)
    expected = ["specops.check_slot_mapping_positions.default"] * (mapped > 1)
    expected += ["specops.compute_slot_mapping.default"] * mapped
    expected += ["specops.gather_block_tables.default"] * len(GROUPS)
    assert all(ops == expected for ops in calls.values())


def test_compiled_step_refreshes_and_reads_the_buffers():
    cp = CP_CONFIGS[1]
    eager, compiled_mappings = make_mappings(cp), make_mappings(cp)
    scheduler = Scheduler(eager, cp, seed=11, max_seq_len=MAX_SEQ_LEN)
    for _ in range(3):
        scheduler.step()

    def make_step(mappings):
        def run(idx_mapping, query_start_loc, positions, num_reqs_padded, num_tokens_padded):
            mappings.refresh(idx_mapping, query_start_loc, positions, num_reqs_padded=num_reqs_padded,
                             num_tokens_padded=num_tokens_padded)
            return [t[:num_reqs_padded].sum(dim=1) for t in mappings.block_tables] + [
                s[:num_tokens_padded] * 1 for s in mappings.slot_mappings]
        return run

    compiled = torch.compile(make_step(compiled_mappings), fullgraph=True, backend="aot_eager")
    eager_step = make_step(eager)
    for _ in range(3):
        step = scheduler.step()
        for g in range(len(GROUPS)):  # same source state in both
            compiled_mappings.source_block_tables[g].copy_(eager.source_block_tables[g])
            compiled_mappings.num_blocks[g].copy_(eager.num_blocks[g])
        args = (step.idx_mapping, step.query_start_loc, step.positions, step.num_reqs_padded, step.num_tokens_padded)
        for actual, expected in zip(compiled(*args), eager_step(*args)):
            assert_same(actual, expected)
        for actual, expected in zip(compiled_mappings.block_tables + compiled_mappings.slot_mappings,
                                    eager.block_tables + eager.slot_mappings):
            assert_same(actual, expected)


CONSTRUCTOR_ERRORS = [
    ("groups", dict(groups=[])),
    ("groups\\[1\\]", dict(groups=[MappingGroup(16), 16])),
    ("max_num_reqs", dict(max_num_reqs=0)),
    ("max_num_blocks_per_req", dict(max_num_blocks_per_req=0)),
    ("max_num_blocks_per_req", dict(max_num_blocks_per_req=[2, 2])),  # two widths, one group
    ("max_num_blocks_per_req\\[0\\]", dict(max_num_blocks_per_req=[0])),
    ("max_num_blocks_per_req", dict(max_num_blocks_per_req=2**30, max_num_reqs=4)),  # past int32 offsets
    ("max_num_tokens", dict(max_num_tokens=-1)),
    ("cp_world_size", dict(cp_world_size=0)),
    ("cp_rank", dict(cp_world_size=2, cp_rank=2)),
    ("cp_interleave", dict(cp_interleave=0)),
    ("cp_interleave", dict(cp_world_size=2, cp_interleave=32)),  # does not divide 16
]


@pytest.mark.parametrize("argument,change", CONSTRUCTOR_ERRORS,
                         ids=[f"{a}-{i}" for i, (a, _) in enumerate(CONSTRUCTOR_ERRORS)])
def test_constructor_rejects_bad_arguments(argument, change):
    call = dict(groups=[MappingGroup(16)], max_num_reqs=2, max_num_blocks_per_req=2, max_num_tokens=4)
    call.update(change)
    groups = call.pop("groups")
    with pytest.raises(ValueError, match=argument):
        PersistentMappings(groups, **call)


@pytest.mark.parametrize("argument,change", [("block_size", dict(block_size=0)),
                                             ("blocks_per_kv_block", dict(block_size=4, blocks_per_kv_block=0)),
                                             ("sliding_window_reach", dict(block_size=4, sliding_window_reach=-1))])
def test_mapping_group_rejects_bad_arguments(argument, change):
    with pytest.raises(ValueError, match=argument):
        MappingGroup(**change)


@pytest.mark.parametrize(
    "argument,row,block_ids",
    [("block_ids", 0, [[1]]), ("row", 2, [[1], [2]]), ("row", -1, [[1], [2]]), ("block_ids\\[1\\]", 0, [[1], [2, 3, 4]])],
)
def test_append_blocks_rejects_bad_input_and_stages_nothing(argument, row, block_ids):
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=2, max_num_blocks_per_req=3,
                                  max_num_tokens=4)
    mappings.append_blocks(0, [[9], [9]])
    with pytest.raises(ValueError, match=argument):
        mappings.append_blocks(row, block_ids)
    assert mappings.num_staged_writes == 4  # the earlier append: ids and count, per group
    mappings.apply_staged()
    assert [t.tolist() for t in mappings.num_blocks] == [[1, 0], [1, 0]]
    assert [t[0].tolist() for t in mappings.source_block_tables] == [[9, 0, 0], [9, 0, 0]]


@pytest.mark.parametrize("block_ids,message", [
    ([[9], [7.9]], r"block_ids\[1\]\[0\] must be an int, got float 7.9"),  # once stored as 7
    ([[9], [1, -2]], r"block_ids\[1\]\[1\] = -2 must be a block id in \[0, 2\^31 - 1\]"),
    ([[9], [2**31]], r"block_ids\[1\]\[0\] = 2147483648 must be a block id"),  # once an OverflowError
    ([[9], [True]], r"block_ids\[1\]\[0\] must be an int, got bool"),
    ([[9], torch.tensor([1.0])], r"block_ids\[1\] must be a 1-D integer tensor"),
    ([[9], "12"], r"block_ids\[1\] must be a list of ints"),
    ([[9], None], r"block_ids\[1\] must be a list of ints"),
])
def test_a_bad_id_in_any_group_stages_nothing(block_ids, message):
    """Once group 0's ids were staged before group 1's raised (with an error that did not name
    block_ids): the request got blocks in one group only."""
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=2, max_num_blocks_per_req=3,
                                  max_num_tokens=4)
    with pytest.raises(ValueError, match=message):
        mappings.append_blocks(0, block_ids)
    assert mappings.num_staged_writes == 0
    assert mappings.staged_num_blocks.tolist() == [[0, 0], [0, 0]]


def test_block_ids_may_be_numpy_ints_and_integer_tensors():
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=2, max_num_blocks_per_req=3,
                                  max_num_tokens=4)
    mappings.append_blocks(np.int64(1), [np.array([4, 5], dtype=np.int64), torch.tensor([6], dtype=torch.int32)])
    mappings.append_blocks(1, [[np.int32(7)], [0]])
    mappings.apply_staged()
    assert [t.tolist() for t in mappings.source_block_tables] == [[[0, 0, 0], [4, 5, 7]], [[0, 0, 0], [6, 0, 0]]]
    assert [t.tolist() for t in mappings.num_blocks] == [[0, 3], [0, 2]]


def test_a_refresh_one_group_rejects_changes_no_group():
    """Once group 0's buffers were rewritten, then group 1 raised: a captured graph would replay
    half a step. Position 12 fits group 0 (2 blocks of 16) but not group 1 (2 blocks of 4)."""
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(4)], max_num_reqs=2, max_num_blocks_per_req=2,
                                  max_num_tokens=4)
    mappings.append_blocks(0, [[3, 4], [5, 6]])
    mappings.apply_staged()
    mappings.fill_dummy()
    args = (torch.tensor([0], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32), torch.tensor([1, 12]))
    for backend in BACKENDS:
        before = [t.clone() for t in all_buffers(mappings)]
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match=r"position 12 of request 0 is beyond block_tables\[1\]"):
                    mappings.refresh(*args, num_reqs_padded=2, num_tokens_padded=4)
                for tensor, old in zip(all_buffers(mappings), before):
                    assert torch.equal(tensor, old)
                continue
            mappings.refresh(*args, num_reqs_padded=2, num_tokens_padded=4)  # device paths: PAD
        assert mappings.slot_mappings[0].tolist() == [49, 60, PAD, PAD], backend
        assert mappings.slot_mappings[1].tolist() == [21, PAD, PAD, PAD], backend


REFRESH_ERRORS = [
    ("num_reqs_padded", dict(num_reqs_padded=5)),  # past max_num_reqs
    ("num_reqs_padded", dict(num_reqs_padded=1)),  # fewer than R
    ("num_tokens_padded", dict(num_tokens_padded=9)),  # past max_num_tokens
    ("num_tokens_padded", dict(num_tokens_padded=2)),  # fewer than T
    ("idx_mapping", dict(idx_mapping=torch.tensor([0.0, 1.0]))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 1, 3]))),
    ("positions", dict(positions=torch.tensor([0.0, 1.0, 2.0]))),
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([0, 1, 2, 3]))),  # int64
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([0, 1, 2], dtype=torch.int32))),  # < max_num_reqs
]


@pytest.mark.parametrize("argument,change", REFRESH_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(REFRESH_ERRORS)])
def test_refresh_rejects_bad_input_and_writes_nothing(backend, argument, change):
    mappings = PersistentMappings([MappingGroup(16), MappingGroup(8)], max_num_reqs=4, max_num_blocks_per_req=3,
                                  max_num_tokens=8)
    mappings.append_blocks(1, [[4], [5]])
    mappings.apply_staged()
    call = dict(idx_mapping=torch.tensor([1, -1], dtype=torch.int32),
                query_start_loc=torch.tensor([0, 1, 3], dtype=torch.int32), positions=torch.tensor([3, 0, 1]),
                num_reqs_padded=4, num_tokens_padded=8)
    call.update(change)
    before = [t.clone() for t in all_buffers(mappings)]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        mappings.refresh(call.pop("idx_mapping"), call.pop("query_start_loc"), call.pop("positions"), **call)
    for tensor, old in zip(all_buffers(mappings), before):
        assert torch.equal(tensor, old)


def test_native_refresh_rejects_rows_past_the_tables():
    mappings = PersistentMappings([MappingGroup(16)], max_num_reqs=2, max_num_blocks_per_req=2, max_num_tokens=4)
    before = [t.clone() for t in all_buffers(mappings)]
    with pytest.raises(ValueError, match="idx_mapping"):
        mappings.refresh(torch.tensor([2]), torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0]))
    for tensor, old in zip(all_buffers(mappings), before):
        assert torch.equal(tensor, old)
