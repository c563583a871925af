"""Benchmark of prepare_draft_prefill_inputs: model runner V2's draft prefill inputs and the
drafter's request-mapping copy, in one launch, against what a runner writes without the op.

Baselines: "torch-eager", vLLM's work in torch ops (the shifted ids, the next token, the kept
positions, the query layout and its padding, the step reset, and `_copy_request_inputs`' two
mapping ops), and the reference backend (for scale). vLLM 0.33 itself spends three launches
(`_prepare_prefill_inputs_kernel`, the mapping's `copy_` and `fill_`): the case's extras say so.
The batch is decodes of K = 3 drafts (each request keeps 1 .. 4 tokens) with every fourth
request a prefill chunk of 16 tokens (nothing sampled: the prompt's next token), into buffers
of a runner's max_num_reqs = 512 and its max_num_tokens.
"""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case

SHAPES = [8, 64, 256]
QUICK_SHAPES = [8]
K = 3
CHUNK = 16
MAX_NUM_REQS = 512
VLLM_LAUNCHES = 3


def _batch(num_reqs: int, device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(num_reqs)
    rows = 2 * num_reqs
    chunked = torch.arange(num_reqs) % 4 == 3
    query_lens = torch.where(chunked, CHUNK, K + 1)
    kept = torch.randint(1, K + 2, (num_reqs,), generator=generator)
    num_sampled = torch.where(chunked, 0, kept)
    num_rejected = torch.where(chunked, 0, K + 1 - kept)
    qsl = torch.cat([torch.zeros(1, dtype=torch.int64), query_lens.cumsum(0)])
    num_tokens = int(qsl[-1])
    max_num_tokens = MAX_NUM_REQS * (K + 1)

    def on(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return t.to(dtype).to(device)

    return dict(
        num_tokens=num_tokens,
        target_input_ids=on(torch.randint(0, 32000, (max_num_tokens,), generator=generator), torch.int32),
        target_positions=on(torch.randint(0, 4096, (max_num_tokens,), generator=generator), torch.int64),
        idx_mapping=on(torch.randperm(rows, generator=generator)[:num_reqs], torch.int32),
        query_start_loc=on(qsl, torch.int32),
        seq_lens=on(torch.randint(100, 4000, (num_reqs,), generator=generator), torch.int32),
        num_sampled=on(num_sampled, torch.int32), num_rejected=on(num_rejected, torch.int32),
        last_sampled_tokens=on(torch.randint(0, 32000, (rows, 1), generator=generator), torch.int64),
        next_prefill_tokens=on(torch.randint(0, 32000, (1, rows), generator=generator), torch.int32),
        input_ids=on(torch.zeros(max_num_tokens), torch.int32), positions=on(torch.zeros(max_num_tokens), torch.int64),
        out_query_start_loc=on(torch.zeros(MAX_NUM_REQS + 1), torch.int32),
        out_seq_lens=on(torch.zeros(MAX_NUM_REQS), torch.int32),
        last_token_indices=on(torch.zeros(MAX_NUM_REQS), torch.int64),
        current_draft_step=on(torch.tensor(1), torch.int64),
        request_idx_mapping=on(torch.zeros(MAX_NUM_REQS), torch.int64),
    )


def _eager(b: dict) -> None:
    """vLLM's kernel and mapping copy in torch ops, without a host sync (T is the runner's host count)."""
    num_reqs, num_tokens = b["idx_mapping"].numel(), b["num_tokens"]
    qsl = b["query_start_loc"]
    start = qsl[:-1]
    kept = qsl[1:] - start - b["num_rejected"]
    rows = b["idx_mapping"].long()
    next_token = torch.where(b["num_sampled"] > 0, b["last_sampled_tokens"][rows, 0].to(torch.int32),
                             b["next_prefill_tokens"][0, rows])
    request = torch.repeat_interleave(torch.arange(num_reqs, device=qsl.device), qsl[1:] - start,
                                      output_size=num_tokens)
    token = torch.arange(num_tokens, device=qsl.device)
    j = token - start[request]
    keep = j < kept[request]
    source = torch.where(j == kept[request] - 1, next_token[request],
                         b["target_input_ids"][(token + 1).clamp(max=num_tokens - 1)])
    ids, positions = b["input_ids"][:num_tokens], b["positions"][:num_tokens]
    ids.copy_(torch.where(keep, source, ids))
    positions.copy_(torch.where(keep, b["target_positions"][:num_tokens], positions))
    b["last_token_indices"][:num_reqs] = start + kept - 1
    b["last_token_indices"][num_reqs:] = 0
    b["out_query_start_loc"][:num_reqs] = start
    b["out_query_start_loc"][num_reqs:] = qsl[num_reqs]
    b["out_seq_lens"][:num_reqs] = b["seq_lens"]
    b["out_seq_lens"][num_reqs:] = 0
    b["current_draft_step"].fill_(0)
    b["request_idx_mapping"][:num_reqs].copy_(b["idx_mapping"])
    b["request_idx_mapping"][num_reqs:].fill_(-1)


_ARGS = ("target_input_ids", "target_positions", "idx_mapping", "query_start_loc", "seq_lens", "num_sampled",
         "num_rejected", "last_sampled_tokens", "next_prefill_tokens")
_OUTPUTS = ("input_ids", "positions", "out_query_start_loc", "out_seq_lens", "last_token_indices",
            "current_draft_step", "request_idx_mapping")


def _specops(b: dict):
    args = tuple(b[name] for name in _ARGS)
    outputs = {name: b[name] for name in _OUTPUTS}
    return lambda: specops.prepare_draft_prefill_inputs(*args, **outputs)


def _reference(b: dict):
    run = _specops(b)

    def call():
        with specops.backend("reference"):
            run()
    return call


# The post-update part: the request state the step updates (tokens of a vocabulary of VOCAB, the
# token table WIDTH wide), restored before every call on both sides.
VOCAB, WIDTH = 4096, 8192
_STATE = ("num_computed_tokens", "total_len")


def _with_state(b: dict, device: torch.device) -> dict:
    num_reqs, rows = b["idx_mapping"].numel(), b["last_sampled_tokens"].size(0)
    generator = torch.Generator().manual_seed(rows)
    b.update(num_computed_tokens=torch.randint(0, 4000, (rows,), generator=generator).to(torch.int32).to(device),
             sampled_tokens=torch.randint(0, VOCAB, (num_reqs, K + 1), generator=generator).to(device),
             all_token_ids=torch.zeros(rows, WIDTH, dtype=torch.int32, device=device),
             total_len=torch.randint(0, WIDTH - K - 1, (rows,), generator=generator).to(torch.int32).to(device),
             output_bin_counts=torch.zeros(rows, VOCAB, dtype=torch.int32, device=device))
    b["pristine"] = {name: b[name].clone() for name in _STATE}
    return b


def _restore(b: dict) -> None:
    for name in _STATE:
        b[name].copy_(b["pristine"][name])


def _fused_update(b: dict):
    state = {name: b[name] for name in ("num_computed_tokens", "sampled_tokens", "all_token_ids", "total_len",
                                        "output_bin_counts")}
    args = tuple(b[name] for name in _ARGS)
    outputs = {name: b[name] for name in _OUTPUTS}

    def call():
        _restore(b)
        specops.prepare_draft_prefill_inputs(*args, **outputs, **state)
    return call


def _unfused_update(b: dict):
    run = _specops(b)

    def call():
        _restore(b)
        specops.post_update_after_sampling(
            b["idx_mapping"], b["num_computed_tokens"], query_start_loc=b["query_start_loc"],
            sampled_tokens=b["sampled_tokens"], num_sampled=b["num_sampled"], num_rejected=b["num_rejected"],
            last_sampled_tokens=b["last_sampled_tokens"], all_token_ids=b["all_token_ids"], total_len=b["total_len"],
            output_bin_counts=b["output_bin_counts"])
        run()
    return call


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs in QUICK_SHAPES if quick else SHAPES:
        ours, eager, reference = _batch(num_reqs, device), _batch(num_reqs, device), _batch(num_reqs, device)
        result.append(Case(
            "prepare_draft_prefill_inputs", f"R={num_reqs} K={K}", num_reqs, ours["num_tokens"],
            {"specops": _specops(ours), "torch-eager": lambda b=eager: _eager(b), "reference": _reference(reference)},
            baselines=("torch-eager",), references=("reference",),
            extras={"vLLM 0.33 launches": VLLM_LAUNCHES}))
        # With the post-update part (model runner V2's post_update in the same launch; vLLM: one
        # more launch) against the two ops one after the other.
        fused, apart = _with_state(_batch(num_reqs, device), device), _with_state(_batch(num_reqs, device), device)
        result.append(Case(
            "prepare_draft_prefill_inputs", f"with post-update R={num_reqs} K={K}", num_reqs, fused["num_tokens"],
            {"specops": _fused_update(fused), "native-unfused": _unfused_update(apart)},
            baselines=("native-unfused",), family="with post-update",
            extras={"vLLM 0.33 launches": VLLM_LAUNCHES + 1}))
    return result
