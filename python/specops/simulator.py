"""A step simulator: a ground-truth model of an async spec-decode engine that drives specops.

The model keeps, per request, the true device count (tokens whose KV is valid) and, apart from
it, the scheduler's own count, which lags one step behind the device: step N is scheduled while
step N-1 runs, so the scheduler assumes every draft of N-1 is accepted and learns the truth only
before scheduling N+1. Requests arrive and finish, long prompts are prefilled in chunks (a
partial prefill is not a "previous row"), running requests are skipped now and then (they come
back as resumed rows) or preempted (their KV is dropped and recomputed), the batch is reordered
every step, decodes carry 0..K drafts whose acceptance is random, and each KV-cache group has a
paged block table that grows as requests grow.

Each step the simulator builds what a runner has (the device buffers in the previous step's
row layout, prev_positions, the previous valid counts and draft counts, the scheduler's counts)
and calls the ops as a runner would: correct_num_computed_tokens, then
prepare_positions_and_seq_lens, then compute_slot_mapping per group (or the fused
prepare_spec_decode_inputs), and correct_optimistic_seq_lens on the host. Everything they
produce is compared with the model, padding tails included; the first difference raises
SimulationMismatch. The slots of the model come from each request's own list of allocation
blocks (never a block table) and the placement math of specops.slot_math.

    stats = Simulator(SimulatorConfig(seed=0, num_steps=2000, cp_world_size=2, cp_rank=1)).run()

The ops run on the backend selected with specops.backend(...).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable

import numpy as np
import torch

from specops._constants import NULL_BLOCK_ID, PAD_SLOT_ID
from specops.ops import (
    compute_slot_mapping,
    correct_num_computed_tokens,
    correct_optimistic_seq_lens,
    prepare_positions_and_seq_lens,
    prepare_spec_decode_inputs,
)
from specops.persistent import MappingGroup
from specops.slot_math import kv_placement

CorrectFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]


NUMPY_DTYPES = {torch.int32: np.int32, torch.int64: np.int64}


class SimulationMismatch(AssertionError):
    """An op's output differs from the model's ground truth."""


@dataclasses.dataclass(frozen=True)
class SimulatorConfig:
    seed: int = 0
    num_steps: int = 2000
    max_num_reqs: int = 24  # batch rows, and block-table rows (one per live request)
    max_num_tokens: int = 256  # tokens scheduled per step at most
    num_speculative_tokens: int = 4  # K: a decode carries 0..K drafts
    max_prompt_len: int = 160
    max_prefill_chunk: int = 48  # longer prompts are prefilled in chunks
    max_model_len: int = 1024
    arrival_probability: float = 0.35  # per step, of admitting a request (tried twice per step)
    finish_probability: float = 0.02  # per running request and step
    skip_probability: float = 0.06  # a running request sits out a step and comes back resumed
    preempt_probability: float = 0.01  # a request that sat out loses its KV and recomputes
    acceptance_probability: float = 0.7  # each draft in turn, until the first rejection
    groups: tuple[MappingGroup, ...] = (MappingGroup(16), MappingGroup(8, blocks_per_kv_block=2, cp_sharded=False))
    cp_world_size: int = 1
    cp_rank: int = 0
    cp_interleave: int = 1
    fused: bool = False  # prepare_spec_decode_inputs instead of the unfused sequence
    positions_dtype: torch.dtype = torch.int64
    prev_positions_dtype: torch.dtype = torch.int32
    token_padding: int = 16  # num_tokens_padded rounds T up to this (graph-capture buckets)
    request_padding: int = 8
    device: str = "cpu"


@dataclasses.dataclass
class SimulationStats:
    steps: int = 0
    tokens: int = 0
    rows: int = 0
    continued_rows: int = 0  # rows whose count the device correction derived from the previous step
    moved_rows: int = 0  # continued rows whose batch row changed
    rejected_drafts: int = 0
    partial_prefills: int = 0
    resumed_rows: int = 0  # rows of requests that sat out the previous step
    preemptions: int = 0
    finished: int = 0
    max_batch: int = 0
    max_tokens: int = 0


@dataclasses.dataclass(eq=False)
class _Request:
    req_id: int
    slot: int  # its block-table row
    prefill_target: int  # tokens to prefill before decoding
    blocks: list[list[int]]  # per group: allocation block ids, one per virtual block
    computed: int = 0  # truth: tokens with valid KV on the device at the start of the next step
    host_computed: int = 0  # the scheduler's count: assumes the in-flight drafts are accepted
    last_step: int = -1
    last_continuable: bool = False  # ran last_step as a decode with drafts (the correction applies)
    last_valid: int = 0
    alive: bool = True


@dataclasses.dataclass
class _Row:
    req: _Request
    host_start: int  # the scheduler's count when it scheduled the row
    query_len: int
    drafts: int
    prefill: bool
    partial: bool


class Simulator:
    """Runs SimulatorConfig.num_steps steps; `correct_fn` replaces correct_num_computed_tokens
    (unfused mode) to show that a wrong correction is caught."""

    def __init__(self, config: SimulatorConfig, correct_fn: CorrectFn | None = None):
        if correct_fn is not None and config.fused:
            raise ValueError("correct_fn replaces the unfused correction; it cannot be used with fused=True")
        self.config = config
        self.correct_fn: CorrectFn = correct_fn or correct_num_computed_tokens
        self.rng = random.Random(config.seed)
        self.stats = SimulationStats()
        self.step_index = 0
        self.running: list[_Request] = []
        self.free_slots = list(range(config.max_num_reqs))
        self.next_req_id = 0
        self.pending: dict[int, list[tuple[_Request, int, int]]] = {}  # step -> (request, scheduled, advanced)
        self.prev_row_of: dict[int, int] = {}  # request id -> its row in the previous batch
        self.prev_num_rows = 0

        device = torch.device(config.device)
        self.device = device
        self.group_cp = [
            (config.cp_world_size, config.cp_rank, config.cp_interleave) if g.cp_sharded else (1, 0, 1)
            for g in config.groups
        ]
        self.virtual_block_sizes = [g.block_size * g.blocks_per_kv_block * cp[0]
                                    for g, cp in zip(config.groups, self.group_cp)]
        self.host_tables = [
            np.zeros((config.max_num_reqs, -(-config.max_model_len // vbs) * g.blocks_per_kv_block), dtype=np.int32)
            for g, vbs in zip(config.groups, self.virtual_block_sizes)
        ]
        blocks_per_group = [config.max_num_reqs * table.shape[1] for table in self.host_tables]
        self.free_blocks = [self.rng.sample(range(1, count + 1), count) for count in blocks_per_group]
        self.block_tables = [torch.from_numpy(table).to(device) for table in self.host_tables]

        # The runner's persistent device buffers.
        max_tokens_padded = config.max_num_tokens + config.token_padding
        int32 = dict(dtype=torch.int32, device=device)
        self.num_computed_tokens = torch.zeros(config.max_num_reqs, **int32)
        self.num_accepted_tokens = torch.zeros(config.max_num_reqs, **int32)
        self.valid_sampled_token_count = torch.zeros(config.max_num_reqs, **int32)
        self.prev_num_draft_tokens = torch.zeros(config.max_num_reqs, **int32)
        self.positions = torch.zeros(max_tokens_padded, dtype=config.positions_dtype, device=device)
        self.seq_lens = torch.zeros(config.max_num_reqs, **int32)
        self.slot_mappings = [torch.zeros(max_tokens_padded, dtype=torch.int64, device=device)
                              for _ in config.groups]
        # Host copies of the previous step's valid and draft counts (a runner copies them D2H).
        self.host_valid = np.zeros(0, dtype=np.int32)
        self.host_drafts = np.zeros(0, dtype=np.int32)

    # -- the engine ----------------------------------------------------------------------------

    def run(self) -> SimulationStats:
        for _ in range(self.config.num_steps):
            self.step()
        return self.stats

    def step(self) -> None:
        n = self.step_index
        self._deliver_results(n - 2)
        self._finish_and_preempt(n)
        self._admit()
        rows = self._schedule()
        self._grow_block_tables(rows)
        self._run_ops_and_check(n, rows)
        self._execute(n, rows)
        self.step_index += 1
        self.stats.steps += 1

    def _deliver_results(self, step: int) -> None:
        """The scheduler learns what step `step` really computed and drops its optimism."""
        for req, scheduled, advanced in self.pending.pop(step, []):
            if req.alive:
                req.host_computed -= scheduled - advanced

    def _release(self, req: _Request) -> None:
        for g, blocks in enumerate(req.blocks):
            self.free_blocks[g].extend(blocks)
            blocks.clear()
            self.host_tables[g][req.slot] = NULL_BLOCK_ID

    def _finish_and_preempt(self, n: int) -> None:
        config = self.config
        survivors = []
        for req in self.running:
            if (self.rng.random() < config.finish_probability
                    or req.host_computed + 1 + config.num_speculative_tokens > config.max_model_len):
                req.alive = False
                self._release(req)
                self.free_slots.append(req.slot)
                self.stats.finished += 1
                continue
            # Only a request that sat out the last step: every result of it is known.
            if req.last_step < n - 1 and req.computed > 0 and self.rng.random() < config.preempt_probability:
                assert req.host_computed == req.computed, "the scheduler's count is exact once all results are in"
                if req.computed >= req.prefill_target:
                    req.prefill_target = req.computed + 1  # recompute every token, the last sampled one too
                req.computed = req.host_computed = 0
                self._release(req)
                self.stats.preemptions += 1
            survivors.append(req)
        self.running = survivors

    def _admit(self) -> None:
        for _ in range(2):
            if self.free_slots and self.rng.random() < self.config.arrival_probability:
                slot = self.free_slots.pop(self.rng.randrange(len(self.free_slots)))
                prompt_len = self.rng.randint(1, self.config.max_prompt_len)
                blocks: list[list[int]] = [[] for _ in self.config.groups]
                self.running.append(_Request(self.next_req_id, slot, prompt_len, blocks))
                self.next_req_id += 1

    def _schedule(self) -> list[_Row]:
        config = self.config
        budget = config.max_num_tokens
        candidates = self.running[:]
        self.rng.shuffle(candidates)
        rows = []
        for req in candidates:
            if self.rng.random() < config.skip_probability:
                continue
            if req.host_computed < req.prefill_target:  # prefilling: the count is exact
                remaining = req.prefill_target - req.host_computed
                query_len = min(remaining, budget, self.rng.randint(1, config.max_prefill_chunk))
                drafts, prefill, partial = 0, True, query_len < remaining
            else:
                drafts = self.rng.randint(0, config.num_speculative_tokens)
                query_len, prefill, partial = 1 + drafts, False, False
                if query_len > budget:
                    continue
            if query_len == 0:
                continue
            budget -= query_len
            rows.append(_Row(req, req.host_computed, query_len, drafts, prefill, partial))
            req.host_computed += query_len  # optimistic: every draft accepted
        if self.rng.random() < 0.3:  # runners often put decodes first
            rows.sort(key=lambda row: row.prefill)
        return rows

    def _grow_block_tables(self, rows: list[_Row]) -> None:
        """Allocation blocks for every position the scheduler may write (its optimistic count)."""
        for row in rows:
            last_position = row.host_start + row.query_len - 1
            for g, group in enumerate(self.config.groups):
                blocks = row.req.blocks[g]
                needed = last_position // self.virtual_block_sizes[g] + 1
                while len(blocks) < needed:
                    block = self.free_blocks[g].pop()
                    column = len(blocks) * group.blocks_per_kv_block
                    kernel_blocks = block * group.blocks_per_kv_block + np.arange(group.blocks_per_kv_block)
                    self.host_tables[g][row.req.slot, column:column + group.blocks_per_kv_block] = kernel_blocks
                    blocks.append(block)

    def _execute(self, n: int, rows: list[_Row]) -> None:
        """The device runs step n: sampling decides how many drafts each row keeps."""
        valid = np.zeros(len(rows), dtype=np.int32)
        drafts = np.zeros(len(rows), dtype=np.int32)
        results = []
        for i, row in enumerate(rows):
            req = row.req
            if row.prefill:
                advanced = row.query_len
                valid[i] = 0 if row.partial else 1  # a partial prefill's sample is discarded
            else:
                accepted = 0
                while accepted < row.drafts and self.rng.random() < self.config.acceptance_probability:
                    accepted += 1
                valid[i] = 1 + accepted  # the accepted drafts and the bonus token
                advanced = 1 + accepted  # the input token and the accepted drafts now have valid KV
                self.stats.rejected_drafts += row.drafts - accepted
            drafts[i] = row.drafts
            req.computed += advanced
            req.last_step = n
            req.last_continuable = not row.prefill and row.drafts > 0
            req.last_valid = int(valid[i])
            results.append((req, row.query_len, advanced))
        self.pending[n] = results
        self.valid_sampled_token_count[:len(rows)] = torch.from_numpy(valid)
        self.prev_num_draft_tokens[:len(rows)] = torch.from_numpy(drafts)
        self.host_valid, self.host_drafts = valid, drafts
        self.prev_row_of = {row.req.req_id: i for i, row in enumerate(rows) if not row.partial}
        self.prev_num_rows = len(rows)

    # -- the runner and the check ----------------------------------------------------------------

    def _run_ops_and_check(self, n: int, rows: list[_Row]) -> None:
        config = self.config
        device = self.device
        num_reqs = len(rows)
        query_lens = np.array([row.query_len for row in rows], dtype=np.int32)
        query_start_loc = np.zeros(num_reqs + 1, dtype=np.int32)
        np.cumsum(query_lens, out=query_start_loc[1:])
        num_tokens = int(query_start_loc[-1])
        num_tokens_padded = -(-num_tokens // config.token_padding) * config.token_padding
        num_reqs_padded = min(config.max_num_reqs, -(-num_reqs // config.request_padding) * config.request_padding)
        prev_positions = np.array([self.prev_row_of.get(row.req.req_id, -1) for row in rows],
                                  dtype=NUMPY_DTYPES[config.prev_positions_dtype])
        host_counts = np.array([row.host_start for row in rows], dtype=np.int32)
        idx_mapping = np.array([row.req.slot for row in rows], dtype=np.int32)

        prev_positions_t = torch.from_numpy(prev_positions).to(device)
        query_start_loc_t = torch.from_numpy(query_start_loc).to(device)
        host_counts_t = torch.from_numpy(host_counts).to(device)
        idx_mapping_t = torch.from_numpy(idx_mapping).to(device)
        for table, host_table in zip(self.block_tables, self.host_tables):
            if table.device.type != "cpu" or table.data_ptr() != host_table.ctypes.data:
                table.copy_(torch.from_numpy(host_table))
        valid = self.valid_sampled_token_count[:self.prev_num_rows]
        drafts = self.prev_num_draft_tokens[:self.prev_num_rows]
        accepted_before = self.num_accepted_tokens[:num_reqs].cpu().numpy().copy()

        if config.fused:
            prepare_spec_decode_inputs(
                self.num_computed_tokens, self.num_accepted_tokens, prev_positions_t, valid, drafts, host_counts_t,
                query_start_loc_t, self.block_tables, [g.block_size for g in config.groups],
                positions=self.positions, seq_lens=self.seq_lens, slot_mappings=self.slot_mappings,
                blocks_per_kv_block=[g.blocks_per_kv_block for g in config.groups],
                cp_sharded=[g.cp_sharded for g in config.groups], cp_world_size=config.cp_world_size,
                cp_rank=config.cp_rank, cp_interleave=config.cp_interleave, idx_mapping=idx_mapping_t,
                num_tokens_padded=num_tokens_padded, num_reqs_padded=num_reqs_padded)
        else:
            self.correct_fn(self.num_computed_tokens, self.num_accepted_tokens, prev_positions_t, valid, drafts,
                            host_counts_t)
            prepare_positions_and_seq_lens(self.num_computed_tokens, query_start_loc_t, positions=self.positions,
                                           seq_lens=self.seq_lens, num_tokens_padded=num_tokens_padded,
                                           num_reqs_padded=num_reqs_padded)
            for g, group in enumerate(config.groups):
                world, rank, interleave = self.group_cp[g]
                compute_slot_mapping(query_start_loc_t, self.positions[:num_tokens], self.block_tables[g],
                                     group.block_size, out=self.slot_mappings[g],
                                     blocks_per_kv_block=group.blocks_per_kv_block, cp_world_size=world,
                                     cp_rank=rank, cp_interleave=interleave, idx_mapping=idx_mapping_t,
                                     num_tokens_padded=num_tokens_padded)
        # The host mirror, from the host copies of the previous step's counts.
        seq_lens_cpu = torch.from_numpy(host_counts + query_lens)
        correct_optimistic_seq_lens(seq_lens_cpu, torch.from_numpy(prev_positions), torch.from_numpy(self.host_valid),
                                    torch.from_numpy(self.host_drafts))

        truth = self._ground_truth(n, rows, query_lens, query_start_loc, accepted_before, num_tokens_padded,
                                   num_reqs_padded)
        check = functools.partial(self._check, n)
        check("num_computed_tokens", self.num_computed_tokens[:num_reqs], truth["computed"])
        check("num_accepted_tokens", self.num_accepted_tokens[:num_reqs], truth["accepted"])
        check("positions", self.positions[:num_tokens_padded], truth["positions"])
        check("seq_lens", self.seq_lens[:num_reqs_padded], truth["seq_lens"])
        check("seq_lens_cpu", seq_lens_cpu, truth["seq_lens"][:num_reqs])
        for g in range(len(config.groups)):
            check(f"slot_mappings[{g}]", self.slot_mappings[g][:num_tokens_padded], truth["slots"][g])
        self._count(rows, prev_positions, num_tokens)

    def _ground_truth(self, n: int, rows: list[_Row], query_lens: np.ndarray, query_start_loc: np.ndarray,
                      accepted_before: np.ndarray, num_tokens_padded: int, num_reqs_padded: int) -> dict:
        config = self.config
        num_reqs, num_tokens = len(rows), int(query_start_loc[-1])
        computed = np.array([row.req.computed for row in rows], dtype=np.int64)
        continued = np.array([row.req.last_step == n - 1 and row.req.last_continuable for row in rows], dtype=bool)
        accepted = np.where(continued, [row.req.last_valid for row in rows], accepted_before)
        token_request = np.repeat(np.arange(num_reqs), query_lens)
        positions = np.zeros(num_tokens_padded, dtype=np.int64)
        positions[:num_tokens] = computed[token_request] + np.arange(num_tokens) - query_start_loc[:-1][token_request]
        seq_lens = np.zeros(num_reqs_padded, dtype=np.int64)
        seq_lens[:num_reqs] = computed + query_lens

        slots = []
        real_positions = positions[:num_tokens]
        for g, group in enumerate(config.groups):
            world, rank, interleave = self.group_cp[g]
            kv_block = group.block_size * group.blocks_per_kv_block
            is_local, virtual_block, local_offset = kv_placement(real_positions, kv_block, world, rank, interleave)
            local_index = np.where(is_local, local_offset, -1)
            # Each request's allocation blocks, flattened, so a token finds its block by offset.
            block_lists = [row.req.blocks[g] for row in rows]
            starts = np.zeros(num_reqs + 1, dtype=np.int64)
            np.cumsum([len(blocks) for blocks in block_lists], out=starts[1:])
            flat = np.array([b for blocks in block_lists for b in blocks] or [0], dtype=np.int64)
            block = flat[np.minimum(starts[token_request] + virtual_block, len(flat) - 1)]
            assert (virtual_block < starts[token_request + 1] - starts[token_request]).all(), "blocks cover the tokens"
            kernel_block = block * group.blocks_per_kv_block + local_index // group.block_size
            slot = np.full(num_tokens_padded, PAD_SLOT_ID, dtype=np.int64)
            slot[:num_tokens] = np.where(local_index >= 0,
                                         kernel_block * group.block_size + local_index % group.block_size, PAD_SLOT_ID)
            slots.append(slot)
        return dict(computed=computed, accepted=accepted, positions=positions, seq_lens=seq_lens, slots=slots)

    @staticmethod
    def _check(step: int, what: str, actual: torch.Tensor, expected: np.ndarray) -> None:
        actual_np = actual.cpu().numpy().astype(np.int64)
        if actual_np.shape != expected.shape or not np.array_equal(actual_np, expected):
            if actual_np.shape != expected.shape:
                raise SimulationMismatch(f"step {step}: {what} has shape {actual_np.shape}, expected {expected.shape}")
            index = int(np.flatnonzero(actual_np != expected)[0])
            raise SimulationMismatch(
                f"step {step}: {what}[{index}] = {actual_np[index]}, ground truth {expected[index]} "
                f"({int((actual_np != expected).sum())} of {expected.size} differ)"
            )

    def _count(self, rows: list[_Row], prev_positions: np.ndarray, num_tokens: int) -> None:
        stats = self.stats
        n = self.step_index
        stats.rows += len(rows)
        stats.tokens += num_tokens
        stats.max_batch = max(stats.max_batch, len(rows))
        stats.max_tokens = max(stats.max_tokens, num_tokens)
        for i, row in enumerate(rows):
            continued = row.req.last_step == n - 1 and row.req.last_continuable
            stats.continued_rows += continued
            stats.moved_rows += continued and int(prev_positions[i]) != i
            stats.partial_prefills += row.partial
            stats.resumed_rows += 0 <= row.req.last_step < n - 1
