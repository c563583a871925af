"""vLLM 0.33's step-input and draft-step kernels against specops on random valid inputs, every
backend:

- prepare_input_ids against the chain `GPUModelRunner.prepare_inputs` runs
  (`vllm/v1/worker/gpu/input_batch.py`): `expand_idx_mapping`, `prepare_prefill_inputs`,
  `prepare_pos_seq_lens` (its seq_lens), `combine_sampled_and_draft_tokens`;
- prepare_next_token_ids' sample indices against `eagle_prepare_next_token_padded_kernel`
  followed by `eagle_prepare_inputs_padded_kernel` (`vllm/v1/spec_decode/utils.py`);
- advance_draft_step ("clamp") against model runner V2's draft steps
  (`spec_decode/target_dependent_ar/speculator.py`): the `positions[last_token_indices]`
  gather, `_prepare_decode_inputs_kernel` on the first step, `_update_draft_inputs_kernel` on
  the later ones, each followed by `BlockTables.compute_slot_mappings` for every group (CP
  sharded and replicated groups, one without a slot mapping, block ids below 2^31 / block_size
  where vLLM's int32 product is exact).

The warm-up dispatchers need a GPU: their @triton.jit kernels are launched with the grid and
arguments the Python launchers compute."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import BACKENDS
from vllm.v1.spec_decode import utils as spec_decode_utils
from vllm.v1.worker.gpu import input_batch
from vllm.v1.worker.gpu.block_table import BlockTables
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar import speculator

import specops

I32 = torch.int32
CPU = torch.device("cpu")


def t32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def cumulative(counts: list[int]) -> list[int]:
    return [0] + [sum(counts[:i + 1]) for i in range(len(counts))]


def next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def _input_ids_case(rng: random.Random, rows: int, width: int, k: int, new_sampled: int):
    """A batch as the scheduler makes one: decodes (1 + drafts), prefill chunks (one logit),
    chunks that cross the end of the prompt; rows distinct and valid."""
    batch = rng.sample(range(rows), rng.randint(0, rows))
    computed = [rng.randint(0, 30) for _ in range(rows)]
    prefill = [rng.randint(0, 30) for _ in range(rows)]
    query_lens, logits = [], []
    for row in batch:
        query = rng.randint(1, 6)
        query_lens.append(query)
        logits.append(rng.randint(new_sampled, min(query, k + new_sampled)))
    return batch, computed, prefill, query_lens, logits


@pytest.mark.parametrize("new_sampled", [1, 0])
def test_input_ids_agree_with_vllms_three_kernels(new_sampled):
    rng = random.Random(11 + new_sampled)
    rows, width, k, lookahead = 6, 40, 3, 2
    for trial in range(12):
        batch, computed, prefill, query_lens, logits = _input_ids_case(rng, rows, width, k, new_sampled)
        idx, qsl, cu = t32(batch), t32(cumulative(query_lens)), t32(cumulative(logits))
        num_tokens, num_logits = int(qsl[-1]), int(cu[-1])
        all_token_ids = torch.randint(0, 1000, (rows, width), dtype=I32)
        last_sampled = torch.randint(0, 1000, (rows,))
        drafts = torch.randint(0, 1000, (rows, k))
        nc, pl = t32(computed), t32(prefill)

        their_ids = torch.full((num_tokens,), 77, dtype=I32)
        their_lookahead = torch.full((lookahead, rows), 99, dtype=I32)
        their_expanded, their_local = input_batch.expand_idx_mapping(idx, num_logits, cu, k + 1)
        input_batch.prepare_prefill_inputs(their_ids, their_lookahead, idx, qsl, all_token_ids, pl, nc)
        positions, seq_lens = torch.zeros(num_tokens, dtype=torch.int64), torch.zeros(len(batch), dtype=I32)
        input_batch.prepare_pos_seq_lens(idx, qsl, nc, positions, seq_lens)
        their_logits = input_batch.combine_sampled_and_draft_tokens(
            their_ids, idx, last_sampled, qsl, seq_lens, pl, drafts, cu, num_logits, new_sampled)

        for backend in BACKENDS:
            ids = torch.full((num_tokens,), 77, dtype=I32)
            lookahead_tokens = torch.full((lookahead, rows), 99, dtype=I32)
            with specops.backend(backend):
                ours = specops.prepare_input_ids(ids, idx, qsl, nc, pl, last_sampled, drafts, cu,
                                                 num_new_sampled_tokens=new_sampled, all_token_ids=all_token_ids,
                                                 next_prefill_tokens=lookahead_tokens)
            what = f"trial {trial} {backend}"
            assert ids.tolist() == their_ids.tolist(), what
            assert lookahead_tokens.tolist() == their_lookahead.tolist(), what
            assert ours.logits_indices.tolist() == their_logits.tolist(), what
            assert ours.expanded_idx_mapping.tolist() == their_expanded.tolist(), what
            assert ours.expanded_local_pos.tolist() == their_local.tolist(), what


def test_sample_indices_agree_with_the_eagle_padded_kernels():
    """Valid input as the V1 runner has it: the sampler's valid tokens form a prefix, each
    request's query holds its drafts and the bonus token, a discarded request drafted nothing."""
    rng = random.Random(12)
    for trial in range(12):
        num_reqs, k, vocab = rng.randint(1, 6), rng.randint(1, 3), rng.randint(2, 40)
        discard = [rng.random() < 0.3 for _ in range(num_reqs)]
        drafts = [0 if discard[r] else rng.randint(0, k) for r in range(num_reqs)]
        sampled = torch.full((num_reqs, k + 1), -1, dtype=I32)
        for r in range(num_reqs):
            kept = rng.randint(1, drafts[r] + 1)
            sampled[r, :kept] = torch.randint(0, vocab, (kept,), dtype=I32)
        query_lens = [d + 1 + rng.randint(0, 3) for d in drafts]
        qsl, cu_drafts = t32(cumulative(query_lens)), t32(cumulative(drafts)[1:])
        discard_mask, backup = torch.tensor(discard), torch.randint(0, vocab, (num_reqs,), dtype=I32)

        their_next, their_count = torch.zeros(num_reqs, dtype=I32), torch.zeros(num_reqs, dtype=I32)
        spec_decode_utils.eagle_prepare_next_token_padded_kernel[(num_reqs,)](
            sampled, discard_mask, backup, their_next, their_count, vocab, k + 1, num_reqs, sampled.stride(0),
            BLOCK_SIZE_TOKENS=next_power_of_2(k + 1))
        their_indices, their_rejected = torch.zeros(num_reqs, dtype=I32), torch.zeros(num_reqs, dtype=I32)
        spec_decode_utils.eagle_prepare_inputs_padded_kernel[(num_reqs,)](
            cu_drafts, their_count, qsl, their_indices, their_rejected, num_reqs)

        for backend in BACKENDS:
            with specops.backend(backend):
                ours = specops.prepare_next_token_ids(sampled, vocab, discard_request_mask=discard_mask,
                                                      backup_next_token_ids=backup, cu_num_draft_tokens=cu_drafts,
                                                      query_start_loc=qsl)
            what = f"trial {trial} {backend}"
            assert ours.next_token_ids.tolist() == their_next.tolist(), what
            assert ours.valid_sampled_token_count.tolist() == their_count.tolist(), what
            assert ours.token_indices_to_sample.tolist() == their_indices.tolist(), what
            assert ours.num_rejected_tokens.tolist() == their_rejected.tolist(), what


