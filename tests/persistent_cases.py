"""Shared inputs of the PersistentMappings tests: the groups and CP configurations, and the
ground truth, a plain-Python model of the scheduler (block lists per request row) with
compute_slot_mapping's slot formula written out again here, independent of the ops and their
references."""

from __future__ import annotations

import dataclasses
import random

import torch

import specops
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
