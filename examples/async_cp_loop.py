"""A speculative-decoding loop on two context-parallel ranks, three KV-cache groups.

Each step a plain-Python scheduler admits and retires requests, splits long prompts into
chunks, and schedules 1 + 4 tokens for every decoding request (its last sampled token and
its 4 drafts). Acceptance is asynchronous, as in a runner that schedules step N+1 while step
N still runs: the scheduler counts every draft as accepted, and only the device knows how
many were. On each rank, `PersistentMappings.prepare_step` then corrects the counts, writes
positions, seq_lens, every group's slot mapping and gathered block table, and
`PersistentMappings.draft_inputs` hands the drafting layer those buffers keyed by group name.

Every step is checked against a ground truth computed here in plain Python (the true counts,
positions, seq_lens, slots and block tables), on both ranks.

The groups: "full" (full attention, block size 16, its KV sharded across the 2 ranks),
"swa" (sliding window of 32, block size 8, every rank stores every token) and "dspark" (a
DSpark group, block size 4: its indices address global slots, so it is never sharded).

The bookkeeping half of the step (input ids, sampler counts, request state, next tokens, the
later draft steps) runs in examples/runner_step.py.

Run: python examples/async_cp_loop.py [--steps 100] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import random

import torch

import specops
from specops import MappingGroup, PersistentMappings, drafting

NUM_RANKS = 2
NUM_DRAFTS = 4  # draft tokens per decoding request and step
CHUNK = 16  # the largest prefill chunk
MAX_NUM_REQS = 6
MAX_NUM_TOKENS = 64
MAX_SEQ_LEN = 112  # prompt + generated tokens, lookahead included


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    block_size: int
    cp_sharded: bool
    sliding_window: int | None = None
    dspark: bool = False


GROUPS = [
    Group("full", block_size=16, cp_sharded=True),
    Group("swa", block_size=8, cp_sharded=False, sliding_window=32),
    Group("dspark", block_size=4, cp_sharded=False, sliding_window=16, dspark=True),
]


def columns_needed(group: Group, num_tokens: int) -> int:
    """Block-table columns that hold positions 0 .. num_tokens - 1 of one rank."""
    tokens_per_column = group.block_size * (NUM_RANKS if group.cp_sharded else 1)
    return -(-num_tokens // tokens_per_column)


@dataclasses.dataclass
class Request:
    row: int
    prompt_len: int
    target_len: int
    computed: int = 0  # true: tokens whose KV is written (the device's count)
    scheduled: int = 0  # the scheduler's count: every draft counted as accepted
    blocks: list[list[int]] = dataclasses.field(default_factory=lambda: [[] for _ in GROUPS])
    drafts: int = 0  # drafts scheduled last step (verified this step)

    @property
    def prefilling(self) -> bool:
        return self.scheduled < self.prompt_len


def expected_slot(group: Group, blocks: list[int], position: int, rank: int) -> int:
    """The slot of `position` on `rank` (PAD where another rank stores it): positions run
    through the ranks one token at a time inside a block column's virtual block."""
    if not group.cp_sharded:
        return blocks[position // group.block_size] * group.block_size + position % group.block_size
    virtual_block, offset = divmod(position, group.block_size * NUM_RANKS)
    if offset % NUM_RANKS != rank:
        return specops.PAD_SLOT_ID
    local = offset // NUM_RANKS
    return blocks[virtual_block] * group.block_size + local


class Rank:
    """One rank's persistent state: its mappings, its device counts, its draft builders."""

    def __init__(self, rank: int, model: drafting.ModelConfig):
        groups = [MappingGroup(g.block_size, cp_sharded=g.cp_sharded, name=g.name,
                               sliding_window_reach=(g.sliding_window - 1) if g.sliding_window else 0)
                  for g in GROUPS]
        widths = [columns_needed(g, MAX_SEQ_LEN) for g in GROUPS]
        self.rank = rank
        self.mappings = PersistentMappings(groups, max_num_reqs=MAX_NUM_REQS, max_num_blocks_per_req=widths,
                                           max_num_tokens=MAX_NUM_TOKENS, cp_world_size=NUM_RANKS, cp_rank=rank)
        # Batch-indexed, in the previous step's layout on entry (prepare_step corrects them).
        self.num_computed_tokens = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
        self.num_accepted_tokens = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
        self.builders = [
            drafting.DraftMetadataBuilder(model, drafting.GroupConfig(g.name, block_size=g.block_size,
                                                                      storage_block_size=g.block_size,
                                                                      sliding_window=g.sliding_window, dspark=g.dspark),
                                          max_num_reqs=MAX_NUM_REQS, max_num_tokens=MAX_NUM_TOKENS)
            for g in GROUPS]


class Loop:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        rope = torch.rand(MAX_SEQ_LEN + 8, 8, generator=torch.Generator().manual_seed(seed))
        self.ranks = [Rank(rank, drafting.ModelConfig(num_heads_q=8, num_heads_kv=1, head_dim=64,
                                                      rope_cos_sin_cache=rope, num_speculative_tokens=NUM_DRAFTS,
                                                      cp_size=NUM_RANKS, cp_rank=rank, num_cube_cores=4,
                                                      num_vector_cores=8, soc_version="Ascend910B1"))
                      for rank in range(NUM_RANKS)]
        self.requests: list[Request] = []
        self.previous_batch: list[Request] = []
        self.previous_valid: list[int] = []  # valid sampled tokens of each previous batch row
        self.previous_drafts: list[int] = []  # drafts each previous batch row verified
        self.next_block = [1] * len(GROUPS)  # block 0 is the null block
        self.finished = 0
        self.steps_with_drafts = 0

    # ------------------------------------------------------------------ the scheduler

    def _stage(self, request: Request, ids: list[list[int]], overwrite: bool = False) -> None:
        for rank in self.ranks:
            rank.mappings.append_blocks(request.row, ids, overwrite=overwrite)

    def _admit_and_retire(self) -> None:
        for request in [r for r in self.requests if r.computed >= r.target_len]:
            self.requests.remove(request)
            self._stage(request, [[] for _ in GROUPS], overwrite=True)  # the row is freed
            self.finished += 1
        free_rows = sorted(set(range(MAX_NUM_REQS)) - {r.row for r in self.requests})
        while free_rows and self.rng.random() < 0.5:
            prompt_len = self.rng.randint(3, 50)
            target = prompt_len + self.rng.randint(5, MAX_SEQ_LEN - prompt_len - 2 * (1 + NUM_DRAFTS))
            self.requests.append(Request(free_rows.pop(self.rng.randrange(len(free_rows))), prompt_len, target))

    def _allocate(self, request: Request, query_len: int) -> None:
        """Blocks for every position the step may write: up to the scheduler's count (which
        is never below the true one) plus the query, draft positions included."""
        ids = []
        for g, group in enumerate(GROUPS):
            missing = columns_needed(group, request.scheduled + query_len) - len(request.blocks[g])
            new = list(range(self.next_block[g], self.next_block[g] + max(missing, 0)))
            self.next_block[g] += len(new)
            request.blocks[g] += new
            ids.append(new)
        self._stage(request, ids)

    def step(self) -> None:
        self._admit_and_retire()
        batch = list(self.requests)
        self.rng.shuffle(batch)  # rows of the batch move from step to step
        batch = batch[: self.rng.randint(max(len(batch) - 1, 0), len(batch))]  # one may sit out
        for request in self.requests:
            if request not in batch:  # the host learns its true count while it sits out
                request.scheduled = request.computed
        query_lens = []
        for request in batch:
            if request.prefilling:
                query_len = min(self.rng.randint(1, CHUNK), request.prompt_len - request.scheduled)
            else:
                query_len = 1 + request.drafts
            query_lens.append(query_len)
            self._allocate(request, query_len)
        for rank in self.ranks:
            rank.mappings.apply_staged()

        # What the device knows from the previous step, in its batch layout.
        previous_row = {id(request): p for p, request in enumerate(self.previous_batch)}
        prev_positions = [previous_row.get(id(request), -1) for request in batch]
        valid = self.previous_valid or [0]
        prev_drafts = self.previous_drafts or [0]
        cpu_counts = [request.scheduled for request in batch]
        num_reqs, num_tokens = len(batch), sum(query_lens)
        num_tokens_padded = -(-num_tokens // 8) * 8
        query_start_loc = torch.tensor([0] + [sum(query_lens[: i + 1]) for i in range(num_reqs)], dtype=torch.int32)
        idx_mapping = torch.tensor([request.row for request in batch], dtype=torch.int32)

        # The ground truth: a request that sat out a step (or was prefilling) has an exact host
        # count; one that drafted last step continues from the device's count.
        for request, p in zip(batch, prev_positions):
            if p < 0 or prev_drafts[p] == 0:
                request.computed = request.scheduled
        positions = [request.computed + i for request, q in zip(batch, query_lens) for i in range(q)]
        seq_lens = [request.computed + q for request, q in zip(batch, query_lens)]

        for rank in self.ranks:
            self._run_rank(rank, batch, query_lens, positions, seq_lens, query_start_loc, idx_mapping,
                           torch.tensor(prev_positions, dtype=torch.int32), torch.tensor(valid, dtype=torch.int32),
                           torch.tensor(prev_drafts, dtype=torch.int32), torch.tensor(cpu_counts, dtype=torch.int32),
                           num_tokens_padded)

        # The step runs: prefill chunks advance; decodes verify their drafts, accept some, sample
        # one token and draft again. The scheduler counts every draft as accepted.
        self.previous_valid, self.previous_drafts = [], []
        for request, query_len in zip(batch, query_lens):
            self.previous_drafts.append(0 if request.prefilling else request.drafts)
            if request.prefilling:
                request.scheduled += query_len
                request.computed = request.scheduled
                done = not request.prefilling
                request.drafts = NUM_DRAFTS if done else 0
                self.previous_valid.append(1 if done else 0)
            else:
                accepted = self.rng.randint(0, request.drafts)
                self.previous_valid.append(1 + accepted)
                # The host learns the previous step's outcome now, this one's only after it.
                request.scheduled = request.computed + query_len
                request.computed += 1 + accepted
                request.drafts = NUM_DRAFTS
                self.steps_with_drafts += 1
        self.previous_batch = batch

    # ------------------------------------------------------------------ one rank's step

    def _run_rank(self, rank: Rank, batch, query_lens, positions, seq_lens, query_start_loc, idx_mapping,
                  prev_positions, valid, prev_drafts, cpu_counts, num_tokens_padded) -> None:
        num_reqs, num_tokens = len(batch), len(positions)
        mappings = rank.mappings
        step = mappings.prepare_step(rank.num_computed_tokens, rank.num_accepted_tokens, prev_positions, valid,
                                     prev_drafts, cpu_counts, query_start_loc, idx_mapping,
                                     num_reqs_padded=num_reqs, num_tokens_padded=num_tokens_padded)
        where = f"rank {rank.rank}"
        assert step.positions[:num_tokens].tolist() == positions, f"{where}: positions"
        assert step.seq_lens.tolist() == seq_lens, f"{where}: seq_lens"
        for g, group in enumerate(GROUPS):
            slots = [expected_slot(group, request.blocks[g], position, rank.rank)
                     for request, q, start in zip(batch, query_lens, query_start_loc.tolist())
                     for position in positions[start : start + q]]
            slots += [specops.PAD_SLOT_ID] * (num_tokens_padded - num_tokens)
            assert step.slot_mappings[group.name][:num_tokens_padded].tolist() == slots, f"{where}: {group.name} slots"
            width = mappings.max_num_blocks_per_group[g]
            table = [request.blocks[g] + [specops.NULL_BLOCK_ID] * (width - len(request.blocks[g]))
                     for request in batch]
            assert step.block_tables[group.name][:num_reqs].tolist() == table, f"{where}: {group.name} table"

        # The drafting layer reads the same buffers, by group name.
        seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
        common = mappings.draft_inputs(query_start_loc, query_start_loc.clone(), seq_lens_cpu, num_reqs=num_reqs,
                                       num_actual_tokens=num_tokens, num_input_tokens=num_tokens_padded)
        metas = drafting.build_draft_attn_metadata(rank.builders, common, draft_index=1)
        for group, meta in zip(GROUPS, metas):
            assert meta.input_positions[:num_tokens].tolist() == positions, f"{where}: {group.name} draft positions"
            slots = step.slot_mappings[group.name][:num_tokens].tolist()
            pairs = [[slot // group.block_size, slot % group.block_size] for slot in slots]
            assert meta.slot_mapping[:num_tokens].tolist() == pairs, f"{where}: {group.name} draft slot pairs"


def main(steps: int = 100, seed: int = 0) -> dict[str, int]:
    """Runs the loop on the native backend; returns what it went through."""
    loop = Loop(seed)
    with specops.backend("native"):
        for _ in range(steps):
            loop.step()
    return dict(steps=steps, finished=loop.finished, decode_rows=loop.steps_with_drafts,
                blocks=sum(loop.next_block) - len(GROUPS))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    print(main(arguments.steps, arguments.seed))
