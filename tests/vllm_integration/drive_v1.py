"""Drives vLLM 0.33's V1 Eagle path on this host for N steps and records everything.

Run in a fresh process (test_vllm_integration.py does, once without and once with
SPECOPS_VLLM=1):

    TRITON_INTERPRET=1 python drive_v1.py CONFIG_JSON OUT_FILE

vLLM's own code does the work: the V1 `GPUModelRunner.propose_draft_token_ids` (an instance made
with `__new__`) on the padded drafter batch, `EagleProposer`'s `prepare_next_token_ids_padded`,
`prepare_inputs_padded` and `propose` (the first pass's inputs, with parallel drafting's extra
slots in the configuration that asks for them, every later draft step's positions, slot mapping
and seq_lens), and the runner's count correction
`update_num_computed_tokens_for_batch_change`, each looked up where vLLM's code looks it up, so
that a plugin's rebinding is what runs. What stands in: the target model and sampler (tokens and
acceptance from a seeded RNG), the draft model (hidden states and logits a fixed function of its
inputs), the scheduler (joins, leaves, chunked prefill, 0..K drafts, rows reordered), the forward
context, the drafter's graph dispatcher (token counts padded to 8), and the runner's copy of the
valid counts to the host (a CUDA stream copy; here it keeps the device tensor for the next step's
correction, as the runner's async path does). Plugins are loaded by vLLM's
`load_general_plugins()`; the driver never imports specops.

Launches: vLLM's Triton kernels and specops' ops as drive_mrv2.py counts them; vLLM's count
correction is a torch.compile'd function, counted as one launch per call (a lower bound: what
inductor fuses it into on a GPU), specops' as the op it launches.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import types

import numpy as np

import host

host.apply()

import torch  # noqa: E402
from instruments import Instruments, Recorder, current, plugin_states, watch_adapters  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402
from vllm.v1.attention.backend import CommonAttentionMetadata  # noqa: E402
from vllm.v1.spec_decode import llm_base_proposer, utils as spec_utils  # noqa: E402
from vllm.v1.spec_decode.eagle import EagleProposer  # noqa: E402
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata  # noqa: E402
from vllm.v1.utils import CpuGpuBuffer  # noqa: E402
from vllm.v1.worker import gpu_model_runner  # noqa: E402

CPU = torch.device("cpu")
HIDDEN = 8
VOCAB = 97
MAX_NUM_REQS = 8
MAX_NUM_TOKENS = 128
MAX_MODEL_LEN = 160
BLOCK_SIZE = 16
TOKEN_BUDGET = 64
BLOCKS_PER_REQ = -(-MAX_MODEL_LEN // BLOCK_SIZE)


# Where vLLM's V1 code looks up what it calls (instruments.watch_adapters wraps the plugin's there).
ADAPTER_OWNERS = [gpu_model_runner, spec_utils, llm_base_proposer, gpu_model_runner.GPUModelRunner,
                  llm_base_proposer.SpecDecodeBaseProposer]


def _adapter_owners() -> list:
    """vLLM's owners, and the plugin's own modules once vLLM loaded them: a seam that runs vLLM's
    body in one case calls an adapter of the plugin's module in the other (looked up there)."""
    plugin = [m for name, m in sorted(sys.modules.items()) if name.startswith("specops.integrations.vllm.")]
    return ADAPTER_OWNERS + plugin


class _Stub(types.SimpleNamespace):
    pass


