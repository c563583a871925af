"""Drives vLLM's model runner V2 (0.33 or 0.34, whichever is on the path) on this host for N
steps and records everything.

Run in a fresh process (tests/vllm_integration/test_vllm_integration.py does, once without and
once with SPECOPS_VLLM=1; CONFIG_JSON may list several configurations, run one after the other):

    TRITON_INTERPRET=1 python drive_mrv2.py CONFIG_JSON OUT_FILE

vLLM's own classes and methods do the work: `GPUModelRunner` (an instance made with `__new__`;
its `finish_requests`, `add_requests`, `update_requests`, `gather_batch_req_state`,
`prepare_inputs`, `prepare_attn`, `postprocess_sampled`), the real `RequestState`, `BlockTables`,
`InputBuffers`, `EagleSpeculator.propose`, `PCPManager`, and the module-level functions the
runner calls (`prepare_dcp_local_seq_lens`, `get_num_sampled_and_rejected`), looked up in the
module that calls them, as vLLM does, so that a plugin's rebinding is what runs. What stands in:
the model (hidden states a fixed function of input ids, positions and input hidden states), the
sampler (tokens and acceptance drawn from a seeded RNG, then vLLM's own counts), the drafter's
sampling (a fixed function of the hidden state row), the scheduler (workload.py, over
mrv2_world.py's groups), attention metadata (none is built) and the draft attention groups
(what vLLM's check of in-place metadata updates asks: FlashAttention's answer, so vLLM picks its
fused-metadata loop at DCP 1). Plugins are loaded by vLLM's `load_general_plugins()`; the
driver never imports specops.

Recorded: after every step, every persistent buffer (`end`); at every forward (target, draft
prefill, each draft decode step), the inputs the model reads (input ids, positions, hidden
states rows, every group's slot mapping, block tables, query_start_loc, seq_lens); the launches
and host syncs of each step (instruments.py); the launches inside each draft-decode loop; once
more after the last step, the fused loop's body called alone, as vLLM captures it (`captured`).
"""

from __future__ import annotations

import json
import random
import sys
import types

import numpy as np

import host

host.apply()

import torch  # noqa: E402
from instruments import Instruments, Recorder, plugin_states, watch_adapters  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402
from vllm.v1.worker.gpu import block_table, cp_utils, input_batch, model_runner, pcp_manager  # noqa: E402
from vllm.v1.worker.gpu.block_table import BlockTables  # noqa: E402
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor  # noqa: E402
from vllm.v1.worker.gpu.input_batch import InputBuffers  # noqa: E402
from vllm.v1.worker.gpu.lora_utils import LoraState  # noqa: E402
from vllm.v1.worker.gpu.model_runner import GPUModelRunner  # noqa: E402
from vllm.v1.worker.gpu.sample import sampler as sampler_module  # noqa: E402
from vllm.v1.worker.gpu.spec_decode import rejection_sampler  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.target_dependent_ar import speculator as tdar  # noqa: E402
from vllm.v1.worker.gpu.states import RequestState  # noqa: E402
from workload import stand_in_sampling  # noqa: E402
from mrv2_world import (  # noqa: E402
    BLOCK_SIZES, DCP_SHARDED, HIDDEN, MAX_MODEL_LEN, MAX_NUM_REQS, MAX_NUM_TOKENS, SLIDING_WINDOW_REACH,
    SLOT_MAPPING_ENABLED, VLLM_0_33, VOCAB, Config, groups_blocks, scheduler,
)

CPU = torch.device("cpu")
# Where the runner and its helpers look up what they call: the driver wraps any attribute the
# plugin installed there (instruments.watch_adapters) to count host syncs inside it.
ADAPTER_OWNERS = [model_runner, input_batch, block_table, cp_utils, pcp_manager, rejection_sampler, sampler_module,
                  tdar, GPUModelRunner, BlockTables, pcp_manager.PCPManager, tdar.TargetDependentARSpeculator]


class _Stub(types.SimpleNamespace):
    pass


def _noop(*args, **kwargs):
    return None


def _model_state():
    return _Stub(num_new_sampled_tokens_per_step=1, add_request=_noop, remove_request=_noop,
                 apply_staged_writes=_noop, postprocess_state=_noop, preprocess_state=_noop)


