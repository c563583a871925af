"""The world drive_mrv2.py runs vLLM's model runner V2 in: its sizes, its three KV-cache groups,
and a deterministic scheduler that hands the runner vLLM's own SchedulerOutput objects."""

from __future__ import annotations

import random
import types

import host

host.apply()

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput  # noqa: E402
from vllm.version import __version__ as VLLM_VERSION  # noqa: E402

VLLM_0_33 = VLLM_VERSION.startswith("0.33.")

HIDDEN = 8
VOCAB = 97
MAX_NUM_REQS = 8
MAX_NUM_TOKENS = 96
MAX_MODEL_LEN = 192
TOKEN_BUDGET = 64
# The three KV-cache groups: full attention (CP-sharded), sliding window (replicated, reach 24),
# and a group without a slot mapping (a state-space layer's table, gathered but never mapped).
BLOCK_SIZES = [16, 16, 32]
DCP_SHARDED = [True, False, True]
SLOT_MAPPING_ENABLED = [True, True, False]
SLIDING_WINDOW_REACH = [0, 24, 0]


class Config(types.SimpleNamespace):
    """name, seed, steps, k (drafts), dcp (size), dcp_rank, pcp (size), pcp_rank."""


def _groups_blocks(num_tokens: int, dcp: int) -> list[int]:
    """Blocks each group's table needs for positions [0, num_tokens)."""
    return [-(-num_tokens // (bs * (dcp if sharded else 1))) for bs, sharded in zip(BLOCK_SIZES, DCP_SHARDED)]


class Scheduler:
    """A deterministic scheduler: joins and leaves, chunked prefill under a token budget, a
    prefix-cache hit now and then, decodes with 0..K drafts; blocks allocated per group ahead of
    what the step and its draft steps write; block ids never reused (slots stay below 2^31)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.reqs: dict[str, dict] = {}
        self.next_id = 0
        self.next_block = [1, 1, 1]
        self.finished: set[str] = set()

    def _allocate(self, req: dict, num_tokens: int) -> list[list[int]]:
        new = []
        for g, need in enumerate(_groups_blocks(num_tokens, self.cfg.dcp)):
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
                                     outputs=0, max_tokens=rng.randint(2, 30), blocks=[[], [], []], new=True)
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
                num_drafts = min(rng.randint(0, k) if rng.random() < 0.3 else k,
                                 MAX_MODEL_LEN - 1 - req["computed"] - k)
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
        # 0.34 drops the (always empty) cascade-attention field.
        extra = {"num_common_prefix_blocks": [0, 0, 0]} if VLLM_0_33 else {}
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
