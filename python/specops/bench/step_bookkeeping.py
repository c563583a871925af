"""Benchmarks of the step-bookkeeping ops against what a runner would otherwise write: the torch
eager composition, and for advance_draft_step the vLLM-style chain of one launch per group
(the same op called once per KV-cache group) against all groups in one launch."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case

SHAPES = [8, 64, 256]
QUICK_SHAPES = [8]
K = 3
BLOCK_SIZES = (16, 32, 64)  # three KV-cache groups
MAX_MODEL_LEN = 4096


def _counts_eager(num_sampled, seq_lens, cu, idx, prefill_len):
    chunked = seq_lens < prefill_len[idx.long()]
    sampled = num_sampled.masked_fill(chunked, 0)
    rejected = (cu[1:] - cu[:-1] - sampled).masked_fill(chunked, 0)
    return sampled, rejected


def _draft_step_eager(positions, seq_lens, tables, block_sizes):
    """The V1 "reset" step in torch, one group after another."""
    p = positions + 1
    over = p >= MAX_MODEL_LEN
    position = p.masked_fill(over, 0)
    new_seq = torch.where(over, torch.ones_like(seq_lens), seq_lens + 1).clamp(max=MAX_MODEL_LEN)
    rows = torch.arange(positions.numel(), device=positions.device)
    slots = []
    for table, block_size in zip(tables, block_sizes):
        block = table[rows, (position // block_size).clamp(max=table.size(1) - 1)].long()
        slots.append((block * block_size + position % block_size).masked_fill(over, -1))
    return position, new_seq, slots


def _next_tokens_eager(sampled, vocab, backup):
    valid = (sampled >= 0) & (sampled < vocab)
    count = valid.sum(1)
    columns = torch.arange(sampled.size(1), device=sampled.device).expand_as(sampled)
    last = torch.where(valid, columns, -1).max(1).values.clamp(min=0)
    chosen = sampled.gather(1, last.view(-1, 1)).view(-1)
    return torch.where(count > 0, chosen, backup.long()), count


def cases_of(op: str, device: torch.device, quick: bool) -> list[Case]:
    """The cases of one op (each op's bench module asks for its own)."""
    return [case for case in _cases(device, quick) if case.op == op]


def _cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs in QUICK_SHAPES if quick else SHAPES:
        generator = torch.Generator().manual_seed(num_reqs)
        rows = num_reqs

        def on(t: torch.Tensor) -> torch.Tensor:
            return t.to(device)

        idx = on(torch.randperm(rows, generator=generator).to(torch.int32))
        counts = torch.randint(1, K + 2, (num_reqs,), generator=generator)
        cu = on(torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32))
        num_sampled = on((torch.rand(num_reqs, generator=generator) * counts).long().to(torch.int32) + 1).clamp(
            max=on(counts.to(torch.int32)))
        seq_lens = on(torch.randint(100, 2000, (num_reqs,), generator=generator, dtype=torch.int32))
        prefill_len = on(torch.randint(0, 200, (rows,), generator=generator, dtype=torch.int32))
        rejected = torch.empty_like(seq_lens)
        result.append(Case("count_sampled_and_rejected", f"R={num_reqs}", num_reqs, num_reqs, {
            "specops": lambda: specops.count_sampled_and_rejected(num_sampled, seq_lens, cu, idx, prefill_len,
                                                                  num_rejected=rejected),
            "torch-eager": lambda: _counts_eager(num_sampled, seq_lens, cu, idx, prefill_len),
        }, baselines=("torch-eager",)))

        sampled = on(torch.randint(-1, 1000, (num_reqs, K + 1), generator=generator))
        backup = on(torch.randint(0, 1000, (num_reqs,), generator=generator, dtype=torch.int32))
        next_ids, next_counts = torch.empty_like(backup), torch.empty_like(backup)
        result.append(Case("prepare_next_token_ids", f"R={num_reqs} K={K}", num_reqs, num_reqs, {
            "specops": lambda: specops.prepare_next_token_ids(sampled, 1000, backup_next_token_ids=backup,
                                                              next_token_ids=next_ids,
                                                              valid_sampled_token_count=next_counts),
            "torch-eager": lambda: _next_tokens_eager(sampled, 1000, backup),
        }, baselines=("torch-eager",)))

        positions = on(torch.randint(0, MAX_MODEL_LEN, (num_reqs,), generator=generator))
        tables = [on(torch.randint(0, 1 << 20, (num_reqs, -(-MAX_MODEL_LEN // bs)), generator=generator,
                                   dtype=torch.int32)) for bs in BLOCK_SIZES]
        slots = [on(torch.empty(num_reqs, dtype=torch.int64)) for _ in BLOCK_SIZES]
        out_positions = torch.empty_like(positions)
        lens = seq_lens.clone()

        def one_launch():
            lens.copy_(seq_lens)
            specops.advance_draft_step(positions, lens, tables, list(BLOCK_SIZES), max_model_len=MAX_MODEL_LEN,
                                       out_positions=out_positions, slot_mappings=slots)

        def per_group():
            # vLLM's V1 Eagle step: one launch per KV-cache group, each recomputing positions.
            for table, block_size, out in zip(tables, BLOCK_SIZES, slots):
                lens.copy_(seq_lens)
                specops.advance_draft_step(positions, lens, [table], block_size, max_model_len=MAX_MODEL_LEN,
                                           out_positions=out_positions, slot_mappings=[out])

        result.append(Case("advance_draft_step", f"R={num_reqs} groups={len(BLOCK_SIZES)}", num_reqs, num_reqs, {
            "specops": one_launch,
            "per-group-launches": per_group,
            "torch-eager": lambda: _draft_step_eager(positions, seq_lens, tables, BLOCK_SIZES),
        }, baselines=("per-group-launches", "torch-eager")))
    return result