# (block size, CP-sharded, slot mapping on): a sharded group, a replicated one, a small-block
# sharded one, one without a slot mapping (PAD for every token).
DRAFT_GROUPS = ((16, True, True), (8, False, True), (4, True, True), (32, True, False))


class _MRV2DraftSteps:
    """Model runner V2's draft-step buffers and kernels for one batch (one vLLM BlockTables)."""

    def __init__(self, tables, cp, max_num_reqs: int, num_tokens_padded: int, max_model_len: int, k: int):
        world, rank, interleave = cp
        # The tables are request-indexed (their own rows); max_num_reqs pads the batch buffers.
        self.blocks = BlockTables([g[0] for g in DRAFT_GROUPS], tables[0].size(0), num_tokens_padded,
                                  [t.size(1) for t in tables], CPU, cp_size=world, cp_rank=rank,
                                  cp_interleave=interleave, dcp_sharded=[g[1] for g in DRAFT_GROUPS],
                                  slot_mapping_enabled=[g[2] for g in DRAFT_GROUPS])
        for staged, table in zip(self.blocks.block_tables, tables):
            staged.gpu.copy_(table)  # in place: the kernels read these addresses
        self.max_num_reqs, self.max_model_len, self.k = max_num_reqs, max_model_len, k
        self.positions = torch.zeros(num_tokens_padded, dtype=torch.int64)
        self.seq_lens = torch.full((max_num_reqs,), 55, dtype=I32)
        self.query_start_loc = torch.zeros(max_num_reqs + 1, dtype=I32)
        self.input_ids = torch.zeros(num_tokens_padded, dtype=I32)
        self.sample_src = torch.zeros(max_num_reqs, dtype=torch.int64)

    def first(self, target_positions, last_token_indices, target_seq_lens, rejected, idx):
        num_reqs = idx.numel()
        self.positions[:num_reqs] = target_positions[last_token_indices.long()]
        drafts = torch.zeros(num_reqs, 1, dtype=torch.int64)
        speculator._prepare_decode_inputs_kernel[(num_reqs + 1,)](
            drafts, drafts.stride(0), target_seq_lens, rejected, self.input_ids, self.positions, self.sample_src,
            self.query_start_loc, self.seq_lens, self.max_model_len, self.max_num_reqs, BLOCK_SIZE=1024,
            ADVANCE_DRAFT_POSITIONS=True)
        return self._slots(idx)

    def later(self, idx):
        num_reqs, hidden = idx.numel(), 4
        states = torch.zeros(num_reqs, hidden)
        out_drafts = torch.zeros(num_reqs, self.k, dtype=torch.int64)
        speculator._update_draft_inputs_kernel[(num_reqs,)](
            out_drafts, out_drafts.stride(0), states, states.stride(0), self.input_ids, self.positions,
            self.sample_src, self.seq_lens, torch.zeros(num_reqs, dtype=torch.int64), torch.zeros(1, dtype=I32),
            states, states.stride(0), hidden, self.max_model_len, self.k, BLOCK_SIZE=1024,
            ADVANCE_DRAFT_POSITIONS=True)
        return self._slots(idx)

    def _slots(self, idx):
        num_reqs = idx.numel()
        return self.blocks.compute_slot_mappings(idx, self.query_start_loc, self.positions[:num_reqs],
                                                 self.positions.numel())


