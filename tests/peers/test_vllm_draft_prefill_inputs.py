"""prepare_draft_prefill_inputs against model runner V2's speculator (vLLM 0.33,
`spec_decode/target_dependent_ar/speculator.py`), every backend:

- `prepare_prefill_inputs` (its `_prepare_prefill_inputs_kernel`, run by Triton's interpreter)
  on stand-in InputBatch objects carrying the attributes it reads, into the speculator's own
  buffers (vLLM's InputBuffers, `last_token_indices`, `current_draft_step`);
- the request mapping of `DraftModelSpeculator._copy_request_inputs` (its non-dummy branch), the
  optional output `request_idx_mapping`.

Both sides start from the same buffers filled with random values, so an entry written that vLLM
leaves (a rejected token, a token past T) or one left out shows; every buffer is compared bit for
bit over its whole width. Batches: R in 1..8 of max_num_reqs 8, chunked prefills (num_sampled
0: the prompt's next token), decodes with rejections, prefills completing (num_sampled 1), the
target's input buffers padded past T with garbage, int64 sampled tokens past int32 (vLLM casts).
"""

from __future__ import annotations

import random
import types

import pytest
import torch
from conftest import BACKENDS
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.spec_decode import speculator as base_speculator
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar import speculator

import specops

CPU = torch.device("cpu")
MAX_NUM_REQS, MAX_NUM_TOKENS, NUM_ROWS, LOOKAHEAD = 8, 48, 12, 2


def random_case(seed: int, num_reqs: int | None = None):
    rng, g = random.Random(seed), torch.Generator().manual_seed(seed)
    num_reqs = rng.randint(1, MAX_NUM_REQS) if num_reqs is None else num_reqs
    kinds = [rng.choice(["chunked", "decode", "decode", "completing"]) for _ in range(num_reqs)]
    query_lens, num_sampled, num_rejected = [], [], []
    for kind in kinds:
        if kind == "chunked":  # a prefill chunk: nothing sampled, nothing rejected
            query_lens.append(rng.randint(1, 8)); num_sampled.append(0); num_rejected.append(0)
        elif kind == "completing":  # the chunk that completes the prompt samples its first token
            query_lens.append(rng.randint(1, 8)); num_sampled.append(1); num_rejected.append(0)
        else:  # a decode of K drafts: 1 + K tokens, the sampler keeps 1 .. K + 1
            k = rng.randint(0, 4)
            kept = rng.randint(1, k + 1)
            query_lens.append(k + 1); num_sampled.append(kept); num_rejected.append(k + 1 - kept)
    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    num_tokens = qsl[-1]
    padded = min(MAX_NUM_TOKENS, num_tokens + rng.randint(0, 5))

    def ints(*shape, low=0, high=1 << 20, dtype=torch.int64):
        return torch.randint(low, high, shape, generator=g, dtype=dtype)

    last_sampled = ints(NUM_ROWS, 1, low=-(1 << 40), high=1 << 40)  # RequestState.last_sampled_tokens
    return types.SimpleNamespace(
        num_reqs=num_reqs, num_tokens=num_tokens, padded=padded,
        idx_mapping=torch.tensor(rng.sample(range(NUM_ROWS), num_reqs), dtype=torch.int32),
        query_start_loc=torch.tensor(qsl, dtype=torch.int32),
        seq_lens=ints(num_reqs, low=1, high=4096, dtype=torch.int32),
        num_sampled=torch.tensor(num_sampled, dtype=torch.int32),
        num_rejected=torch.tensor(num_rejected, dtype=torch.int32),
        last_sampled=last_sampled, next_prefill=ints(LOOKAHEAD, NUM_ROWS, high=32000, dtype=torch.int32),
        # The target step's buffers, garbage past T (the padded tokens) and past the padding.
        target_input_ids=ints(MAX_NUM_TOKENS, dtype=torch.int32), target_positions=ints(MAX_NUM_TOKENS),
        # The drafter's persistent buffers as the previous step left them.
        before=dict(input_ids=ints(MAX_NUM_TOKENS, dtype=torch.int32), positions=ints(MAX_NUM_TOKENS),
                    query_start_loc=ints(MAX_NUM_REQS + 1, dtype=torch.int32),
                    seq_lens=ints(MAX_NUM_REQS, dtype=torch.int32), last_token_indices=ints(MAX_NUM_REQS),
                    current_draft_step=torch.tensor(3, dtype=torch.int64),
                    idx_mapping=ints(MAX_NUM_REQS)))


