"""advance_draft_step's token bookkeeping against model runner V2's own speculator kernels (vLLM
0.33, `spec_decode/target_dependent_ar/speculator.py`), every backend:

- the first decode step: `prepare_decode_inputs` then `BlockTables.compute_slot_mappings`, one
  specops call (target_seq_lens, num_rejected_tokens, query_start_loc, input_ids, the drafts'
  first column, sample_positions);
- a later step k of K: `update_draft_inputs` then, unless k is the last step, the next step's
  `compute_slot_mappings`, one specops call (sampled_tokens, draft_step, num_draft_steps, hidden
  rows); the last step writes only the drafts' column k;
- the decode loop as `propose` and `_multi_step_decode` run it, compared after every step.

Both sides start from the same buffers (vLLM's own InputBuffers and BlockTables, the
speculator's drafts, sampling keys and hidden rows) filled with random values, so that a write
out of range or one left out shows; every buffer either side writes is compared bit for bit over
its whole width. Batches: R in 0..6 of max_num_reqs 8, positions up to max_model_len (the clamp),
idx_mapping a permutation of table rows, at times with a -1 (a dummy request: PAD slots), the
three KV-cache groups of tests/vllm_integration/drive_mrv2.py, DCP 1, 2 (both ranks) and 4."""

from __future__ import annotations

import random
import types

import pytest
import torch
from conftest import BACKENDS
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar import speculator

import specops

CPU = torch.device("cpu")
BLOCK_SIZES = [16, 16, 32]
DCP_SHARDED = [True, False, True]
SLOT_MAPPING_ENABLED = [True, True, False]
MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN = 8, 20, 100
HIDDEN = 1030  # past one 1024-wide block of vLLM's row copy
# (world, rank, interleave): no DCP, both ranks of 2, the last rank of 4 with interleave 2.
CPS = [(1, 0, 1), (2, 0, 1), (2, 1, 1), (4, 3, 2)]


