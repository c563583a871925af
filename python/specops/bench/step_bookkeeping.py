"""Benchmarks of the step-bookkeeping ops against what a runner would otherwise write: the torch
eager composition, and for advance_draft_step the vLLM-style chain of one launch per group
(the same op called once per KV-cache group) against all groups in one launch.

Every implementation's launches are counted (specops.launch_count, the report's
`ops s+a` column). vLLM's own kernels do not run here; each case's extras name how many kernel
launches vLLM 0.33 spends on the same work (VLLM_LAUNCHES, read from its code):
prepare_input_ids replaces `_expand_idx_mapping_kernel`, `_prepare_prefill_inputs_kernel` and
`_combine_sampled_and_draft_tokens_kernel`; prepare_next_token_ids (with sample indices)
`eagle_prepare_next_token_padded_kernel` and `eagle_prepare_inputs_padded_kernel`;
advance_draft_step one `eagle_step_slot_mapping_metadata_kernel` per group (V1), and with the
token bookkeeping `_update_draft_inputs_kernel` + `_compute_slot_mappings_kernel` (MRV2's
speculator step, the "MRV2 update" cases);
count_sampled_and_rejected and post_update_after_sampling one kernel each, as in vLLM.
"""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case

SHAPES = [8, 64, 256]
QUICK_SHAPES = [8]
K = 3
BLOCK_SIZES = (16, 32, 64)  # three KV-cache groups
MAX_MODEL_LEN = 4096


VLLM_LAUNCHES = {"prepare_input_ids": 3, "count_sampled_and_rejected": 1, "post_update_after_sampling": 1,
                 "prepare_next_token_ids": 2, "advance_draft_step": len(BLOCK_SIZES)}


def _input_ids_eager(input_ids, idx, qsl, last, drafts, cu):
    """A decode batch's input ids and logits indices in torch ops: the last sampled token and
    the drafts at the end of each query, the logits indices and the expanded request rows."""
    rows = idx.long()
    n_log = (cu[1:] - cu[:-1]).long()
    q1 = qsl[1:].long()
    req = torch.repeat_interleave(torch.arange(idx.numel(), device=idx.device), n_log)
    j = torch.arange(req.numel(), device=idx.device) - cu[:-1].long()[req]
    logits_indices = q1[req] - n_log[req] + j
    input_ids[logits_indices] = torch.where(j == 0, last[rows][req], drafts[rows[req], (j - 1).clamp(min=0)]).to(
        input_ids.dtype)
    return logits_indices, rows[req].to(idx.dtype), j.to(torch.int32)


def _post_update_eager(idx, num_computed, qsl, sampled, num_sampled, num_rejected, last, all_ids, total_len, bins):
    """Request state after sampling in torch ops (every row mapped, no repeats)."""
    rows = idx.long()
    ns = num_sampled.long()
    kept = torch.arange(sampled.size(1), device=sampled.device) < ns.view(-1, 1)
    r, i = kept.nonzero(as_tuple=True)
    tokens = sampled[r, i]
    all_ids[rows[r], total_len[rows[r]].long() + i] = tokens.to(all_ids.dtype)
    bins.index_put_((rows[r], tokens.long()), torch.ones_like(tokens, dtype=bins.dtype), accumulate=True)
    has = ns > 0
    last[rows[has]] = sampled[has, ns[has] - 1].to(last.dtype)
    total_len[rows] += num_sampled
    num_computed[rows] += (qsl[1:] - qsl[:-1]) - num_rejected


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


def _next_tokens_eager(sampled, vocab, backup, cu_drafts, qsl):
    valid = (sampled >= 0) & (sampled < vocab)
    count = valid.sum(1)
    columns = torch.arange(sampled.size(1), device=sampled.device).expand_as(sampled)
    last = torch.where(valid, columns, -1).max(1).values.clamp(min=0)
    chosen = sampled.gather(1, last.view(-1, 1)).view(-1)
    drafts = torch.diff(cu_drafts, prepend=cu_drafts.new_zeros(1))
    rejected = torch.where(drafts > 0, drafts + 1 - count, 0)
    return torch.where(count > 0, chosen, backup.long()), count, rejected, qsl[1:] - 1 - rejected


