"""The vLLM plugin's V1 Eagle adapters (specops.integrations.vllm.v1_eagle) against the vLLM 0.33
code they replace, called the way vLLM calls it, on random valid inputs, every backend:
`eagle_step_update_slot_mapping_and_metadata` (padded draft batches, positions reaching
max_model_len, positions updated in place) and `SpecDecodeBaseProposer.set_inputs_first_pass`
with extra input slots (parallel drafting with Eagle's shift, and a draft model without it).
tests/vllm_integration drives the whole path."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import BACKENDS
from vllm.v1.attention.backend import CommonAttentionMetadata
from vllm.v1.spec_decode import utils as spec_decode_utils
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

import specops
from specops.integrations.vllm import v1_eagle

I32 = torch.int32
HIDDEN = 4


def test_eagle_step_agrees_with_vllm():
    rng = random.Random(5)
    step = v1_eagle.make_eagle_step(spec_decode_utils.eagle_step_update_slot_mapping_and_metadata)
    for trial in range(20):
        batch, block_size, limit = rng.randint(1, 6), rng.choice([4, 8, 16]), rng.randint(8, 48)
        padded = batch + rng.randint(0, 3)
        cols = -(-limit // block_size)
        table = torch.randint(1, 1000, (batch, cols), dtype=I32)
        positions = torch.tensor([rng.randint(0, limit - 1) for _ in range(batch)], dtype=torch.int64)
        seq_lens = (positions + 1).to(I32)
        theirs = dict(positions=positions.clone(), seq_lens=seq_lens.clone(),
                      slots=torch.full((padded + 2,), 77, dtype=torch.int64))
        spec_decode_utils.eagle_step_update_slot_mapping_and_metadata(
            theirs["positions"], table, theirs["seq_lens"], block_size, limit, theirs["positions"],
            theirs["slots"][:padded], input_batch_size=padded)
        for backend in BACKENDS:
            ours = dict(positions=positions.clone(), seq_lens=seq_lens.clone(),
                        slots=torch.full((padded + 2,), 77, dtype=torch.int64))
            with specops.backend(backend):
                step(ours["positions"], table, ours["seq_lens"], block_size, limit, ours["positions"],
                     ours["slots"][:padded], input_batch_size=padded)
            for name in theirs:
                assert ours[name].tolist() == theirs[name].tolist(), f"trial {trial} {backend} {name}"


def _proposer(shift: bool, slots: int, max_num_tokens: int, block_size: int, limit: int):
    p = SpecDecodeBaseProposer.__new__(SpecDecodeBaseProposer)
    p.device, p.block_size, p.max_model_len = torch.device("cpu"), block_size, limit
    p.pass_hidden_states_to_model, p.use_heterogeneous_vocab = shift, False
    p.extra_slots_per_request = slots
    p.net_num_new_slots_per_request = slots - (1 if shift else 0)
    p.needs_extra_input_slots = p.net_num_new_slots_per_request > 0
    p.parallel_drafting_token_id = 999
    p.input_ids = torch.full((max_num_tokens,), 5, dtype=I32)
    p.positions = torch.full((max_num_tokens,), 5, dtype=torch.int64)
    p.is_rejected_token_mask = torch.ones(max_num_tokens, dtype=torch.bool)
    p.is_masked_token_mask = torch.ones(max_num_tokens, dtype=torch.bool)
    p.hidden_states = torch.full((max_num_tokens, HIDDEN), 0.5)
    p.parallel_drafting_hidden_state_tensor = torch.linspace(-1, 1, HIDDEN)
    p.arange = torch.arange(max_num_tokens + 1, dtype=I32)
    return p


@pytest.mark.parametrize("shift", [True, False])
def test_first_pass_with_extra_slots_agrees_with_vllm(shift):
    rng = random.Random(7 + shift)
    first_pass = v1_eagle.make_set_inputs_first_pass(SpecDecodeBaseProposer.set_inputs_first_pass,
                                                     spec_decode_utils.extend_all_queries_by_N)
    for trial in range(10):
        num_reqs, block_size, limit = rng.randint(1, 5), rng.choice([4, 8, 16]), rng.randint(24, 64)
        slots = rng.randint(2, 4) if shift else 1
        query_lens = [rng.randint(1, 5) for _ in range(num_reqs)]
        rejected = torch.tensor([rng.randint(0, q - 1) for q in query_lens], dtype=I32)
        starts = [rng.randint(0, limit - 12) for _ in range(num_reqs)]
        qsl = torch.tensor([0] + [sum(query_lens[:i + 1]) for i in range(num_reqs)], dtype=I32)
        num_tokens = int(qsl[-1])
        target_ids = torch.randint(0, 900, (num_tokens,), dtype=I32)
        target_positions = torch.tensor([s + j for s, q in zip(starts, query_lens) for j in range(q)])
        hidden = torch.randn(num_tokens, HIDDEN)
        next_ids = torch.randint(0, 900, (num_reqs,), dtype=I32)
        table = torch.randint(1, 1000, (num_reqs, -(-limit // block_size)), dtype=I32)
        seq_lens = torch.tensor([s + q for s, q in zip(starts, query_lens)], dtype=I32)

        def cad():
            return CommonAttentionMetadata(
                query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq_lens, num_reqs=num_reqs,
                num_actual_tokens=num_tokens, max_query_len=max(query_lens), max_seq_len=int(seq_lens.max()),
                block_table_tensor=table, slot_mapping=torch.zeros(num_tokens, dtype=torch.int64))

        def run(call):
            p = _proposer(shift, slots, 96, block_size, limit)
            num_out, indices, new = call(p, target_ids, next_ids, target_positions, hidden, None, cad(), rejected)
            return p, num_out, indices, new

        theirs = run(SpecDecodeBaseProposer.set_inputs_first_pass)
        for backend in BACKENDS:
            with specops.backend(backend):
                ours = run(first_pass)
            what = f"trial {trial} {backend}"
            assert ours[1] == theirs[1] and ours[2].tolist() == theirs[2].tolist(), what
            for name in ("input_ids", "positions", "is_rejected_token_mask", "is_masked_token_mask", "hidden_states"):
                assert getattr(ours[0], name).tolist() == getattr(theirs[0], name).tolist(), f"{what} {name}"
            for name in ("slot_mapping", "query_start_loc", "query_start_loc_cpu", "seq_lens"):
                assert getattr(ours[3], name).tolist() == getattr(theirs[3], name).tolist(), f"{what} {name}"
            assert (ours[3].num_actual_tokens, ours[3].max_query_len) == (theirs[3].num_actual_tokens,
                                                                           theirs[3].max_query_len), what