class _Request:
    """What prepare_next_token_ids_padded reads of a request (its token at an index)."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens

    def get_token_id(self, index: int) -> int:
        return self.tokens[index] if 0 <= index < len(self.tokens) else -1


class _DraftModel:
    """The stand-in draft model: hidden states and logits fixed functions of what it reads."""

    def __init__(self, recorder, state):
        self.recorder, self.state = recorder, state

    def __call__(self, input_ids, positions, inputs_embeds=None, hidden_states=None):
        self.recorder.add(self.state["step"], f"draft{self.state['draft']}",
                          {"draft.input_ids": input_ids, "draft.positions": positions,
                           "draft.hidden_states": hidden_states})
        self.state["draft"] += 1
        out = input_ids.to(torch.float32)[:, None] * 0.25 + positions.to(torch.float32)[:, None] * 0.5
        out = out + torch.arange(HIDDEN, dtype=torch.float32)[None, :] + hidden_states * 0.125
        return out, out

    def compute_logits(self, hidden):
        token = (hidden[:, 0] * 4 + hidden[:, 3] * 2).to(torch.int64).remainder(VOCAB)
        return torch.nn.functional.one_hot(token, VOCAB).to(torch.float32)


def _drafter(cfg, recorder, state) -> EagleProposer:
    d = EagleProposer.__new__(EagleProposer)
    d.method, d.device, d.dtype = "eagle", CPU, torch.float32
    d.num_speculative_tokens, d.max_model_len, d.block_size, d.hidden_size = cfg.k, MAX_MODEL_LEN, BLOCK_SIZE, HIDDEN
    d.vllm_config = _Stub(model_config=_Stub(uses_mrope=False), parallel_config=_Stub(data_parallel_size=1))
    d.input_ids = torch.zeros(MAX_NUM_TOKENS, dtype=torch.int32)
    d.positions = torch.zeros(MAX_NUM_TOKENS, dtype=torch.int64)
    d.hidden_states = torch.zeros(MAX_NUM_TOKENS, HIDDEN, dtype=torch.float32)
    d._slot_mapping_buffer = torch.zeros(MAX_NUM_TOKENS, dtype=torch.int64)
    d._draft_attn_layer_names = ["draft.layer0"]
    d.arange = torch.arange(MAX_NUM_TOKENS + 1, dtype=torch.int32)
    d.token_arange_np = np.arange(MAX_NUM_TOKENS + 1, dtype=np.int32)
    d.backup_next_token_ids = CpuGpuBuffer(MAX_NUM_REQS, dtype=torch.int32, device=CPU, pin_memory=False)
    for name in ("uses_mrope", "use_heterogeneous_vocab", "supports_mm_inputs",
                 "constant_draft_positions", "_share_mtp_indices", "use_local_argmax_reduction",
                 "_enable_probabilistic_draft_probs"):
        setattr(d, name, False)
    d.pass_hidden_states_to_model = True
    d.eplb_state = d.allowed_attn_types = d._last_draft_probs = None
    d.draft_attn_groups = []
    d.model = _DraftModel(recorder, state)
    # Parallel drafting (Eagle's shift): K slots a request in one pass, K - 1 of them new.
    d.parallel_drafting = bool(getattr(cfg, "parallel", False))
    d.extra_slots_per_request = cfg.k if d.parallel_drafting else 1
    d.net_num_new_slots_per_request = d.extra_slots_per_request - 1
    d.needs_extra_input_slots = d.net_num_new_slots_per_request > 0
    d.parallel_drafting_token_id = VOCAB - 1
    d.parallel_drafting_hidden_state_tensor = torch.linspace(-1, 1, HIDDEN)
    d.is_rejected_token_mask = torch.zeros(MAX_NUM_TOKENS, dtype=torch.bool)
    d.is_masked_token_mask = torch.zeros(MAX_NUM_TOKENS, dtype=torch.bool)

    def dispatch(num_tokens, valid_modes=None):
        # A graph size: tokens padded to 8 (so every later draft step has padding slots).
        return CUDAGraphMode.NONE, _Stub(num_tokens=min(-(-num_tokens // 8) * 8, MAX_NUM_TOKENS))

    d.cudagraph_dispatcher = _Stub(dispatch=dispatch)
    return d


def _runner(cfg, drafter) -> gpu_model_runner.GPUModelRunner:
    r = gpu_model_runner.GPUModelRunner.__new__(gpu_model_runner.GPUModelRunner)
    r.speculative_config = _Stub(method="eagle", disable_padded_drafter_batch=False, use_eagle=lambda: True,
                                 use_dflash=lambda: False, uses_draft_model=lambda: False,
                                 use_ngram_gpu=lambda: False, uses_extract_hidden_states=lambda: False)
    r.drafter, r.device = drafter, CPU
    r.uses_mrope = r.use_aux_hidden_state_outputs = r.supports_mm_inputs = False
    r.input_ids = CpuGpuBuffer(MAX_NUM_TOKENS, dtype=torch.int32, device=CPU, pin_memory=False)
    r.positions = torch.zeros(MAX_NUM_TOKENS, dtype=torch.int64)
    r.discard_request_mask = CpuGpuBuffer(MAX_NUM_REQS, dtype=torch.bool, device=CPU, pin_memory=False)
    r.num_computed_tokens = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
    r.num_accepted_tokens = CpuGpuBuffer(MAX_NUM_REQS, dtype=torch.int32, device=CPU, pin_memory=False)
    r.get_model = lambda: _Stub()
    r.valid_sampled_token_count_gpu = None

    def copy_valid_sampled_token_count(next_token_ids, valid_sampled_tokens_count):
        # The runner's async path: the device counts kept for the next step's correction.
        r.valid_sampled_token_count_gpu = valid_sampled_tokens_count
        r.input_batch.prev_sampled_token_ids = next_token_ids.unsqueeze(1)

    r._copy_valid_sampled_token_count = copy_valid_sampled_token_count
    return r


class Scheduler:
    """Joins, leaves, chunked prefill under a token budget, decodes with 0..K drafts; the batch
    rows are reordered now and then (the runner's condense and swap); blocks allocated ahead."""

    def __init__(self, cfg):
        self.cfg, self.rng = cfg, random.Random(cfg.seed)
        self.order: list[str] = []
        self.reqs: dict[str, dict] = {}
        self.next_id, self.next_block = 0, 1

    def schedule(self, step: int) -> list[tuple[str, int, int]]:
        """(request, tokens scheduled, drafts among them) per batch row."""
        rng, k = self.rng, self.cfg.k
        while len(self.order) < MAX_NUM_REQS and (not self.order or rng.random() < 0.35):
            req_id = f"r{self.next_id}"
            self.next_id += 1
            prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(3, 60))]
            self.reqs[req_id] = dict(tokens=list(prompt), prompt_len=len(prompt), start=0, cpu=0, blocks=[],
                                     max_tokens=rng.randint(2, 25), outputs=0)
            self.order.append(req_id)
        if len(self.order) > 1 and rng.random() < 0.2:
            i, j = rng.sample(range(len(self.order)), 2)
            self.order[i], self.order[j] = self.order[j], self.order[i]
        batch, budget = [], TOKEN_BUDGET
        for req_id in self.order:
            req = self.reqs[req_id]
            if req["start"] < req["prompt_len"]:
                n, d = min(req["prompt_len"] - req["start"], budget, rng.randint(4, 40)), 0
            else:
                d = min(rng.randint(0, k) if rng.random() < 0.3 else k, MAX_MODEL_LEN - 2 - req["start"] - k)
                d = max(d, 0)
                n = 1 + d
            if n <= 0 or n > budget:
                continue
            budget -= n
            need = -(-(req["start"] + n + k + 1) // BLOCK_SIZE)
            while len(req["blocks"]) < min(need, BLOCKS_PER_REQ):
                req["blocks"].append(self.next_block)
                self.next_block += 1
            batch.append((req_id, n, d))
        return batch

    def finish(self, req_id: str) -> None:
        self.order.remove(req_id)
        del self.reqs[req_id]


class _Batch(types.SimpleNamespace):
    """One step's batch as the V1 runner hands it to propose_draft_token_ids: req_ids, reqs (the
    scheduler's records), query, drafts (per row), attn (CommonAttentionMetadata), sampled, kept
    (valid tokens per row), metadata (SpecDecodeMetadata or None)."""


def _correct_counts(runner, reqs, req_ids, prev_rows, prev_drafts) -> None:
    """The runner's count correction (`_prepare_inputs`): the scheduler's counts are optimistic
    (every draft of the last step accepted); the device corrects them from the last valid counts."""
    num_reqs = len(reqs)
    cpu_counts = torch.tensor([q["cpu"] for q in reqs], dtype=torch.int32)
    prev_positions = torch.tensor([prev_rows.get(i, -1) for i in req_ids], dtype=torch.int32)
    if runner.valid_sampled_token_count_gpu is None:
        runner.num_computed_tokens[:num_reqs].copy_(cpu_counts)
        return
    runner.num_accepted_tokens.gpu.fill_(1)
    gpu_model_runner.update_num_computed_tokens_for_batch_change(
        runner.num_computed_tokens, runner.num_accepted_tokens.gpu[:num_reqs], prev_positions,
        runner.valid_sampled_token_count_gpu, prev_drafts, cpu_counts)


def _target_step(cfg, runner, sched, batch, rng) -> _Batch:
    """The target step's inputs and the stand-in sampler's tokens: prefill rows that finish their
    prompt sample one, partial prefills are discarded, decode rows keep 1 + accepted drafts."""
    req_ids, query, drafts = [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]
    reqs = [sched.reqs[i] for i in req_ids]
    num_reqs = len(batch)
    qsl = torch.zeros(num_reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.tensor(query).cumsum(0)
    num_tokens = int(qsl[-1])
    seq_lens = runner.num_computed_tokens[:num_reqs] + torch.tensor(query, dtype=torch.int32)
    table = torch.zeros(num_reqs, BLOCKS_PER_REQ, dtype=torch.int32)
    token_ids, positions = [], []
    for r, (q, n) in enumerate(zip(reqs, query)):
        table[r, :len(q["blocks"])] = torch.tensor(q["blocks"], dtype=torch.int32)
        positions += list(range(q["start"], q["start"] + n))
        known = q["tokens"][q["start"]:q["start"] + n]
        token_ids += known + [rng.randrange(VOCAB) for _ in range(n - len(known))]
    runner.input_ids.gpu[:num_tokens] = torch.tensor(token_ids, dtype=torch.int32)
    runner.positions[:num_tokens] = torch.tensor(positions, dtype=torch.int64)
    pos = runner.positions[:num_tokens]
    req_of_token = torch.repeat_interleave(torch.arange(num_reqs), torch.tensor(query))
    slots = table[req_of_token, pos // BLOCK_SIZE].to(torch.int64) * BLOCK_SIZE + pos % BLOCK_SIZE
    attn = CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq_lens, num_reqs=num_reqs,
        num_actual_tokens=num_tokens, max_query_len=max(query), max_seq_len=int(seq_lens.max()),
        block_table_tensor=table, slot_mapping=slots)
    sampled = torch.full((num_reqs, cfg.k + 1), -1, dtype=torch.int32)
    discard = runner.discard_request_mask.gpu
    discard.zero_()
    kept = []
    for r, (q, n, d) in enumerate(zip(reqs, query, drafts)):
        partial = q["start"] + n < q["prompt_len"]
        discard[r] = partial
        kept.append(0 if partial else rng.randint(1, d + 1))
        width = max(kept[-1], 1)
        sampled[r, :width] = torch.tensor([rng.randrange(VOCAB) for _ in range(width)], dtype=torch.int32)
    metadata = None
    if any(drafts):
        cu = torch.tensor(drafts, dtype=torch.int32).cumsum(0).to(torch.int32)
        num_drafts = int(cu[-1])
        metadata = SpecDecodeMetadata(
            draft_token_ids=torch.zeros(num_drafts, dtype=torch.int32), num_draft_tokens=drafts,
            cu_num_draft_tokens=cu, cu_num_sampled_tokens=cu + torch.arange(1, num_reqs + 1, dtype=torch.int32),
            target_logits_indices=torch.zeros(num_drafts, dtype=torch.int32),
            bonus_logits_indices=torch.zeros(num_reqs, dtype=torch.int32),
            logits_indices=torch.zeros(num_drafts + num_reqs, dtype=torch.int32))
    runner.requests = {i: _Request(q["tokens"]) for i, q in zip(req_ids, reqs)}
    runner.input_batch = _Stub(req_ids=req_ids, num_reqs=num_reqs, vocab_size=VOCAB, num_tokens_no_spec=np.array(
        [q["start"] + n - d for q, n, d in zip(reqs, query, drafts)], dtype=np.int32))
    return _Batch(req_ids=req_ids, reqs=reqs, query=query, drafts=drafts, attn=attn, sampled=sampled, kept=kept,
                  metadata=metadata)


def _propose(cfg, runner, drafter, batch: _Batch) -> dict:
    """vLLM's propose_draft_token_ids on the batch; returns what the drafter was handed and proposed."""
    num_tokens = batch.attn.num_actual_tokens
    hidden = (runner.input_ids.gpu[:num_tokens].to(torch.float32)[:, None]
              + torch.arange(HIDDEN, dtype=torch.float32)[None, :] * 0.5)
    seen = {}
    real_propose = drafter.propose

    def propose(**kwargs):
        seen.update({name: kwargs[name] for name in ("next_token_ids", "token_indices_to_sample",
                                                     "num_rejected_tokens_gpu", "target_token_ids",
                                                     "target_positions")})
        return real_propose(**kwargs)

    drafter.propose = propose
    try:
        so = _Stub(total_num_scheduled_tokens=num_tokens, num_spec_tokens_to_schedule=cfg.k,
                   num_scheduled_tokens=dict(zip(batch.req_ids, batch.query)))
        seen["drafts"] = runner.propose_draft_token_ids(so, batch.sampled, _Stub(all_greedy=True), hidden, None, None,
                                                        batch.metadata, batch.attn, None)
    finally:
        del drafter.propose
    return seen


def _persistent(runner, drafter, batch: _Batch) -> dict:
    return {"num_computed_tokens": runner.num_computed_tokens, "num_accepted_tokens": runner.num_accepted_tokens.gpu,
            "valid_count": runner.valid_sampled_token_count_gpu, "seq_lens": batch.attn.seq_lens,
            "input_ids": drafter.input_ids, "positions": drafter.positions, "hidden_states": drafter.hidden_states,
            "slot_mapping": drafter._slot_mapping_buffer, "is_rejected": drafter.is_rejected_token_mask,
            "is_masked": drafter.is_masked_token_mask}


def _advance_host(sched, batch: _Batch, next_tokens: list[int], rng) -> None:
    """The host's bookkeeping after the step: the true counts (the scheduler's next output), the
    optimistic ones the runner starts from, the tokens, finished requests."""
    for r, (req_id, q, n, d) in enumerate(zip(batch.req_ids, batch.reqs, batch.query, batch.drafts)):
        q["cpu"] = q["start"] + n
        q["start"] += batch.kept[r] if d else n
        if batch.kept[r]:
            known = q["tokens"][:q["start"]]
            q["tokens"] = known + [rng.randrange(VOCAB) for _ in range(q["start"] - len(known))] + [next_tokens[r]]
            q["outputs"] += batch.kept[r]
        if q["outputs"] >= q["max_tokens"] or rng.random() < 0.04:
            sched.finish(req_id)


def run(cfg) -> dict:
    load_general_plugins()
    points = watch_adapters(_adapter_owners())
    recorder, state = Recorder(), {"step": 0, "draft": 0}
    drafter = _drafter(cfg, recorder, state)
    runner = _runner(cfg, drafter)
    sched = Scheduler(cfg)
    rng = random.Random(cfg.seed * 7919 + 3)
    llm_base_proposer.set_forward_context = lambda *args, **kwargs: contextlib.nullcontext()
    instruments = Instruments()
    compiled = gpu_model_runner.update_num_computed_tokens_for_batch_change
    if getattr(compiled, "__specops_point__", None) is None and not getattr(compiled, "__counted__", False):
        def counted(*args):
            current().counts.triton["update_num_computed_tokens_for_batch_change (compiled)"] += 1
            return compiled(*args)
        counted.__counted__ = True  # once per process (a driver may run several configurations)
        gpu_model_runner.update_num_computed_tokens_for_batch_change = counted
    prev_rows: dict[str, int] = {}
    prev_drafts = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
    step_counts = []
    with instruments:
        for step in range(cfg.steps):
            state["step"], state["draft"] = step, 0
            scheduled = sched.schedule(step)
            if scheduled:
                req_ids = [b[0] for b in scheduled]
                _correct_counts(runner, [sched.reqs[i] for i in req_ids], req_ids, prev_rows, prev_drafts)
                batch = _target_step(cfg, runner, sched, scheduled, rng)
                seen = _propose(cfg, runner, drafter, batch)
                recorder.add(step, "end", {f"v1.{name}": t for name, t in
                                           {**seen, **_persistent(runner, drafter, batch)}.items()})
            step_counts.append(instruments.step_counts().as_dict())
            if scheduled:
                prev_drafts.zero_()
                prev_drafts[:len(batch.drafts)] = torch.tensor(batch.drafts, dtype=torch.int32)
                _advance_host(sched, batch, seen["next_token_ids"].tolist(), rng)
                prev_rows = {req_id: r for r, req_id in enumerate(batch.req_ids) if req_id in sched.reqs}
    return {"records": recorder.records, "counts": step_counts, "points": points, "states": plugin_states()}


def main() -> None:
    """CONFIG_JSON is one configuration, or a list of named ones run one after the other in this
    process (saved as {name: result})."""
    given = json.loads(sys.argv[1])
    if isinstance(given, list):
        torch.save({cfg["name"]: run(types.SimpleNamespace(**cfg)) for cfg in given}, sys.argv[2])
    else:
        torch.save(run(types.SimpleNamespace(**given)), sys.argv[2])


if __name__ == "__main__":
    main()