@pytest.mark.parametrize("cp", [(1, 0, 1), (2, 1, 1), (4, 2, 2)])
def test_clamp_draft_steps_agree_with_model_runner_v2(cp):
    rng = random.Random(13 + cp[0])
    world = cp[0]
    rows, max_model_len, k = 6, 48, 4
    widths = [-(-max_model_len // (bs * (world if sharded else 1))) for bs, sharded, _ in DRAFT_GROUPS]
    for trial in range(6):
        tables = [torch.randint(0, 1 << 20, (rows, w), dtype=I32) for w in widths]
        idx = t32(rng.sample(range(rows), rng.randint(1, rows)))
        num_reqs = idx.numel()
        num_reqs_padded = num_reqs + rng.randint(0, 2)
        num_tokens_padded = num_reqs_padded + rng.randint(0, 2)
        # The target step: each request's query ends at seq_len; some reach max_model_len.
        query_lens = [rng.randint(1, k + 1) for _ in range(num_reqs)]
        target_seq_lens = [rng.randint(q, max_model_len) for q in query_lens]
        qsl = cumulative(query_lens)
        target_positions = torch.tensor([s - q + j for s, q in zip(target_seq_lens, query_lens) for j in range(q)])
        rejected = t32([rng.randint(0, q - 1) for q in query_lens])
        last = t32([qsl[r + 1] - 1 - int(rejected[r]) for r in range(num_reqs)])

        theirs = _MRV2DraftSteps(tables, cp, num_reqs_padded, num_tokens_padded, max_model_len, k)
        their_steps = [theirs.first(target_positions, last, t32(target_seq_lens), rejected, idx).clone()]
        snapshots = [(theirs.positions[:num_reqs].tolist(), theirs.seq_lens.tolist())]
        for _ in range(k - 2):
            their_steps.append(theirs.later(idx).clone())
            snapshots.append((theirs.positions[:num_reqs].tolist(), theirs.seq_lens.tolist()))
        their_qsl = theirs.query_start_loc.tolist()

        for backend in BACKENDS:
            seq_lens = torch.full((num_reqs_padded,), 55, dtype=I32)
            seq_lens[:num_reqs] = t32(target_seq_lens)
            slots = [torch.full((num_tokens_padded,), 77, dtype=torch.int64) for _ in DRAFT_GROUPS]
            out_qsl = torch.full((num_reqs_padded + 1,), 9, dtype=I32)
            positions = None
            with specops.backend(backend):
                for step, (their_slots, (their_positions, their_seq_lens)) in enumerate(zip(their_steps, snapshots)):
                    first = step == 0
                    result = specops.advance_draft_step(
                        target_positions if first else positions, seq_lens, tables,
                        [g[0] for g in DRAFT_GROUPS], max_model_len=max_model_len, past_max_model_len="clamp",
                        token_indices=last if first else None, num_rejected_tokens=rejected if first else None,
                        idx_mapping=idx, slot_mappings=slots, query_start_loc=out_qsl,
                        cp_sharded=[g[1] for g in DRAFT_GROUPS], slot_mapping_enabled=[g[2] for g in DRAFT_GROUPS],
                        cp_world_size=world, cp_rank=cp[1],
                        cp_interleave=cp[2], num_reqs_padded=num_reqs_padded)
                    positions = result.positions
                    what = f"trial {trial} step {step} {backend}"
                    assert positions.tolist() == their_positions, what
                    assert seq_lens.tolist() == their_seq_lens, what
                    assert [s.tolist() for s in slots] == their_slots.tolist(), what
                    assert out_qsl.tolist() == their_qsl, what
