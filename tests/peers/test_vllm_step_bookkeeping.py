"""vLLM 0.33's step-bookkeeping kernels against specops on random valid inputs, every backend:
`get_num_sampled_and_rejected` (count_sampled_and_rejected), `post_update` and
`post_update_num_computed_tokens` (post_update_after_sampling), `eagle_prepare_next_token_padded_kernel`
(prepare_next_token_ids) and `eagle_step_slot_mapping_metadata_kernel` (advance_draft_step,
"reset"). The warm-up dispatchers need a GPU: their @triton.jit kernels are launched here with
the grid and arguments the Python launchers compute."""

from __future__ import annotations

import random

import torch
from conftest import BACKENDS
from vllm.v1.spec_decode import utils as spec_decode_utils
from vllm.v1.worker.gpu import input_batch

import specops

I32 = torch.int32


def t32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def test_sampled_and_rejected_agree_with_vllm():
    rng = random.Random(5)
    for trial in range(10):
        rows = rng.randint(1, 8)
        idx = rng.sample(range(rows), rng.randint(0, rows))
        counts = [rng.randint(1, 4) for _ in idx]
        cu = t32([0] + [sum(counts[:i + 1]) for i in range(len(idx))])
        prefill = t32([rng.randint(0, 20) for _ in range(rows)])
        seq_lens = t32([rng.randint(0, 25) for _ in idx])
        sampled = t32([rng.randint(0, c) for c in counts])
        theirs, their_rejected = input_batch.get_num_sampled_and_rejected(sampled.clone(), seq_lens, cu, t32(idx), prefill)
        for backend in BACKENDS:
            with specops.backend(backend):
                ours = specops.count_sampled_and_rejected(sampled.clone(), seq_lens, cu, t32(idx), prefill)
            assert ours.num_sampled.tolist() == theirs.tolist(), f"trial {trial} {backend}"
            assert ours.num_rejected.tolist() == their_rejected.tolist(), f"trial {trial} {backend}"


def _state(rng: random.Random, rows: int, width: int, vocab: int, steps: int):
    return dict(num_computed_tokens=t32([rng.randint(0, 50) for _ in range(rows)]),
                last_sampled_tokens=torch.tensor([rng.randint(0, vocab - 1) for _ in range(rows)]),
                output_bin_counts=torch.randint(0, 3, (rows, vocab), dtype=I32),
                all_token_ids=torch.randint(0, vocab, (rows, width), dtype=I32),
                total_len=t32([rng.randint(0, width - steps - 1) for _ in range(rows)]))


def test_post_update_agrees_with_vllm():
    rng = random.Random(6)
    rows, width, vocab, steps = 6, 24, 16, 3
    for trial in range(10):
        idx = rng.sample(list(range(rows)) + [-1], rng.randint(0, rows))
        num_reqs = len(idx)
        sampled = torch.randint(0, vocab, (num_reqs, steps + 1))
        num_sampled = t32([rng.randint(0, steps + 1) for _ in idx])
        num_rejected = t32([rng.randint(0, 2) for _ in idx])
        qsl = t32([0] + [3 * (i + 1) for i in range(num_reqs)])
        drafts = torch.randint(0, vocab, (num_reqs, steps))
        state = _state(rng, rows, width, vocab, steps)
        theirs = {name: t.clone() for name, t in state.items()}
        their_drafts = torch.zeros(rows, steps, dtype=torch.int64)
        input_batch.post_update(t32(idx), theirs["num_computed_tokens"], theirs["last_sampled_tokens"],
                                theirs["output_bin_counts"], sampled, num_sampled, num_rejected, qsl,
                                theirs["all_token_ids"], theirs["total_len"], drafts, their_drafts)
        for backend in BACKENDS:
            our_drafts = torch.zeros(rows, steps, dtype=torch.int64)
            with specops.backend(backend):
                counts = state["num_computed_tokens"].clone()
                ours = {name: t.clone() for name, t in state.items() if name != "num_computed_tokens"}
                specops.post_update_after_sampling(t32(idx), counts, query_start_loc=qsl, sampled_tokens=sampled,
                                                   num_sampled=num_sampled, num_rejected=num_rejected,
                                                   draft_tokens=drafts, draft_tokens_out=our_drafts, **ours)
            what = f"trial {trial} {backend}"
            assert counts.tolist() == theirs["num_computed_tokens"].tolist(), what
            for name, tensor in ours.items():
                assert tensor.tolist() == theirs[name].tolist(), f"{what}: {name}"
            assert our_drafts.tolist() == their_drafts.tolist(), what


