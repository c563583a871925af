"""The runner proofs' workload, one for every runner they drive (vLLM's model runner V2 in
drive_mrv2.py, vllm-ascend's in tests/vllm_ascend/drive_runner.py): a deterministic scheduler
that hands the runner the running vLLM's own SchedulerOutput objects, and the stand-in sampler's
acceptance. Import it after the driver's host set-up: its classes are that vLLM's."""

from __future__ import annotations

import random

import torch
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput

VOCAB = 97
MAX_NUM_REQS = 8
MAX_NUM_TOKENS = 96
MAX_MODEL_LEN = 192
TOKEN_BUDGET = 64
# vLLM 0.34 drops the (always empty) cascade-attention field; 0.26 and 0.33 still take it.
_HAS_COMMON_PREFIX_BLOCKS = "num_common_prefix_blocks" in SchedulerOutput.__dataclass_fields__


def groups_blocks(num_tokens: int, block_sizes: list[int], cp_widths: list[int]) -> list[int]:
    """Blocks each group's table needs for positions [0, num_tokens): a CP-sharded group's block
    covers block_size * cp_width positions, a replicated one's (cp_width 1) block_size."""
    return [-(-num_tokens // (size * width)) for size, width in zip(block_sizes, cp_widths)]


class Scheduler:
    """Joins and leaves, chunked prefill under a token budget, a prefix-cache hit now and then,
    decodes with 0..K drafts; blocks allocated per group ahead of what the step and its draft
    steps write, block ids never reused (slots stay below 2^31). cfg: seed, k."""

    def __init__(self, cfg, block_sizes: list[int], cp_widths: list[int], first_block: int = 1):
        self.cfg = cfg
        self.block_sizes, self.cp_widths = block_sizes, cp_widths
        self.rng = random.Random(cfg.seed)
        self.reqs: dict[str, dict] = {}
        self.next_id = 0
        self.next_block = [first_block] * len(block_sizes)
        self.finished: set[str] = set()

    def _allocate(self, req: dict, num_tokens: int) -> list[list[int]]:
        new = []
        for g, need in enumerate(groups_blocks(num_tokens, self.block_sizes, self.cp_widths)):
            have = len(req["blocks"][g])
            ids = list(range(self.next_block[g], self.next_block[g] + max(need - have, 0)))
            self.next_block[g] += len(ids)
            req["blocks"][g] += ids
            new.append(ids)
        return new

    def schedule(self, step: int) -> SchedulerOutput:
        rng, k = self.rng, self.cfg.k
        finished, self.finished = self.finished, set()
        for req_id in finished:
            del self.reqs[req_id]
        joining = []
        while len(self.reqs) + len(joining) < MAX_NUM_REQS and (step == 0 or rng.random() < 0.35):
            req_id = f"r{self.next_id}"
            self.next_id += 1
            prompt_len = rng.randint(3, 70)
            cached = 16 * rng.randint(0, (prompt_len - 1) // 16) if rng.random() < 0.3 else 0
            joining.append(req_id)
            self.reqs[req_id] = dict(prompt=[rng.randrange(VOCAB) for _ in range(prompt_len)], computed=cached,
                                     outputs=0, max_tokens=rng.randint(2, 30),
                                     blocks=[[] for _ in self.block_sizes], new=True)
            if step > 0 and rng.random() < 0.5:
                break
        budget = TOKEN_BUDGET
        num_scheduled, drafts, new_reqs = {}, {}, []
        cached = CachedRequestData.make_empty()
        for req_id, req in self.reqs.items():
            prompt_len = len(req["prompt"])
            if req["computed"] < prompt_len:
                chunk = min(prompt_len - req["computed"], budget, rng.randint(4, 40))
                num_drafts = 0
            else:
                # Near max_model_len a request decodes without drafts.
                num_drafts = max(0, min(rng.randint(0, k) if rng.random() < 0.3 else k,
                                        MAX_MODEL_LEN - 1 - req["computed"] - k))
                chunk = 1 + num_drafts
            if chunk <= 0 or chunk > budget:
                continue
            budget -= chunk
            num_scheduled[req_id] = chunk
            if num_drafts:
                drafts[req_id] = [0] * num_drafts
            new_blocks = self._allocate(req, req["computed"] + chunk + k + 1)
            if req.pop("new", False):
                new_reqs.append(NewRequestData(
                    req_id=req_id, prompt_token_ids=req["prompt"], mm_features=[],
                    sampling_params=SamplingParams(max_tokens=req["max_tokens"]), pooling_params=None,
                    block_ids=tuple(list(b) for b in req["blocks"]), num_computed_tokens=req["computed"],
                    lora_request=None, prefill_token_ids=req["prompt"]))
            else:
                cached.req_ids.append(req_id)
                cached.new_block_ids.append(tuple(new_blocks) if any(new_blocks) else None)
                cached.num_computed_tokens.append(req["computed"])
                cached.num_output_tokens.append(req["outputs"])
                cached.new_token_ids.append([])
        extra = {"num_common_prefix_blocks": [0] * len(self.block_sizes)} if _HAS_COMMON_PREFIX_BLOCKS else {}
        return SchedulerOutput(
            scheduled_new_reqs=new_reqs, scheduled_cached_reqs=cached, num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=sum(num_scheduled.values()), scheduled_spec_decode_tokens=drafts,
            scheduled_encoder_inputs={}, finished_req_ids=finished, free_encoder_mm_hashes=[], **extra)

    def update(self, req_ids: list[str], query_lens: list[int], num_sampled: list[int], num_rejected: list[int]):
        for req_id, query, sampled, rejected in zip(req_ids, query_lens, num_sampled, num_rejected):
            req = self.reqs[req_id]
            req["computed"] += query - rejected
            req["outputs"] += sampled
            if req["outputs"] >= req["max_tokens"] or self.rng.random() < 0.04:
                self.finished.add(req_id)


def stand_in_sampling(batch, rng: random.Random, k: int, rejection_sampler, sampler_module, prefill_len):
    """The stand-in sampler: how many tokens each request keeps (from rng) and which, then the
    running vLLM's own counts from them (its rejection sampler's when the step has drafts).
    Returns sampled, num_sampled, num_rejected and the step's "sampled" record."""
    cu = batch.cu_num_logits_np
    sampled = torch.full((batch.num_reqs, max(k, 0) + 1), -1, dtype=torch.int64)
    num_sampled = torch.ones(batch.num_reqs, dtype=torch.int32)
    for r in range(batch.num_reqs):
        kept = rng.randint(1, int(cu[r + 1] - cu[r]))
        num_sampled[r] = kept
        sampled[r, :kept] = torch.tensor([rng.randrange(VOCAB) for _ in range(kept)])
    owner = rejection_sampler if batch.num_draft_tokens > 0 else sampler_module
    num_sampled, num_rejected = owner.get_num_sampled_and_rejected(
        num_sampled, batch.seq_lens, batch.cu_num_logits, batch.idx_mapping, prefill_len)
    record = {"num_sampled": num_sampled, "num_rejected": num_rejected, "logits_indices": batch.logits_indices,
              "expanded_idx_mapping": batch.expanded_idx_mapping, "expanded_local_pos": batch.expanded_local_pos}
    return sampled, num_sampled, num_rejected, record
