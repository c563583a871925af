"""Benchmark of expand_parallel_draft_inputs: one launch for every group against the torch eager
composition a runner would write (the copy-and-expand, then the slots one group after another,
as vLLM's compute_new_slot_mapping does for its one table)."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case

SHAPES = [8, 64, 256]
QUICK_SHAPES = [8]
QUERY = 4  # target tokens per request (K = 3 drafts + 1)
SLOTS = 4  # the bonus token and 3 parallel-drafting slots
BLOCK_SIZES = (16, 32, 64)
MAX_MODEL_LEN = 4096


def _eager(target_ids, target_positions, next_ids, qsl, rejected, tables, block_sizes):
    """Eagle (shift) layout in torch ops: every request's q - 1 + S outputs."""
    num_reqs = next_ids.numel()
    n = SLOTS - 1
    device = target_ids.device
    q0, q = qsl[:-1].long(), (qsl[1:] - qsl[:-1]).long()
    nv = q - rejected.long() - 1
    counts = q + n
    req = torch.repeat_interleave(torch.arange(num_reqs, device=device), counts)
    j = torch.arange(req.numel(), device=device) - (torch.cumsum(counts, 0) - counts)[req]
    is_rejected = j >= nv[req] + SLOTS
    is_masked = (j > nv[req]) & ~is_rejected
    copied = target_ids[(q0[req] + j + 1).clamp(max=target_ids.numel() - 1)]
    ids = torch.where(j < nv[req], copied, torch.where(j == nv[req], next_ids[req], 999))
    ids = ids.masked_fill(is_rejected, 0)
    positions = (target_positions[q0][req] + j).masked_fill(is_rejected, 0)
    slots = []
    for table, block_size in zip(tables, block_sizes):
        clamped = positions.clamp(max=MAX_MODEL_LEN - 1)
        block = table[req, clamped // block_size].long()
        slot = block * block_size + clamped % block_size
        slots.append(slot.masked_fill((positions >= MAX_MODEL_LEN) | is_rejected, -1))
    return ids, positions, is_rejected, is_masked, slots


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs in QUICK_SHAPES if quick else SHAPES:
        generator = torch.Generator().manual_seed(num_reqs)

        def on(t: torch.Tensor) -> torch.Tensor:
            return t.to(device)

        num_tokens = num_reqs * QUERY
        starts = torch.randint(0, MAX_MODEL_LEN - QUERY - SLOTS, (num_reqs,), generator=generator)
        target_positions = on((starts.view(-1, 1) + torch.arange(QUERY)).view(-1))
        target_ids = on(torch.randint(0, 32000, (num_tokens,), generator=generator))
        next_ids = on(torch.randint(0, 32000, (num_reqs,), generator=generator))
        qsl = on(torch.arange(num_reqs + 1, dtype=torch.int32) * QUERY)
        rejected = on(torch.randint(0, QUERY, (num_reqs,), generator=generator, dtype=torch.int32))
        tables = [on(torch.randint(0, 1 << 20, (num_reqs, -(-MAX_MODEL_LEN // bs)), generator=generator,
                                   dtype=torch.int32)) for bs in BLOCK_SIZES]
        num_out = num_tokens + num_reqs * (SLOTS - 1)
        outputs = dict(input_ids=on(torch.empty(num_out, dtype=torch.int32)),
                       positions=on(torch.empty(num_out, dtype=torch.int64)),
                       is_rejected_token_mask=on(torch.empty(num_out, dtype=torch.bool)),
                       is_masked_token_mask=on(torch.empty(num_out, dtype=torch.bool)),
                       token_indices_to_sample=on(torch.empty(num_reqs * SLOTS, dtype=torch.int32)),
                       hidden_state_mapping=on(torch.empty(num_tokens, dtype=torch.int32)),
                       slot_mappings=[on(torch.empty(num_out, dtype=torch.int64)) for _ in BLOCK_SIZES],
                       out_query_start_loc=on(torch.empty(num_reqs + 1, dtype=torch.int32)))

        def one_launch():
            specops.expand_parallel_draft_inputs(
                target_ids, target_positions, next_ids, qsl, tables, list(BLOCK_SIZES), slots_per_request=SLOTS,
                max_model_len=MAX_MODEL_LEN, parallel_drafting_token_id=999, num_rejected_tokens=rejected, **outputs)

        result.append(Case("expand_parallel_draft_inputs", f"R={num_reqs} q={QUERY} S={SLOTS} groups={len(BLOCK_SIZES)}",
                           num_reqs, num_out, {
                               "specops": one_launch,
                               "torch-eager": lambda: _eager(target_ids, target_positions, next_ids, qsl, rejected,
                                                             tables, BLOCK_SIZES),
                           }, baselines=("torch-eager",)))
    return result