def test_pooling_post_update_agrees_with_vllm():
    rng = random.Random(7)
    for trial in range(8):
        rows = rng.randint(1, 6)
        idx = rng.sample(range(rows), rng.randint(0, rows))
        qsl = t32([0] + sorted(rng.randint(0, 30) for _ in idx))
        counts = t32([rng.randint(0, 100) for _ in range(rows)])
        theirs = counts.clone()
        input_batch.post_update_num_computed_tokens(t32(idx), theirs, qsl)
        for backend in BACKENDS:
            ours = counts.clone()
            with specops.backend(backend):
                specops.post_update_after_sampling(t32(idx), ours, query_start_loc=qsl)
            assert ours.tolist() == theirs.tolist(), f"trial {trial} {backend}"


def test_next_tokens_agree_with_the_eagle_kernel():
    """Valid input as the rejection sampler writes it: valid tokens form a prefix, the rest -1."""
    rng = random.Random(8)
    for trial in range(10):
        num_reqs, k, vocab = rng.randint(0, 6), rng.randint(0, 3), rng.randint(2, 40)
        sampled = torch.full((num_reqs, k + 1), -1, dtype=torch.int32)
        for r in range(num_reqs):
            kept = rng.randint(0, k + 1)
            sampled[r, :kept] = torch.tensor([rng.randrange(vocab) for _ in range(kept)], dtype=torch.int32)
        discard = torch.tensor([rng.random() < 0.3 for _ in range(num_reqs)], dtype=torch.bool)
        backup = t32([rng.randrange(vocab) for _ in range(num_reqs)])
        their_next, their_count = torch.zeros(num_reqs, dtype=I32), torch.zeros(num_reqs, dtype=I32)
        if num_reqs:
            spec_decode_utils.eagle_prepare_next_token_padded_kernel[(num_reqs,)](
                sampled, discard, backup, their_next, their_count, vocab, k + 1, num_reqs, sampled.stride(0),
                BLOCK_SIZE_TOKENS=specops_next_power_of_2(k + 1))
        for backend in BACKENDS:
            with specops.backend(backend):
                ours = specops.prepare_next_token_ids(sampled, vocab, discard_request_mask=discard,
                                                      backup_next_token_ids=backup)
            assert ours.next_token_ids.tolist() == their_next.tolist(), f"trial {trial} {backend}"
            assert ours.valid_sampled_token_count.tolist() == their_count.tolist(), f"trial {trial} {backend}"


def specops_next_power_of_2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def test_reset_draft_step_agrees_with_the_eagle_step_kernel():
    """One group, positions inside the table (vLLM clamps the column past it: a documented
    difference), block ids below 2^31 / block_size (vLLM multiplies in int32)."""
    rng = random.Random(9)
    for trial in range(8):
        num_reqs, block_size, limit = rng.randint(1, 6), rng.choice([4, 8, 16]), rng.randint(8, 64)
        cols = -(-limit // block_size)
        table = torch.randint(0, 1000, (num_reqs, cols), dtype=I32)
        positions = torch.tensor([rng.randint(0, limit - 1) for _ in range(num_reqs)])
        seq_lens = t32([int(p) + 1 for p in positions])
        padded = num_reqs + rng.randint(0, 2)
        their_seq_lens, their_positions = seq_lens.clone(), torch.zeros(num_reqs, dtype=torch.int64)
        their_slots = torch.full((padded,), 77, dtype=torch.int64)
        spec_decode_utils.eagle_step_slot_mapping_metadata_kernel[(padded,)](
            positions, table, table.stride(0), their_seq_lens, their_positions, their_slots, block_size=block_size,
            max_model_len=limit, n_blocks_per_req=cols, PAD_ID=specops.PAD_SLOT_ID, batch_size=num_reqs)
        for backend in BACKENDS:
            ours_seq_lens = seq_lens.clone()
            with specops.backend(backend):
                step = specops.advance_draft_step(positions.clone(), ours_seq_lens, [table], block_size,
                                                  max_model_len=limit, num_tokens_padded=padded)
            what = f"trial {trial} {backend}"
            assert step.positions.tolist() == their_positions.tolist(), what
            assert ours_seq_lens.tolist() == their_seq_lens.tolist(), what
            assert step.slot_mappings[0].tolist() == their_slots.tolist(), what
