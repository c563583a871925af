"""The runner's whole spec-decode step on specops' ops, checked against plain Python every step.

Each step a plain-Python scheduler admits and retires requests, splits prompts into chunks
(a partial chunk's sample is discarded) and schedules 1 + K tokens for every decoding request.
Then, on the device side:

    prepare_positions_and_seq_lens   positions and seq_lens into PersistentMappings' buffers
    PersistentMappings.refresh       every group's slot mapping of the target step
    prepare_input_ids                the input ids (prompt chunk, last sampled token, drafts), logits indices
    (stand-in forward + sampler)     random tokens, a random number accepted per request
    count_sampled_and_rejected       what the sampler kept
    post_update_after_sampling       request state: tokens, last sampled, lengths, counts, penalty bins
    prepare_next_token_ids           the drafter's next token, rejected count, token to sample from
    DraftLoopPlan.plan_step          host only: every draft pass's host lengths and schedules, from the
                                     scheduler's host copies (the query layout, a seq_lens upper bound)
    DraftLoopPlan.advance_all        one launch: every draft pass's positions, seq_lens, both groups'
                                     slots and formatted pairs, RoPE and CP rows (pass 1 on the target
                                     step's layout, passes 2 .. K one token per request)
    DraftLoopPlan.metadata(k)        each draft pass's metadata, views of its own buffers

and every output is compared with the same step computed here in plain Python, including a
request whose draft positions pass max_model_len, under either rule ("reset" or "clamp").

Run: python examples/runner_step.py [--steps 200] [--seed 0] [--rule reset|clamp]
"""

from __future__ import annotations

import argparse
import random

import torch

import specops
from specops import MappingGroup, PersistentMappings, drafting

K = 3  # drafts per decoding request
VOCAB = 50
MAX_MODEL_LEN = 40
CHUNK = 8
MAX_REQS = 4  # request rows and batch rows
BLOCK_SIZES = (16, 8)
GROUP_NAMES = ("full", "swa")
SLIDING_WINDOWS = (None, 16)
PAD = specops.PAD_SLOT_ID
I32 = torch.int32


def t32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


