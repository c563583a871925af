"""vLLM 0.33's parallel-drafting first pass against expand_parallel_draft_inputs on random valid
inputs, every backend: `copy_and_expand_eagle_inputs_kernel` (launched here with the grid its
Python launcher computes) for ids, positions, masks, sample indices and the hidden-state
mapping, then `compute_new_slot_mapping` (one table; block ids below 2^31 / block_size, where
vLLM's int32 product is exact) and the query layout and seq_lens of `extend_all_queries_by_N`."""

from __future__ import annotations

import random

import torch
from conftest import BACKENDS
from vllm.v1.spec_decode import utils as spec_decode_utils

import specops

I32 = torch.int32
BLOCK_TOKENS = 16


class _Metadata:
    """The fields of CommonAttentionMetadata that compute_new_slot_mapping reads."""

    def __init__(self, query_start_loc: torch.Tensor, block_table: torch.Tensor):
        self.query_start_loc = query_start_loc
        self.block_table_tensor = block_table

    def naive_query_lens(self) -> torch.Tensor:
        return self.query_start_loc[1:] - self.query_start_loc[:-1]


def test_first_pass_agrees_with_vllm():
    rng = random.Random(11)
    for trial in range(12):
        num_reqs = rng.randint(1, 5)
        shift = rng.random() < 0.5
        slots = rng.randint(2, 4) if shift else rng.randint(1, 4)
        n = slots - (1 if shift else 0)
        block_size, limit = rng.choice([4, 8, 16]), rng.randint(16, 64)
        query_lens = [rng.randint(1, 5) for _ in range(num_reqs)]
        rejected = [rng.randint(0, q - 1) for q in query_lens]
        starts = [rng.randint(0, limit - 1) for _ in range(num_reqs)]
        qsl = torch.tensor([0] + [sum(query_lens[:i + 1]) for i in range(num_reqs)], dtype=I32)
        num_tokens = int(qsl[-1])
        target_ids = torch.randint(0, 1000, (num_tokens,), dtype=I32)
        target_positions = torch.tensor([s + j for s, q in zip(starts, query_lens) for j in range(q)])
        next_ids = torch.randint(0, 1000, (num_reqs,), dtype=I32)
        cols = -(-(limit + 1) // block_size)
        table = torch.randint(0, 1000, (num_reqs, cols), dtype=I32)
        seq_lens = torch.tensor([s + q for s, q in zip(starts, query_lens)], dtype=I32)
        num_out = num_tokens + num_reqs * n
        theirs = dict(ids=torch.zeros(num_out, dtype=I32), positions=torch.zeros(num_out, dtype=torch.int64),
                      rejected=torch.zeros(num_out, dtype=torch.bool), masked=torch.zeros(num_out, dtype=torch.bool),
                      indices=torch.zeros(num_reqs * slots, dtype=I32), hidden=torch.zeros(num_tokens, dtype=I32))
        query_end = qsl[1:] - 1 - torch.tensor(rejected, dtype=I32)
        max_out = max(query_lens) + slots
        spec_decode_utils.copy_and_expand_eagle_inputs_kernel[(num_reqs, -(-max_out // BLOCK_TOKENS))](
            target_ids, target_positions, next_ids, theirs["ids"], theirs["positions"], theirs["rejected"],
            theirs["masked"], theirs["indices"], theirs["hidden"], qsl, query_end, 0, 999, num_tokens, slots, shift,
            BLOCK_SIZE_TOKENS=BLOCK_TOKENS)
        their_slots = spec_decode_utils.compute_new_slot_mapping(
            _Metadata(qsl, table), theirs["positions"], theirs["rejected"], block_size, n, limit)
        their_qsl = qsl + n * torch.arange(num_reqs + 1, dtype=I32)
        for backend in BACKENDS:
            with specops.backend(backend):
                ours = specops.expand_parallel_draft_inputs(
                    target_ids, target_positions, next_ids, qsl, [table], block_size, slots_per_request=slots,
                    max_model_len=limit, parallel_drafting_token_id=999, shift_input_ids=shift,
                    num_rejected_tokens=torch.tensor(rejected, dtype=I32), seq_lens=seq_lens)
            what = f"trial {trial} {backend}"
            assert ours.input_ids.tolist() == theirs["ids"].tolist(), what
            assert ours.positions.tolist() == theirs["positions"].tolist(), what
            assert ours.is_rejected_token_mask.tolist() == theirs["rejected"].tolist(), what
            assert ours.is_masked_token_mask.tolist() == theirs["masked"].tolist(), what
            assert ours.token_indices_to_sample.tolist() == theirs["indices"].tolist(), what
            if shift:
                assert ours.hidden_state_mapping.tolist() == theirs["hidden"].tolist(), what
            assert ours.slot_mappings[0].tolist() == their_slots.tolist(), what
            assert ours.query_start_loc.tolist() == their_qsl.tolist(), what
            assert ours.seq_lens.tolist() == (seq_lens + n).tolist(), what