def random_case(seed: int, cp, k: int, first: bool = True):
    """A batch and the runner's buffers before the first decode step (else before a later one),
    as tensors both sides copy."""
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    num_reqs, world = rng.randint(0, 6), cp[0]
    rows = rng.sample(range(MAX_NUM_REQS), num_reqs)
    if num_reqs and rng.random() < 0.4:
        rows[rng.randrange(num_reqs)] = -1
    # Most requests end at or near max_model_len, so that the steps clamp.
    target = [rng.choice([MAX_MODEL_LEN, MAX_MODEL_LEN - 1, rng.randint(MAX_MODEL_LEN - 2 * k, MAX_MODEL_LEN),
                          rng.randint(1, MAX_MODEL_LEN)]) for _ in range(num_reqs)]
    rejected = [rng.randint(0, min(k, s - 1)) if rng.random() < 0.5 else 0 for s in target]
    # The draft prefill leaves a request at its last accepted token; before a later step the
    # first step and j - 1 later ones have moved it j further, clamped as the speculator clamps.
    moved = [0 if first else rng.randint(1, k) for _ in range(num_reqs)]
    at = [s - n - 1 + j for s, n, j in zip(target, rejected, moved)]

    def ints(*shape, high=1 << 20, dtype=torch.int64):
        return torch.randint(0, high, shape, generator=g, dtype=dtype)

    target_seq_lens = ints(MAX_NUM_REQS, high=MAX_MODEL_LEN, dtype=torch.int32)
    target_seq_lens[:num_reqs] = torch.tensor(target, dtype=torch.int32)
    positions, seq_lens = ints(MAX_NUM_TOKENS), ints(MAX_NUM_REQS, high=MAX_MODEL_LEN, dtype=torch.int32)
    positions[:num_reqs] = torch.tensor([min(p, MAX_MODEL_LEN - 1) for p in at], dtype=torch.int64)
    query_start_loc = ints(MAX_NUM_REQS + 1, high=50, dtype=torch.int32)
    if not first:  # what the first step wrote (vLLM's slot kernel reads query_start_loc)
        seq_lens[:num_reqs] = torch.tensor([min(p + 1, MAX_MODEL_LEN) for p in at], dtype=torch.int32)
        query_start_loc = torch.arange(MAX_NUM_REQS + 1, dtype=torch.int32).clamp(max=num_reqs)
    # Block ids below 2^20: vLLM multiplies them by the block size in int32.
    widths = [-(-MAX_MODEL_LEN // (bs * (world if sharded else 1))) + 1
              for bs, sharded in zip(BLOCK_SIZES, DCP_SHARDED)]
    return types.SimpleNamespace(
        num_reqs=num_reqs, idx_mapping=torch.tensor(rows, dtype=torch.int64), target_seq_lens=target_seq_lens,
        num_rejected=torch.tensor(rejected, dtype=torch.int32), cp=cp, num_draft_steps=k,
        tables=[ints(MAX_NUM_REQS, w, dtype=torch.int32) for w in widths],
        buffers=dict(positions=positions, input_ids=ints(MAX_NUM_TOKENS, dtype=torch.int32), seq_lens=seq_lens,
                     query_start_loc=query_start_loc, sample_src_positions=ints(MAX_NUM_REQS),
                     draft_tokens=ints(MAX_NUM_REQS, k),
                     next_hidden_states=torch.randn(MAX_NUM_TOKENS, HIDDEN, generator=g).bfloat16(),
                     slot_mappings=ints(len(BLOCK_SIZES), MAX_NUM_TOKENS)),
        # What the drafter's model and sampler give at each step (the same for both sides).
        hidden=[torch.randn(MAX_NUM_TOKENS, HIDDEN, generator=g).bfloat16() for _ in range(k)],
        sampled=[ints(num_reqs, high=32000) for _ in range(k)])


class Runner:
    """One side's buffers: vLLM's BlockTables and InputBuffers, the speculator's own tensors."""

    def __init__(self, case):
        world, rank, interleave = case.cp
        self.case = case
        self.blocks = BlockTables(BLOCK_SIZES, MAX_NUM_REQS, MAX_NUM_TOKENS, [t.size(1) for t in case.tables], CPU,
                                  cp_size=world, cp_rank=rank, cp_interleave=interleave,
                                  slot_mapping_enabled=SLOT_MAPPING_ENABLED, dcp_sharded=DCP_SHARDED)
        for staged, table in zip(self.blocks.block_tables, case.tables):
            staged.gpu.copy_(table)  # in place: the kernel reads these addresses
        self.inputs = InputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
        start = case.buffers
        for name in ("positions", "input_ids", "seq_lens", "query_start_loc"):
            getattr(self.inputs, name).copy_(start[name])
        self.blocks.slot_mappings.copy_(start["slot_mappings"])
        self.sample_src = start["sample_src_positions"].clone()
        self.drafts = start["draft_tokens"].clone()
        self.next_hidden = start["next_hidden_states"].clone()
        self.step = torch.tensor(0, dtype=torch.int64)  # the speculator's current_draft_step

    def written(self) -> dict[str, list]:
        """Every buffer a step may write, whole, as integers (hidden rows by their bits)."""
        seen = dict(input_ids=self.inputs.input_ids, positions=self.inputs.positions, seq_lens=self.inputs.seq_lens,
                    query_start_loc=self.inputs.query_start_loc, sample_src_positions=self.sample_src,
                    draft_tokens=self.drafts, next_hidden_states=self.next_hidden.view(torch.int16))
        seen.update({f"slot_mappings[{g}]": row for g, row in enumerate(self.blocks.slot_mappings)})
        return {name: tensor.tolist() for name, tensor in seen.items()}

    # vLLM: the kernels in the order the speculator launches them.
    def vllm_first(self):
        n = self.case.num_reqs
        speculator.prepare_decode_inputs(self.drafts[:n, 0], self.case.target_seq_lens, self.case.num_rejected,
                                         self.inputs, self.sample_src, MAX_MODEL_LEN, MAX_NUM_REQS)
        self._vllm_slots()

    def vllm_later(self, k: int):
        n, steps = self.case.num_reqs, self.case.num_draft_steps
        self.step.fill_(k)
        speculator.update_draft_inputs(self.case.sampled[k], self.step, self.case.hidden[k], self.drafts,
                                       self.next_hidden, self.inputs, self.sample_src, n, MAX_MODEL_LEN, steps)
        if k < steps - 1:
            self._vllm_slots()

    def _vllm_slots(self):
        n = self.case.num_reqs
        self.blocks.compute_slot_mappings(self.case.idx_mapping, self.inputs.query_start_loc[:n + 1],
                                          self.inputs.positions[:n], n)

    # specops: one advance_draft_step call per step.
    def ours_first(self):
        n = self.case.num_reqs
        self._ours(self.inputs.seq_lens, num_rejected_tokens=self.case.num_rejected,
                   target_seq_lens=self.case.target_seq_lens[:n], query_start_loc=self.inputs.query_start_loc,
                   num_reqs_padded=MAX_NUM_REQS, draft_tokens=self.drafts[:n, :1])  # the column vLLM is given

    def ours_later(self, k: int):
        self.step.fill_(k)
        self._ours(self.inputs.seq_lens[:self.case.num_reqs], draft_tokens=self.drafts,
                   sampled_tokens=self.case.sampled[k], draft_step=self.step,
                   num_draft_steps=self.case.num_draft_steps, hidden_states=self.case.hidden[k],
                   next_hidden_states=self.next_hidden)

    def _ours(self, seq_lens, **step):
        world, rank, interleave = self.case.cp
        specops.advance_draft_step(
            self.inputs.positions[:self.case.num_reqs], seq_lens, [t.gpu for t in self.blocks.block_tables],
            BLOCK_SIZES, max_model_len=MAX_MODEL_LEN, past_max_model_len="clamp",
            idx_mapping=self.case.idx_mapping, slot_mappings=list(self.blocks.slot_mappings),
            cp_sharded=DCP_SHARDED, slot_mapping_enabled=SLOT_MAPPING_ENABLED, cp_world_size=world, cp_rank=rank,
            cp_interleave=interleave, input_ids=self.inputs.input_ids, sample_positions=self.sample_src, **step)


def assert_agree(ours: dict, theirs: dict, what: str):
    for name, want in theirs.items():
        assert ours[name] == want, f"{name} differs from vLLM's ({what})"


def assert_only_drafts_column(before: dict, after: dict, case, k: int, what: str):
    """The last step stores the sampled tokens in column k of the first R rows, nothing else."""
    drafts = [list(row) for row in before["draft_tokens"]]
    for r, token in enumerate(case.sampled[k].tolist()):
        drafts[r][k] = token
    assert after["draft_tokens"] == drafts, f"draft_tokens: the last step's column ({what})"
    for name in before:
        if name != "draft_tokens":
            assert after[name] == before[name], f"{name}: written on the last step ({what})"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("cp", CPS)
def test_first_decode_step_agrees_with_prepare_decode_inputs(cp, seed):
    case = random_case(100 * seed + cp[0] + cp[1], cp, k=4)  # k: the drafts buffer's width
    theirs = Runner(case)
    theirs.vllm_first()
    for backend in BACKENDS:
        ours = Runner(case)
        with specops.backend(backend):
            ours.ours_first()
        assert_agree(ours.written(), theirs.written(), f"R={case.num_reqs} cp={cp} seed={seed} {backend}")


# Every step k of K = 1..4 drafts that update_draft_inputs takes; k = K - 1 is the last (for
# K = 1, step 0: the prefill's single draft). The speculator launches it for k >= 1 only.
STEPS = [(k, step) for k in range(1, 5) for step in range(k)]


@pytest.mark.parametrize("k,step", STEPS)
@pytest.mark.parametrize("cp", CPS)
def test_a_later_step_agrees_with_update_draft_inputs(cp, k, step):
    case = random_case(1000 + 10 * k + step + 100 * cp[0] + cp[1], cp, k, first=False)
    theirs = Runner(case)
    theirs.vllm_later(step)
    for backend in BACKENDS:
        ours = Runner(case)
        before = ours.written()
        with specops.backend(backend):
            ours.ours_later(step)
        what = f"step {step} of {k} R={case.num_reqs} cp={cp} {backend}"
        assert_agree(ours.written(), theirs.written(), what)
        if step == k - 1:
            assert_only_drafts_column(before, ours.written(), case, step, what)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("k", [2, 3, 4])  # K = 1 drafts in the prefill alone: no decode step
@pytest.mark.parametrize("cp", CPS)
def test_the_decode_loop_agrees_after_every_step(cp, k, seed):
    # propose: prepare_decode_inputs; _multi_step_decode: for step 1..K-1, that step's slots
    # then update_draft_inputs. specops folds each step's slots into the call before it.
    case = random_case(5000 + 100 * seed + 10 * k + 4 * cp[0] + cp[1], cp, k)
    theirs = Runner(case)
    theirs.vllm_first()
    their_states = [theirs.written()]
    for step in range(1, k):
        theirs.vllm_later(step)
        their_states.append(theirs.written())
    for backend in BACKENDS:
        ours = Runner(case)
        what = f"K={k} R={case.num_reqs} cp={cp} seed={seed} {backend}"
        with specops.backend(backend):
            ours.ours_first()
            assert_agree(ours.written(), their_states[0], f"first step, {what}")
            for step in range(1, k):
                before = ours.written()
                ours.ours_later(step)
                assert_agree(ours.written(), their_states[step], f"step {step}, {what}")
        assert_only_drafts_column(before, ours.written(), case, k - 1, what)