class Loop:
    """The runner's request state (request rows) as tensors, and the same state in plain Python."""

    def __init__(self, seed: int, rule: str):
        self.rng = random.Random(seed)
        self.rule = rule
        self.mappings = PersistentMappings(
            [MappingGroup(block_size=bs, name=name) for bs, name in zip(BLOCK_SIZES, GROUP_NAMES)],
            max_num_reqs=MAX_REQS, max_num_blocks_per_req=[-(-MAX_MODEL_LEN // bs) for bs in BLOCK_SIZES],
            max_num_tokens=MAX_REQS * max(K + 1, CHUNK))
        self.all_token_ids = torch.zeros(MAX_REQS, MAX_MODEL_LEN + K + 1, dtype=I32)
        self.num_computed = torch.zeros(MAX_REQS, dtype=I32)
        self.prefill_len = torch.zeros(MAX_REQS, dtype=I32)
        self.total_len = torch.zeros(MAX_REQS, dtype=I32)
        self.last_sampled = torch.zeros(MAX_REQS, dtype=torch.int64)
        self.drafts = torch.zeros(MAX_REQS, K, dtype=torch.int64)
        self.bins = torch.zeros(MAX_REQS, VOCAB, dtype=I32)
        self.next_prefill = torch.zeros(1, MAX_REQS, dtype=I32)
        # The drafting layer: one builder per KV-cache group, fed the mappings' buffers by name.
        self.rope = torch.rand(MAX_MODEL_LEN + 1, 8, generator=torch.Generator().manual_seed(seed))
        model = drafting.ModelConfig(num_heads_q=8, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=self.rope,
                                     num_speculative_tokens=K, num_cube_cores=4, num_vector_cores=8,
                                     soc_version="Ascend910B1")
        self.builders = [drafting.DraftMetadataBuilder(
            model, drafting.GroupConfig(name, block_size=bs, storage_block_size=bs, sliding_window=window),
            max_num_reqs=MAX_REQS, max_num_tokens=self.mappings.positions.numel())
            for bs, name, window in zip(BLOCK_SIZES, GROUP_NAMES, SLIDING_WINDOWS)]
        # The whole draft loop of a step: one host plan, one device launch for every pass.
        self.plan = drafting.DraftLoopPlan(self.mappings, self.builders, num_speculative_tokens=K,
                                           max_model_len=MAX_MODEL_LEN, past_max_model_len=rule)
        self.live: dict[int, dict] = {}  # row -> plain-Python request
        self.next_block = 1
        self.counts = dict(steps=0, drafted_past_limit=0, limit_mid_draft=0, discarded=0)

    # ------------------------------------------------------------------ the scheduler (host)
    def admit_and_retire(self) -> None:
        for row in [row for row, req in self.live.items() if req["nc"] + K + 1 > MAX_MODEL_LEN]:
            del self.live[row]
        for row in range(MAX_REQS):
            if row in self.live or self.rng.random() < 0.5:
                continue
            prompt = [self.rng.randrange(VOCAB) for _ in range(self.rng.randint(1, 20))]
            # Blocks for every position below max_model_len, in both groups, at admission.
            blocks = []
            for bs in BLOCK_SIZES:
                blocks.append(list(range(self.next_block, self.next_block + -(-MAX_MODEL_LEN // bs))))
                self.next_block += len(blocks[-1])
            self.mappings.append_blocks(row, blocks, overwrite=True)
            self.live[row] = dict(prompt=prompt, tokens=list(prompt), nc=0, last=0, drafts=[0] * K, blocks=blocks,
                                  bins=[0] * VOCAB)
            self.all_token_ids[row].zero_()
            self.all_token_ids[row, :len(prompt)] = t32(prompt)
            self.num_computed[row], self.prefill_len[row], self.total_len[row] = 0, len(prompt), len(prompt)
            self.bins[row].zero_()
            self.last_sampled[row] = 0
        self.mappings.apply_staged()

    def schedule(self) -> tuple[list[int], list[int], list[int]]:
        """Batch rows (request rows in batch order), query lengths, logits per request."""
        rows = list(self.live)
        self.rng.shuffle(rows)
        query_lens, num_logits = [], []
        for row in rows:
            req = self.live[row]
            if req["nc"] < len(req["prompt"]):
                query_lens.append(min(CHUNK, len(req["prompt"]) - req["nc"]))
                num_logits.append(1)
            else:
                query_lens.append(1 + K)
                num_logits.append(1 + K)
        return rows, query_lens, num_logits

    # ------------------------------------------------------------------ one step
    def step(self) -> None:
        self.admit_and_retire()
        rows, query_lens, num_logits = self.schedule()
        if not rows:
            return
        self.counts["steps"] += 1
        idx = t32(rows)
        qsl = t32([0] + [sum(query_lens[:i + 1]) for i in range(len(rows))])
        cu = t32([0] + [sum(num_logits[:i + 1]) for i in range(len(rows))])
        num_tokens, num_reqs = int(qsl[-1]), len(rows)
        m = self.mappings
        specops.prepare_positions_and_seq_lens(self.num_computed, qsl, positions=m.positions, seq_lens=m.seq_lens,
                                               idx_mapping=idx, num_reqs_padded=MAX_REQS)
        m.refresh(idx, qsl, m.positions[:num_tokens], num_reqs_padded=MAX_REQS)
        target_positions = [self.live[row]["nc"] + j for r, row in enumerate(rows) for j in range(query_lens[r])]
        assert m.positions[:num_tokens].tolist() == target_positions
        target_rows = [row for r, row in enumerate(rows) for _ in range(query_lens[r])]
        for g in range(len(BLOCK_SIZES)):
            want = [self.slot(row, g, p) for row, p in zip(target_rows, target_positions)]
            assert m.slot_mappings[g][:num_tokens].tolist() == want, (g, m.slot_mappings[g][:num_tokens].tolist(), want)
        input_ids = torch.zeros(num_tokens, dtype=I32)
        ids = specops.prepare_input_ids(input_ids, idx, qsl, self.num_computed, self.prefill_len, self.last_sampled,
                                        self.drafts, cu, all_token_ids=self.all_token_ids,
                                        next_prefill_tokens=self.next_prefill)
        expected_ids, expected_logits = [], []
        for r, row in enumerate(rows):
            req = self.live[row]
            if req["nc"] < len(req["prompt"]):
                expected_ids += req["prompt"][req["nc"]:req["nc"] + query_lens[r]]
            else:
                expected_ids += [req["last"]] + req["drafts"]
            expected_logits += list(range(int(qsl[r + 1]) - num_logits[r], int(qsl[r + 1])))
        assert input_ids.tolist() == expected_ids, (input_ids.tolist(), expected_ids)
        assert ids.logits_indices.tolist() == expected_logits

        # Stand-in forward and rejection sampler: the first `kept` logits' tokens are kept.
        sampled = torch.full((num_reqs, K + 1), -1, dtype=torch.int64)
        kept = []
        for r in range(num_reqs):
            count = self.rng.randint(1, num_logits[r])
            sampled[r, :count] = torch.tensor([self.rng.randrange(VOCAB) for _ in range(count)])
            kept.append(count)
        num_sampled = t32(kept)
        counts = specops.count_sampled_and_rejected(num_sampled, m.seq_lens, cu, idx, self.prefill_len)
        partial = [self.live[row]["nc"] + query_lens[r] < len(self.live[row]["prompt"]) for r, row in enumerate(rows)]
        want_sampled = [0 if partial[r] else kept[r] for r in range(num_reqs)]
        want_rejected = [0 if partial[r] else num_logits[r] - kept[r] for r in range(num_reqs)]
        assert counts.num_sampled.tolist() == want_sampled and counts.num_rejected.tolist() == want_rejected
        self.counts["discarded"] += sum(partial)
        target_seq_lens = [self.live[row]["nc"] + query_lens[r] for r, row in enumerate(rows)]

        specops.post_update_after_sampling(
            idx, self.num_computed, query_start_loc=qsl, sampled_tokens=sampled, num_sampled=counts.num_sampled,
            num_rejected=counts.num_rejected, last_sampled_tokens=self.last_sampled, all_token_ids=self.all_token_ids,
            total_len=self.total_len, output_bin_counts=self.bins)
        for r, row in enumerate(rows):
            req = self.live[row]
            new = sampled[r, :want_sampled[r]].tolist()
            req["tokens"] += new
            if new:
                req["last"] = new[-1]
            for token in new:
                req["bins"][token] += 1
            req["nc"] += query_lens[r] - want_rejected[r]
            assert int(self.num_computed[row]) == req["nc"] and int(self.total_len[row]) == len(req["tokens"])
            assert self.all_token_ids[row, :len(req["tokens"])].tolist() == req["tokens"]
            assert int(self.last_sampled[row]) == req["last"]
            assert self.bins[row].tolist() == req["bins"], (self.bins[row].tolist(), req["bins"], new)

        # The drafter's next token; a discarded partial prefill falls back to its last prompt token.
        drafts_scheduled = t32([sum(num_logits[:i + 1]) - i - 1 for i in range(num_reqs)])
        nxt = specops.prepare_next_token_ids(
            sampled, VOCAB, discard_request_mask=torch.tensor(partial), token_ids=self.all_token_ids[idx],
            num_tokens_no_spec=t32(target_seq_lens), cu_num_draft_tokens=drafts_scheduled, query_start_loc=qsl)
        for r, row in enumerate(rows):
            req = self.live[row]
            backup = req["prompt"][target_seq_lens[r] - 1] if partial[r] else None
            assert int(nxt.next_token_ids[r]) == (backup if partial[r] else int(sampled[r, kept[r] - 1]))
            assert int(nxt.num_rejected_tokens[r]) == want_rejected[r]
            assert int(nxt.token_indices_to_sample[r]) == int(qsl[r + 1]) - 1 - want_rejected[r]

        # The draft loop. The host plan reads host copies only: the query layout the scheduler
        # built and its upper bound of each request's seq_len (optimistic: every draft accepted),
        # never a device tensor. Pass 1 runs on the target step's layout (padded drafting: the
        # rejected tokens stay in); passes 2 .. K have one token per request.
        qsl_cpu = qsl.clone()  # the scheduler's host copy (qsl stands for the device tensor)
        bound = t32([s + self.rng.randint(0, 2) for s in target_seq_lens])
        num_input_tokens = -(-num_tokens // 8) * 8
        self.plan.plan_step(qsl_cpu, bound, num_reqs, num_input_tokens, num_reqs_padded=MAX_REQS)
        self.plan.advance_all(qsl, nxt.token_indices_to_sample, nxt.num_rejected_tokens, idx)
        self.check_draft_pass(1, num_input_tokens, target_rows, target_positions,
                              [s - q for s, q in zip(target_seq_lens, query_lens)])
        self.draft(rows, target_seq_lens, want_rejected)

    def slot(self, row: int, g: int, position: int) -> int:
        bs = BLOCK_SIZES[g]
        return self.live[row]["blocks"][g][position // bs] * bs + position % bs

    def check_draft_pass(self, draft_index, num_input_tokens, token_rows, positions, start_pos, reset=()) -> None:
        """The plan's metadata of one draft pass, every group, against plain Python: each
        token's position (0 on padding), RoPE rows, (block, offset) slot pair (PAD's pair for a
        token reset past max_model_len) and each request's start position."""
        metas = self.plan.metadata(draft_index)
        num_tokens, half = len(positions), self.rope.size(1) // 2
        padded = positions + [0] * (num_input_tokens - num_tokens)
        for g, (meta, bs) in enumerate(zip(metas, BLOCK_SIZES)):
            assert meta.input_positions.tolist() == padded, (draft_index, g)
            assert torch.equal(meta.cos, self.rope[padded, :half]) and torch.equal(meta.sin, self.rope[padded, half:])
            slots = [PAD if t in reset else self.slot(row, g, p)
                     for t, (row, p) in enumerate(zip(token_rows, positions))]
            pairs = [[slot // bs, slot % bs] for slot in slots]
            assert meta.slot_mapping[:num_tokens].tolist() == pairs, (draft_index, g)
            assert meta.start_pos[:len(start_pos)].tolist() == start_pos, (draft_index, g)
            assert (meta.sas_metadata is None) == (SLIDING_WINDOWS[g] is None)

    def draft(self, rows, target_seq_lens, rejected) -> None:
        """Draft passes 2 .. K, all written by the one advance_all launch, each checked against
        plain Python under the rule; then the step's drafts."""
        positions = [target_seq_lens[r] - 1 - rejected[r] for r in range(len(rows))]
        seq_lens = list(target_seq_lens)
        was_over = [False] * len(rows)
        num_reqs = len(rows)
        for k in range(2, K + 1):
            first = k == 2
            reset = set()
            for r, row in enumerate(rows):
                p = positions[r] + 1
                base = seq_lens[r] - (rejected[r] if first else 0)
                over = p >= MAX_MODEL_LEN
                self.counts["drafted_past_limit"] += over
                # A request whose first draft steps fit and a later one reaches max_model_len.
                self.counts["limit_mid_draft"] += over and not first and not was_over[r]
                was_over[r] = over
                if over and self.rule == "reset":
                    reset.add(r)
                if self.rule == "reset":
                    positions[r], seq_lens[r] = (0, 1) if over else (p, min(base + 1, MAX_MODEL_LEN))
                else:
                    positions[r], seq_lens[r] = min(p, MAX_MODEL_LEN - 1), min(base + 1, MAX_MODEL_LEN)
            assert self.plan.positions(k)[:num_reqs].tolist() == positions, k
            assert self.plan.seq_lens(k).tolist() == seq_lens, k
            for g, slots in enumerate(self.plan.slot_mappings(k)):
                want = [PAD if r in reset else self.slot(row, g, positions[r]) for r, row in enumerate(rows)]
                assert slots.tolist() == want + [PAD] * (MAX_REQS - num_reqs), (k, g, slots.tolist(), want)
            self.check_draft_pass(k, MAX_REQS, rows, positions, [s - 1 for s in seq_lens], reset)
        for row in rows:  # the stand-in drafter's K drafts, request-indexed, for the next step
            self.live[row]["drafts"] = [self.rng.randrange(VOCAB) for _ in range(K)]
            self.drafts[row] = torch.tensor(self.live[row]["drafts"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rule", choices=["reset", "clamp"], default="reset")
    args = parser.parse_args()
    loop = Loop(args.seed, args.rule)
    for _ in range(args.steps):
        loop.step()
    print(f"{args.steps} steps clean ({args.rule}): {loop.counts}")


if __name__ == "__main__":
    main()