def cases_of(op: str, device: torch.device, quick: bool) -> list[Case]:
    """The cases of one op (each op's bench module asks for its own)."""
    cases = [case for case in _cases(device, quick) if case.op == op]
    for case in cases:
        case.extras.setdefault("vLLM 0.33 launches", VLLM_LAUNCHES[op])
    return cases


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
        next_rejected, next_indices = torch.empty_like(backup), torch.empty_like(backup)
        # The V1 padded layout: K drafts and 1 + K query tokens per request.
        cu_drafts = on(torch.arange(1, num_reqs + 1, dtype=torch.int32) * K)
        next_qsl = on(torch.arange(num_reqs + 1, dtype=torch.int32) * (K + 1))
        result.append(Case("prepare_next_token_ids", f"R={num_reqs} K={K}", num_reqs, num_reqs, {
            "specops": lambda: specops.prepare_next_token_ids(
                sampled, 1000, backup_next_token_ids=backup, cu_num_draft_tokens=cu_drafts, query_start_loc=next_qsl,
                next_token_ids=next_ids, valid_sampled_token_count=next_counts, num_rejected_tokens=next_rejected,
                token_indices_to_sample=next_indices),
            "torch-eager": lambda: _next_tokens_eager(sampled, 1000, backup, cu_drafts, next_qsl),
        }, baselines=("torch-eager",)))

        # A decode batch: 1 + K tokens and logits per request, request rows shuffled.
        width = 64
        decode_qsl = on(torch.arange(num_reqs + 1, dtype=torch.int32) * (K + 1))
        state = dict(num_computed=on(torch.randint(16, 32, (rows,), generator=generator, dtype=torch.int32)),
                     prefill=on(torch.full((rows,), 8, dtype=torch.int32)),
                     last=on(torch.randint(0, 1000, (rows,), generator=generator)),
                     drafts=on(torch.randint(0, 1000, (rows, K), generator=generator)),
                     all_ids=on(torch.randint(0, 1000, (rows, width), generator=generator, dtype=torch.int32)),
                     lookahead=on(torch.zeros(1, rows, dtype=torch.int32)))
        ids = on(torch.empty(num_reqs * (K + 1), dtype=torch.int32))
        logit_outputs = dict(logits_indices=on(torch.empty(num_reqs * (K + 1), dtype=torch.int64)),
                             expanded_idx_mapping=on(torch.empty(num_reqs * (K + 1), dtype=idx.dtype)),
                             expanded_local_pos=on(torch.empty(num_reqs * (K + 1), dtype=torch.int32)))
        result.append(Case("prepare_input_ids", f"R={num_reqs} K={K}", num_reqs, num_reqs * (K + 1), {
            "specops": lambda: specops.prepare_input_ids(
                ids, idx, decode_qsl, state["num_computed"], state["prefill"], state["last"], state["drafts"],
                decode_qsl, all_token_ids=state["all_ids"], next_prefill_tokens=state["lookahead"], **logit_outputs),
            "torch-eager": lambda: _input_ids_eager(ids, idx, decode_qsl, state["last"], state["drafts"], decode_qsl),
        }, baselines=("torch-eager",)))

        # Request state after the step: each request keeps 1 .. K + 1 tokens. total_len is reset
        # before every call of either implementation (one copy_ launch each, counted): it would
        # otherwise run past the token table.
        kept = on(torch.randint(1, K + 2, (num_reqs,), generator=generator, dtype=torch.int32))
        sampled_tokens = on(torch.randint(0, 1000, (num_reqs, K + 1), generator=generator))
        post_rejected = (K + 1) - kept
        fresh_total_len = on(torch.full((rows,), 8, dtype=torch.int32))
        post = dict(num_computed=state["num_computed"].clone(), total_len=fresh_total_len.clone(),
                    last=state["last"].clone(), all_ids=state["all_ids"].clone(),
                    bins=on(torch.zeros(rows, 1000, dtype=torch.int32)))

        def reset_post():
            post["total_len"].copy_(fresh_total_len)

        def post_specops():
            reset_post()
            specops.post_update_after_sampling(
                idx, post["num_computed"], query_start_loc=decode_qsl, sampled_tokens=sampled_tokens,
                num_sampled=kept, num_rejected=post_rejected, last_sampled_tokens=post["last"],
                all_token_ids=post["all_ids"], total_len=post["total_len"], output_bin_counts=post["bins"])

        def post_eager():
            reset_post()
            _post_update_eager(idx, post["num_computed"], decode_qsl, sampled_tokens, kept, post_rejected,
                               post["last"], post["all_ids"], post["total_len"], post["bins"])

        result.append(Case("post_update_after_sampling", f"R={num_reqs} K={K}", num_reqs, num_reqs * (K + 1), {
            "specops": post_specops, "torch-eager": post_eager,
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
        result.append(_mrv2_update_case(num_reqs, on, generator))
    return result


HIDDEN = 1024


def _mrv2_update_case(num_reqs: int, on, generator: torch.Generator) -> Case:
    """Model runner V2's draft step 1 of K: the sampled drafts stored, the next input ids, sampling
    keys and hidden rows, positions and seq_lens + 1 (clamped) and every group's slot mapping of
    the request-indexed tables, against the same in torch ops (which take the step on the host:
    the op reads it on the device)."""
    rows = num_reqs + 4
    idx = on(torch.randperm(rows, generator=generator)[:num_reqs])
    tables = [on(torch.randint(0, 1 << 20, (rows, -(-MAX_MODEL_LEN // bs)), generator=generator, dtype=torch.int32))
              for bs in BLOCK_SIZES]
    positions0 = on(torch.randint(0, MAX_MODEL_LEN, (num_reqs,), generator=generator))
    seq_lens0 = (positions0 + 1).to(torch.int32)
    positions, seq_lens = positions0.clone(), seq_lens0.clone()
    sampled = on(torch.randint(0, 32000, (num_reqs,), generator=generator))
    drafts = on(torch.zeros(num_reqs, K, dtype=torch.int64))
    step = on(torch.tensor(1))
    input_ids = on(torch.zeros(num_reqs, dtype=torch.int32))
    keys = on(torch.zeros(num_reqs, dtype=torch.int64))
    hidden = on(torch.randn(num_reqs, HIDDEN, generator=generator).to(torch.bfloat16))
    next_hidden = torch.empty_like(hidden)
    slots = [on(torch.empty(num_reqs, dtype=torch.int64)) for _ in BLOCK_SIZES]

    def fused():
        positions.copy_(positions0)
        seq_lens.copy_(seq_lens0)
        specops.advance_draft_step(
            positions, seq_lens, tables, list(BLOCK_SIZES), max_model_len=MAX_MODEL_LEN, past_max_model_len="clamp",
            idx_mapping=idx, slot_mappings=slots, input_ids=input_ids, draft_tokens=drafts, sampled_tokens=sampled,
            draft_step=step, num_draft_steps=K, sample_positions=keys, hidden_states=hidden,
            next_hidden_states=next_hidden)

    def eager():
        positions.copy_(positions0)
        seq_lens.copy_(seq_lens0)
        drafts[:, 1] = sampled
        input_ids.copy_(sampled)
        keys.add_(1)
        next_hidden.copy_(hidden)
        positions.add_(1).clamp_(max=MAX_MODEL_LEN - 1)
        seq_lens.add_(1).clamp_(max=MAX_MODEL_LEN)
        for table, block_size, out in zip(tables, BLOCK_SIZES, slots):
            out.copy_(table[idx, positions // block_size].long() * block_size + positions % block_size)

    return Case("advance_draft_step", f"R={num_reqs} groups={len(BLOCK_SIZES)} MRV2 update H={HIDDEN}", num_reqs,
                num_reqs, {"specops": fused, "torch-eager": eager}, baselines=("torch-eager",),
                extras={"vLLM 0.33 launches": 2})