class Drafter:
    """One side's buffers: vLLM's InputBuffers and the speculator's own tensors."""

    def __init__(self, case):
        self.case = case
        self.inputs = InputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
        for name in ("input_ids", "positions", "query_start_loc", "seq_lens"):
            getattr(self.inputs, name).copy_(case.before[name])
        self.last_token_indices = case.before["last_token_indices"].clone()
        self.current_draft_step = case.before["current_draft_step"].clone()
        self.idx_mapping = case.before["idx_mapping"].clone()  # the speculator's idx_mapping: int64 [max_num_reqs]
        # The attributes _copy_request_inputs reads beside idx_mapping.
        self.temperature = torch.zeros(MAX_NUM_REQS)
        self.seeds = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)

    def batch(self):
        """The InputBatch attributes prepare_prefill_inputs reads (vLLM slices its buffers so)."""
        case = self.case
        return types.SimpleNamespace(num_reqs=case.num_reqs, input_ids=case.target_input_ids[:case.padded],
                                     positions=case.target_positions[:case.padded], idx_mapping=case.idx_mapping,
                                     query_start_loc=case.query_start_loc, seq_lens=case.seq_lens)

    def written(self) -> dict[str, list]:
        seen = dict(input_ids=self.inputs.input_ids, positions=self.inputs.positions,
                    query_start_loc=self.inputs.query_start_loc, seq_lens=self.inputs.seq_lens,
                    last_token_indices=self.last_token_indices, current_draft_step=self.current_draft_step,
                    idx_mapping=self.idx_mapping)
        return {name: tensor.tolist() for name, tensor in seen.items()}

    def vllm(self):
        case = self.case
        base_speculator.DraftModelSpeculator._copy_request_inputs(
            self, case.num_reqs, case.idx_mapping, torch.ones(MAX_NUM_REQS), torch.ones(MAX_NUM_REQS, dtype=torch.int64))
        speculator.prepare_prefill_inputs(self.last_token_indices, self.current_draft_step, self.inputs, self.batch(),
                                          case.num_sampled, case.num_rejected, case.last_sampled, case.next_prefill,
                                          MAX_NUM_REQS)

    def ours(self):
        case, batch = self.case, self.batch()
        specops.prepare_draft_prefill_inputs(
            batch.input_ids, batch.positions, batch.idx_mapping, batch.query_start_loc, batch.seq_lens,
            case.num_sampled, case.num_rejected, case.last_sampled, case.next_prefill,
            input_ids=self.inputs.input_ids, positions=self.inputs.positions,
            out_query_start_loc=self.inputs.query_start_loc, out_seq_lens=self.inputs.seq_lens,
            last_token_indices=self.last_token_indices, current_draft_step=self.current_draft_step,
            request_idx_mapping=self.idx_mapping)


def assert_agree(ours: dict, theirs: dict, what: str):
    for name, want in theirs.items():
        assert ours[name] == want, f"{name} differs from vLLM's ({what})"


def assert_agree_on_every_backend(case, what: str):
    theirs = Drafter(case)
    theirs.vllm()
    for backend in BACKENDS:
        ours = Drafter(case)
        with specops.backend(backend):
            ours.ours()
        assert_agree(ours.written(), theirs.written(), f"{what} {backend}")


@pytest.mark.parametrize("seed", range(12))
def test_agrees_with_prepare_prefill_inputs_and_the_mapping_copy(seed):
    case = random_case(seed)
    assert_agree_on_every_backend(case, f"R={case.num_reqs} T={case.num_tokens} seed={seed}")


def test_a_full_batch_of_max_num_reqs():
    """R = max_num_reqs: no padding entry past R but out_query_start_loc's last."""
    assert_agree_on_every_backend(random_case(77, num_reqs=MAX_NUM_REQS), f"R={MAX_NUM_REQS}")


def test_the_worked_example():
    """docs/step_bookkeeping.md's example, vLLM's values."""
    case = random_case(5, num_reqs=2)
    case.idx_mapping = torch.tensor([2, 0], dtype=torch.int32)
    case.query_start_loc = torch.tensor([0, 3, 4], dtype=torch.int32)
    case.num_tokens = case.padded = 4
    case.target_input_ids[:4] = torch.tensor([11, 12, 13, 21])
    case.target_positions[:4] = torch.tensor([5, 6, 7, 9])
    case.seq_lens = torch.tensor([8, 10], dtype=torch.int32)
    case.num_sampled, case.num_rejected = torch.tensor([2, 0], dtype=torch.int32), torch.tensor([1, 0], dtype=torch.int32)
    case.last_sampled = torch.tensor([[100], [101], [102], [103]])
    case.next_prefill = torch.tensor([[200, 201, 202, 203]], dtype=torch.int32)
    for name in ("input_ids", "positions", "query_start_loc", "seq_lens", "last_token_indices", "idx_mapping"):
        case.before[name].fill_(99)
    theirs = Drafter(case)
    theirs.vllm()
    seen = theirs.written()
    assert seen["input_ids"][:6] == [12, 102, 99, 200, 99, 99]
    assert seen["positions"][:6] == [5, 6, 99, 9, 99, 99]
    assert seen["last_token_indices"][:4] == [1, 3, 0, 0]
    assert seen["query_start_loc"] == [0, 3, 4, 4, 4, 4, 4, 4, 4]
    assert seen["seq_lens"][:4] == [8, 10, 0, 0] and seen["current_draft_step"] == 0
    assert seen["idx_mapping"][:4] == [2, 0, -1, -1]
    for backend in BACKENDS:
        ours = Drafter(case)
        with specops.backend(backend):
            ours.ours()
        assert_agree(ours.written(), seen, f"the worked example, {backend}")


def test_no_request_writes_what_the_formula_says_where_vllm_launches_nothing():
    """R = 0 (docs/conformance.md): vLLM's grid of 0 programs writes nothing (its mapping copy
    still fills -1); specops pads from R = 0 as at any R: query_start_loc[0], zeros, the step 0."""
    case = random_case(9, num_reqs=0)
    theirs = Drafter(case)
    theirs.vllm()
    before = {name: t.tolist() for name, t in case.before.items()}
    seen = theirs.written()
    assert seen["idx_mapping"] == [-1] * MAX_NUM_REQS
    assert all(seen[name] == before[name] for name in ("input_ids", "positions", "query_start_loc", "seq_lens",
                                                        "last_token_indices", "current_draft_step"))
    for backend in BACKENDS:
        ours = Drafter(case)
        with specops.backend(backend):
            ours.ours()
        got = ours.written()
        assert got["idx_mapping"] == seen["idx_mapping"], backend
        assert got["input_ids"] == before["input_ids"] and got["positions"] == before["positions"], backend
        assert got["query_start_loc"] == [0] * (MAX_NUM_REQS + 1) and got["seq_lens"] == [0] * MAX_NUM_REQS, backend
        assert got["last_token_indices"] == [0] * MAX_NUM_REQS and got["current_draft_step"] == 0, backend