def _hidden(input_ids: torch.Tensor, positions: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor:
    """The stand-in model: a fixed function of what the model reads."""
    base = input_ids.to(torch.float32)[:, None] * 0.25 + positions.to(torch.float32)[:, None] * 0.5
    base = base + torch.arange(HIDDEN, dtype=torch.float32)[None, :]
    if previous is not None:
        base = base + previous * 0.125
    return base


def build(cfg: Config):
    runner = GPUModelRunner.__new__(GPUModelRunner)
    cp_size, cp_rank = cfg.dcp, cfg.dcp_rank
    runner.device = CPU
    runner.max_num_reqs, runner.max_num_tokens, runner.max_model_len = MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN
    runner.num_speculative_steps = cfg.k
    runner.decode_query_len = cfg.k + 1
    runner.dcp_size, runner.dcp_rank, runner.cp_interleave = cp_size, cp_rank, 1
    runner.use_pp, runner.is_last_pp_rank = False, True
    runner.model_config = _Stub(rswa_window=None)
    runner.req_states = RequestState(MAX_NUM_REQS, MAX_MODEL_LEN, MAX_NUM_TOKENS, cfg.k, VOCAB, CPU)
    widths = groups_blocks(MAX_MODEL_LEN + cfg.k + 1, cp_size)
    runner.block_tables = BlockTables(BLOCK_SIZES, MAX_NUM_REQS, MAX_NUM_TOKENS, widths, CPU, cp_size=cp_size,
                                      cp_rank=cp_rank, cp_interleave=1, slot_mapping_enabled=SLOT_MAPPING_ENABLED,
                                      dcp_sharded=DCP_SHARDED, sliding_window_reach=SLIDING_WINDOW_REACH)
    runner.input_buffers = InputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
    runner.lora_state = LoraState(MAX_NUM_REQS)
    for name in ("adaptive_verification", "pooling_runner", "encoder_cache", "pp_handler", "fast_prefill",
                 "kv_block_zeroer", "pcp_manager"):
        setattr(runner, name, None)
    runner.model_state = _model_state()
    runner.draft_tokens_handler = _Stub(discard=_noop)  # 0.34: the draft tokens' host copies
    bins = torch.zeros(MAX_NUM_REQS, VOCAB, dtype=torch.int32)

    def add_request(req_index, sampling_params):
        bins[req_index].zero_()

    runner.sampler = _Stub(add_request=add_request, apply_staged_writes=_noop,
                           penalties_state=_Stub(output_bin_counts=bins),
                           sampling_states=_Stub(temperature=_Stub(gpu=torch.zeros(MAX_NUM_REQS)),
                                                 seeds=_Stub(gpu=torch.arange(MAX_NUM_REQS, dtype=torch.int64))))
    runner.prompt_logprobs_worker = _Stub(add_request=_noop, remove_request=_noop)
    if cfg.pcp > 1:
        pcp_manager.get_pcp_group = lambda: host.FakePCPGroup(cfg.pcp, cfg.pcp_rank)
        runner.pcp_manager = pcp_manager.PCPManager(cfg.pcp, cfg.pcp_rank, CPU, shard_decode_requests=False,
                                                    max_num_reqs=MAX_NUM_REQS, max_num_tokens=MAX_NUM_TOKENS,
                                                    block_tables=runner.block_tables, dcp_world_size=cp_size,
                                                    dcp_rank=cp_rank)
    runner.speculator = _speculator(cfg, runner)
    return runner, bins


def _speculator(cfg: Config, runner) -> EagleSpeculator:
    spec = EagleSpeculator.__new__(EagleSpeculator)
    spec.vllm_config = _Stub(model_config=_Stub(max_model_len=MAX_MODEL_LEN), parallel_config=None)
    # 0.34: the length limit the draft steps read on the device (a 0-d int32 tensor).
    spec.max_model_len_gpu = torch.tensor(MAX_MODEL_LEN, dtype=torch.int32)
    spec.device, spec.method = CPU, "eagle"
    spec.num_speculative_steps, spec.max_num_reqs, spec.max_num_tokens = cfg.k, MAX_NUM_REQS, MAX_NUM_TOKENS
    spec.draft_max_seq_len, spec.hidden_size, spec.vocab_size, spec.dtype = MAX_MODEL_LEN, HIDDEN, VOCAB, torch.float32
    spec.dp_size, spec.dp_rank, spec.dcp_size = 1, 0, cfg.dcp
    spec.input_buffers = InputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
    spec.idx_mapping = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    spec.temperature = torch.zeros(MAX_NUM_REQS, dtype=torch.float32)
    spec.seeds = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    spec.draft_tokens = torch.zeros(MAX_NUM_REQS, cfg.k, dtype=torch.int64)
    spec.draft_logits = None
    spec.hidden_states = torch.zeros(MAX_NUM_TOKENS, HIDDEN, dtype=torch.float32)
    spec.current_draft_step = torch.tensor(0, dtype=torch.int64)
    spec.last_token_indices = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    spec.sample_src_positions = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    spec.inputs_embeds, spec.supports_mm_inputs, spec.supports_decode_metadata_update = None, False, False
    spec.prefill_cudagraph_manager = spec.decode_cudagraph_manager = None
    spec.eplb_state = None
    spec.block_tables, spec.pcp_manager = runner.block_tables, runner.pcp_manager
    spec.kv_cache_config = _Stub(kv_cache_groups=[_Stub(layer_names=[f"layer{g}"]) for g in range(len(BLOCK_SIZES))])
    spec.arange_np = np.arange(MAX_NUM_REQS + 1, dtype=np.int32)
    # The draft attention groups: FlashAttention's builder updates its decode metadata in place at
    # DCP 1 (flash_attn.py), so vLLM's own check picks the fused-metadata loop there (K >= 2).
    in_place = getattr(cfg, "in_place", cfg.dcp == 1)
    spec.attn_groups = [[AttentionGroup(g, in_place)] for g in range(len(BLOCK_SIZES))]
    spec._configure_decode_metadata_update()
    return spec


class AttentionGroup:
    """What vLLM's check and its fused-metadata loop ask of a draft attention group."""

    class backend:  # noqa: N801  (vLLM's attribute name)
        @staticmethod
        def get_name() -> str:
            return "FLASH_ATTN"

    def __init__(self, kv_cache_group_id: int, in_place: bool):
        self.kv_cache_group_id = kv_cache_group_id
        self.supports_draft_decode_metadata_update = in_place

    def update_draft_decode_metadata(self, attn_metadata) -> None:
        attn_metadata["updates"] = attn_metadata.get("updates", 0) + 1

    def map_to_kernel_block_table(self, block_table) -> None:
        pass


def _persistent(runner, bins) -> dict:
    rs, bt, ib, spec = runner.req_states, runner.block_tables, runner.input_buffers, runner.speculator
    out = {
        "req.all_token_ids": rs.all_token_ids.gpu, "req.total_len": rs.total_len.gpu,
        "req.num_computed_tokens": rs.num_computed_tokens.gpu, "req.last_sampled_tokens": rs.last_sampled_tokens,
        "req.draft_tokens": rs.draft_tokens, "req.next_prefill_tokens": rs.next_prefill_tokens,
        "req.prefill_len": rs.prefill_len.gpu, "req.output_bin_counts": bins,
        "bt.num_blocks": bt.num_blocks.gpu, "bt.slot_mappings": bt.slot_mappings,
        "in.input_ids": ib.input_ids, "in.positions": ib.positions, "in.query_start_loc": ib.query_start_loc,
        "in.seq_lens": ib.seq_lens, "in.dcp_local_seq_lens": ib.dcp_local_seq_lens,
        "spec.input_ids": spec.input_buffers.input_ids, "spec.positions": spec.input_buffers.positions,
        "spec.query_start_loc": spec.input_buffers.query_start_loc, "spec.seq_lens": spec.input_buffers.seq_lens,
        "spec.idx_mapping": spec.idx_mapping, "spec.draft_tokens": spec.draft_tokens,
        "spec.hidden_states": spec.hidden_states, "spec.last_token_indices": spec.last_token_indices,
        "spec.sample_src_positions": spec.sample_src_positions, "spec.current_draft_step": spec.current_draft_step,
        "spec.temperature": spec.temperature, "spec.seeds": spec.seeds,
    }
    for g in range(bt.num_kv_cache_groups):
        out[f"bt.block_tables[{g}]"] = bt.block_tables[g].gpu
        out[f"bt.input_block_tables[{g}]"] = bt.input_block_tables[g]
    if runner.pcp_manager is not None:
        pb = runner.pcp_manager.input_buffers
        out.update({"pcp.input_ids": pb.input_ids, "pcp.positions": pb.positions,
                    "pcp.query_start_loc": pb.query_start_loc, "pcp.seq_lens": pb.seq_lens,
                    "pcp.dcp_local_seq_lens": pb.dcp_local_seq_lens})
    return out


def _fake_for_the_guard(cfg: Config) -> None:
    """The guard's tests: a faked vLLM version; one target's signature altered (`alter`); one
    target wrapped by another plugin with functools.wraps (`wrap`), which leaves its source and
    signature as inspect shows them unchanged."""
    if getattr(cfg, "fake_version", None):
        import vllm.version

        vllm.version.__version__ = cfg.fake_version
    for how in ("alter", "wrap"):
        if not getattr(cfg, how, None):
            continue
        import functools
        import importlib

        module_name, name = getattr(cfg, how).split(":")
        module = importlib.import_module(module_name)
        original = getattr(module, name)

        @functools.wraps(original)
        def replaced(*args, new_argument=None, **kwargs):
            return original(*args, **kwargs)

        if how == "alter":
            del replaced.__wrapped__  # the new signature is what a reader sees
        setattr(module, name, replaced)


# The draft-decode loop methods, per release: (vLLM's name for the loop, the method propose calls).
LOOPS = {"multi_step": "_multi_step_decode",
         "fused_metadata": "_fused_multi_step_decode" if VLLM_0_33 else "_run_fused_multi_step_decode"}


# The fused-metadata loop's body, the function vLLM captures in a full graph.
CAPTURED = "_generate_fused_drafts" if VLLM_0_33 else "_fused_multi_step_decode"


def _count_loops(spec, instruments: Instruments) -> dict:
    """Counts the launches inside each decode loop the speculator runs and its draft steps (K - 1
    a call), by wrapping the loop methods on the instance (vLLM's classes stay as they are)."""
    loops = {name: {"launches": 0, "steps": 0, "calls": 0} for name in LOOPS}
    for name, method in LOOPS.items():
        bound = getattr(spec, method)

        def counted(*args, _bound=bound, _totals=loops[name], **kwargs):
            before = instruments.counts.launches
            try:
                return _bound(*args, **kwargs)
            finally:
                _totals["launches"] += instruments.counts.launches - before
                _totals["steps"] += (args[-1] if args else kwargs["num_speculative_steps"]) - 1
                _totals["calls"] += 1

        setattr(spec, method, counted)
    return loops


def run(cfg: Config) -> dict:
    _fake_for_the_guard(cfg)
    load_general_plugins()
    points = watch_adapters(ADAPTER_OWNERS)
    runner, bins = build(cfg)
    spec = runner.speculator
    sched = scheduler(cfg)
    recorder = Recorder()
    rng = random.Random(cfg.seed * 7919 + 1)
    step_counts = []
    state = {"step": 0, "draft": 0}

    def run_model(self, num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp,
                  cudagraph_runtime_mode=CUDAGraphMode.NONE, mm_inputs=None):
        buffers = self.input_buffers
        if self.pcp_manager is not None:
            buffers, _ = self.pcp_manager.get_draft_input_buffers(self.input_buffers, num_tokens)
        ids, pos = buffers.input_ids[:num_tokens], buffers.positions[:num_tokens]
        phase = f"draft{state['draft']}"
        state["draft"] += 1
        recorder.add(state["step"], phase, {"input_ids": ids, "positions": pos,
                                            "hidden_states": self.hidden_states[:num_tokens],
                                            "slot_mappings": self.block_tables.slot_mappings,
                                            "query_start_loc": self.input_buffers.query_start_loc,
                                            "seq_lens": self.input_buffers.seq_lens})
        out = _hidden(ids, pos, self.hidden_states[:num_tokens])
        return out, out

    def sample_draft(self, hidden, src_positions, idx_mapping, *args, **kwargs):
        value = hidden[:, 0] * 4 + hidden[:, 3] * 2 + src_positions.to(torch.float32)
        return value.to(torch.int64).remainder(VOCAB)

    instruments = Instruments()
    spec._run_model = types.MethodType(run_model, spec)
    spec.sample_draft = types.MethodType(sample_draft, spec)
    # Attention metadata: none is built, but the fused-metadata loop maps each step's slots only
    # when it has some (its draft steps then update it in place).
    spec._build_uniform_attn_metadata = lambda *args, **kwargs: {}
    loops = _count_loops(spec, instruments)

    last_num_reqs = 0
    with instruments:
        for step in range(cfg.steps):
            state["step"], state["draft"] = step, 0
            so = sched.schedule(step)
            runner.finish_requests(so)
            runner.add_requests(so)
            runner.update_requests(so)
            runner.block_tables.apply_staged_writes()
            if so.total_num_scheduled_tokens == 0:
                step_counts.append(instruments.step_counts().as_dict())
                recorder.add(step, "end", _persistent(runner, bins))
                continue
            batch_state, _ = runner.gather_batch_req_state(so, dummy_run=False)
            num_tokens = batch_state.num_tokens
            num_reqs = len(batch_state.req_ids)
            if cfg.pcp > 1:
                # PCP pads tokens only (a piecewise graph): the rank-local batch is padded to it.
                local = runner.pcp_manager.get_num_tokens_for_dispatch(batch_state.num_scheduled_tokens,
                                                                      batch_state.is_prefilling_np)
                desc = BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, -(-local // 8) * 8 + 8 * (step % 2), None)
            else:
                # A full-graph-like descriptor: tokens and requests padded.
                desc = BatchExecutionDescriptor(CUDAGraphMode.FULL, min(-(-num_tokens // 8) * 8 + 8 * (step % 2),
                                                                        MAX_NUM_TOKENS),
                                                min(num_reqs + step % 3, MAX_NUM_REQS))
            batch = runner.prepare_inputs(so, batch_state, desc, 0)
            tables, slots = runner.prepare_attn(batch)
            if runner.dcp_size > 1:
                buffers = runner.input_buffers if runner.pcp_manager is None else runner.pcp_manager.input_buffers
                batch.dcp_local_seq_lens = model_runner.prepare_dcp_local_seq_lens(
                    buffers.dcp_local_seq_lens, batch.seq_lens, batch.num_reqs, runner.dcp_size, runner.dcp_rank,
                    runner.cp_interleave, num_reqs_padded=batch.num_reqs_after_padding)
            seen = {"input_ids": batch.input_ids, "positions": batch.positions, "slot_mappings": slots,
                    "query_start_loc": batch.query_start_loc, "seq_lens": batch.seq_lens,
                    "idx_mapping": batch.idx_mapping}
            for g, table in enumerate(tables):
                seen[f"block_tables[{g}]"] = table
            if batch.dcp_local_seq_lens is not None:
                seen["dcp_local_seq_lens"] = batch.dcp_local_seq_lens
            recorder.add(step, "forward", seen)
            hidden = _hidden(batch.input_ids, batch.positions, None)
            # A real model's outputs for padding tokens are never read; the stand-in's are 0, so
            # the inputs' documented padding differences (masks.py) stay in the padding.
            hidden[batch.num_tokens:] = 0
            draft_hidden = hidden
            if runner.pcp_manager is not None:
                hidden, _, batch = runner.pcp_manager.restore_for_sampling(hidden, None)
            sampled, num_sampled, num_rejected, record = stand_in_sampling(
                batch, rng, cfg.k, rejection_sampler, sampler_module, runner.req_states.prefill_len.gpu)
            recorder.add(step, "sampled", record)
            runner.postprocess_sampled(batch.idx_mapping, sampled, num_sampled, num_rejected, batch.query_start_loc)
            drafts = spec.propose(batch, None, None, draft_hidden, None, num_sampled, num_rejected,
                                  runner.req_states.last_sampled_tokens, runner.req_states.next_prefill_tokens,
                                  runner.sampler.sampling_states.temperature.gpu,
                                  runner.sampler.sampling_states.seeds.gpu, is_profile=True,
                                  num_speculative_tokens=cfg.k)
            runner.req_states.draft_tokens[batch.idx_mapping] = drafts
            recorder.add(step, "end", _persistent(runner, bins))
            step_counts.append(instruments.step_counts().as_dict())
            sched.update(batch.req_ids, [int(q) for q in batch.num_scheduled_tokens], num_sampled.tolist(),
                         num_rejected.tolist())
            last_num_reqs = batch.num_reqs
        if spec.supports_decode_metadata_update and cfg.k >= 2 and last_num_reqs > 0:
            # What vLLM captures in a full graph: the fused loop's body called alone (capture()
            # calls it outside propose), here on the buffers the last step left.
            state["step"], state["draft"] = cfg.steps, 0
            before = instruments.counts.launches
            getattr(spec, CAPTURED)(last_num_reqs, last_num_reqs, {}, None, None, CUDAGraphMode.NONE, cfg.k)
            loops["captured"] = {"launches": instruments.counts.launches - before, "steps": cfg.k - 1, "calls": 1}
            recorder.add(cfg.steps, "captured", _persistent(runner, bins))
    return {"records": recorder.records, "counts": step_counts, "points": points, "states": plugin_states(),
            "loops": loops}


def main() -> None:
    """CONFIG_JSON is one configuration, or a list of named ones run one after the other in this
    process (saved as {name: result}): vLLM's import is paid once."""
    given = json.loads(sys.argv[1])
    if isinstance(given, list):
        torch.save({cfg["name"]: run(Config(**cfg)) for cfg in given}, sys.argv[2])
    else:
        torch.save(run(Config(**given)), sys.argv[2])


if __name__ == "__main__":
    main()
