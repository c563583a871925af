"""vLLM 0.33's input preparation against specops: positions and seq_lens (model runner V2's
`_prepare_pos_seq_lens_kernel`, request-indexed counts read through idx_mapping) and the async
spec-decode count correction (`update_num_computed_tokens_for_batch_change`), on random valid
inputs, every specops backend."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import BACKENDS
from vllm.v1.spec_decode import utils as spec_decode_utils
from vllm.v1.worker.gpu import input_batch

import specops

STALE = 4321

# torch.compile(dynamic=True) around a plain torch function: its body is what runs here.
_update_counts = spec_decode_utils.update_num_computed_tokens_for_batch_change
update_num_computed_tokens_for_batch_change = getattr(_update_counts, "_torchdynamo_orig_callable", _update_counts)


def random_batch(rng: random.Random, max_num_reqs: int):
    """Requests on distinct rows of a request-indexed count buffer, decodes and short prefills."""
    num_reqs = rng.randint(0, max_num_reqs)
    rows = rng.sample(range(max_num_reqs), num_reqs)
    query_lens = [rng.randint(1, 3) if rng.random() < 0.7 else rng.randint(0, 9) for _ in rows]
    counts = torch.tensor([rng.randint(0, 5000) for _ in range(max_num_reqs)], dtype=torch.int32)
    query_start_loc = torch.tensor([0] + torch.tensor(query_lens, dtype=torch.int64).cumsum(0).tolist(),
                                   dtype=torch.int32)
    return torch.tensor(rows, dtype=torch.int32), query_start_loc, counts


def test_positions_and_seq_lens_agree_with_vllm():
    rng = random.Random(3)
    max_num_reqs, max_num_tokens = 12, 80
    for trial in range(12):
        idx_mapping, query_start_loc, counts = random_batch(rng, max_num_reqs)
        num_reqs, num_tokens = idx_mapping.numel(), int(query_start_loc[-1])
        their_positions = torch.full((max_num_tokens,), STALE, dtype=torch.int64)
        their_seq_lens = torch.full((max_num_reqs,), STALE, dtype=torch.int32)
        input_batch.prepare_pos_seq_lens(idx_mapping, query_start_loc, counts, their_positions, their_seq_lens)
        for backend in BACKENDS:
            with specops.backend(backend):
                positions, seq_lens = specops.prepare_positions_and_seq_lens(
                    counts, query_start_loc, positions=torch.full((max_num_tokens,), 7, dtype=torch.int64),
                    seq_lens=torch.full((max_num_reqs,), 7, dtype=torch.int32), idx_mapping=idx_mapping)
            what = f"trial {trial} on {backend}"
            assert positions[:num_tokens].tolist() == their_positions[:num_tokens].tolist(), what
            # vLLM zeroes the whole seq_lens buffer past R, as specops does (num_reqs_padded: all).
            assert seq_lens.tolist() == their_seq_lens.tolist(), what
            assert num_reqs == 0 or seq_lens[:num_reqs].tolist() == \
                (counts[idx_mapping.long()] + query_start_loc.diff()).tolist(), what


def test_vllm_leaves_positions_past_the_tokens_stale():
    """Deliberate difference: vLLM writes the batch's positions only, so a captured graph padded
    past them reads last step's values; specops writes 0 over [T, num_tokens_padded)."""
    counts = torch.tensor([10, 20], dtype=torch.int32)
    idx_mapping, query_start_loc = torch.tensor([1], dtype=torch.int32), torch.tensor([0, 2], dtype=torch.int32)
    their_positions = torch.full((5,), STALE, dtype=torch.int64)
    input_batch.prepare_pos_seq_lens(idx_mapping, query_start_loc, counts, their_positions,
                                     torch.zeros(2, dtype=torch.int32))
    assert their_positions.tolist() == [20, 21, STALE, STALE, STALE]
    for backend in BACKENDS:
        with specops.backend(backend):
            positions, _ = specops.prepare_positions_and_seq_lens(
                counts, query_start_loc, positions=torch.full((5,), STALE, dtype=torch.int64), idx_mapping=idx_mapping)
        assert positions.tolist() == [20, 21, 0, 0, 0], backend


def random_correction(rng: random.Random):
    """A previous batch of m rows and a current one of n rows, each current row continuing a
    previous row (prev_positions[i] = its old row) or new (-1); valid inputs for vLLM: every
    gathered index is inside every tensor."""
    num_prev, num_rows = rng.randint(0, 10), rng.randint(0, 10)
    previous = rng.sample(range(num_prev), min(num_prev, num_rows))
    prev_positions = previous + [-1] * (num_rows - len(previous))
    rng.shuffle(prev_positions)
    size = max(num_prev, num_rows)
    drafts = [rng.choice([0, 0, 1, 3, 5]) for _ in range(max(num_prev, 1))]
    valid = [rng.randint(1, d + 1) for d in drafts]
    return dict(
        num_computed_tokens=torch.tensor([rng.randint(0, 3000) for _ in range(size)], dtype=torch.int32),
        num_accepted_tokens=torch.tensor([rng.randint(0, 5) for _ in range(num_rows)], dtype=torch.int32),
        prev_positions=torch.tensor(prev_positions, dtype=rng.choice([torch.int32, torch.int64])),
        valid_sampled_token_count=torch.tensor(valid, dtype=torch.int32),
        prev_num_draft_tokens=torch.tensor(drafts, dtype=torch.int32),
        cpu_num_computed_tokens=torch.tensor([rng.randint(0, 3000) for _ in range(num_rows)], dtype=torch.int32),
    )


# vllm-ascend's valid counts are int64 (a mask's sum in vllm_ascend/spec_decode/llm_base_proposer.py)
# and the peer's body takes them by `.int()`; a runner may keep int64 host counts.
@pytest.mark.parametrize("valid_dtype,host_dtype", [(torch.int32, torch.int32), (torch.int64, torch.int32),
                                                    (torch.int64, torch.int64)])
def test_count_correction_agrees_with_vllm(valid_dtype, host_dtype):
    rng = random.Random(8)
    for trial in range(40):
        call = random_correction(rng)
        call["valid_sampled_token_count"] = call["valid_sampled_token_count"].to(valid_dtype)
        call["cpu_num_computed_tokens"] = call["cpu_num_computed_tokens"].to(host_dtype)
        theirs = {name: t.clone() for name, t in call.items()}
        update_num_computed_tokens_for_batch_change(**theirs)
        for backend in BACKENDS:
            ours = {name: t.clone() for name, t in call.items()}
            with specops.backend(backend):
                specops.correct_num_computed_tokens(**ours)
            for name in ("num_computed_tokens", "num_accepted_tokens"):
                assert ours[name].tolist() == theirs[name].tolist(), f"trial {trial} on {backend}: {name}"
