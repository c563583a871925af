"""Drives vllm-ascend 0.26.0rc1's model runner V2 (with vLLM 0.26.0) on this host for N steps
and records everything.

Run in a fresh process (test_vllm_ascend.py does, once without and once with SPECOPS_VLLM=1):

    TRITON_INTERPRET=1 python drive_runner.py CONFIG_JSON OUT_FILE

vllm-ascend's own classes do the work, after its worker patches (`adapt_patch()`, as
`NPUWorker.__init__` applies them): `NPUModelRunner` (an instance made with `__new__`; its
`prepare_inputs`, vLLM's `finish_requests`, `add_requests`, `update_requests`, `prepare_attn`
and its `postprocess_sampled`), `AscendRequestState`, `AscendBlockTables` (3 KV-cache groups),
`AscendInputBuffers`, `AscendMTPSpeculator` or `AscendEagleSpeculator` (`propose`, its
`_multi_step_decode` and `_generate_draft`, `_build_draft_attn_metadata` through vllm-ascend's
`build_attn_metadata`), `AscendPCPManager`, and the kernels they launch (vLLM's and
vllm-ascend's own Triton kernels under the interpreter). What stands in: the NPU
(npu_stand_ins.py), the model (hidden states a fixed function of what it reads), the samplers
(tokens and acceptance from a seeded RNG, then vLLM's own counts), the attention backend's
metadata builder (it records what vllm-ascend's `build_attn_metadata` hands it), the scheduler
(the proofs' one, tests/vllm_integration/workload.py). Plugins are loaded by vLLM's `load_general_plugins()`; the driver never
imports specops.

Recorded: after every step every persistent buffer (`end`); at every forward (target, draft
prefill, each draft decode step) what the model and the attention builder read; the launches,
tensor ops and host syncs of each step (tests/vllm_integration/instruments.py).
"""

from __future__ import annotations

import json
import random
import sys
import types

import ascend_host

ascend_host.apply()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from instruments import Instruments, Recorder, plugin_states, watch_adapters  # noqa: E402
from vllm.config.compilation import CUDAGraphMode  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402
from vllm.v1.worker.gpu import input_batch as vllm_input_batch  # noqa: E402
from vllm.v1.worker.gpu import model_runner as vllm_model_runner  # noqa: E402
from vllm.v1.worker.gpu.cudagraph_utils import BatchExecutionDescriptor  # noqa: E402
from vllm.v1.worker.gpu.lora_utils import LoraState  # noqa: E402
from vllm.v1.worker.gpu.spec_decode import rejection_sampler  # noqa: E402
from vllm.v1.worker.gpu.spec_decode.autoregressive import speculator as vllm_ar  # noqa: E402
from vllm.v1.worker.gpu.sample import sampler as sampler_module  # noqa: E402
from vllm_ascend.worker.v2 import block_table as ascend_block_table  # noqa: E402
from vllm_ascend.worker.v2 import input_batch as ascend_input_batch  # noqa: E402
from vllm_ascend.worker.v2 import model_runner as ascend_model_runner  # noqa: E402
from vllm_ascend.worker.v2 import pcp_manager as ascend_pcp  # noqa: E402
from vllm_ascend.worker.v2.block_table import AscendBlockTables  # noqa: E402
from vllm_ascend.worker.v2.input_batch import AscendInputBuffers  # noqa: E402
from vllm_ascend.worker.v2.model_runner import NPUModelRunner  # noqa: E402
from vllm_ascend.worker.v2.spec_decode.autoregressive import speculator as ascend_ar  # noqa: E402
from vllm_ascend.worker.v2.spec_decode.eagle.speculator import AscendEagleSpeculator  # noqa: E402
from vllm_ascend.worker.v2.spec_decode.mtp.speculator import AscendMTPSpeculator  # noqa: E402
from vllm_ascend.worker.v2.states import AscendRequestState  # noqa: E402
from vllm_ascend.worker.v2.utils import torch_cuda_wrapper  # noqa: E402
from workload import MAX_MODEL_LEN, MAX_NUM_REQS, MAX_NUM_TOKENS, VOCAB, Scheduler, groups_blocks  # noqa: E402
from workload import stand_in_sampling  # noqa: E402

CPU = torch.device("cpu")
HIDDEN = 8
# The three KV-cache groups (vLLM 0.26's BlockTables: every group CP-sharded over DCP x PCP):
# block sizes 16, 16 and 64, the last one stored as kernel blocks of 32 (two table entries a
# block, as vllm-ascend's hybrid models keep them).
BLOCK_SIZES = [16, 16, 64]
KERNEL_BLOCK_SIZES = [16, 16, 32]

# Where the runner and its helpers look up what they call: the driver wraps any attribute the
# plugin installed there (instruments.watch_adapters) to count host syncs inside it.
ADAPTER_OWNERS = [vllm_model_runner, vllm_input_batch, ascend_model_runner, ascend_input_batch, ascend_block_table,
                  ascend_pcp, ascend_ar, vllm_ar, rejection_sampler, sampler_module, NPUModelRunner,
                  AscendBlockTables, ascend_pcp.AscendPCPManager, ascend_ar.AscendAutoRegressiveSpeculator,
                  vllm_ar.AutoRegressiveSpeculator]


class Config(types.SimpleNamespace):
    """name, seed, steps, k (drafts), method ("mtp" or "eagle"), dcp (size), dcp_rank, pcp (size),
    pcp_rank."""


class _Stub(types.SimpleNamespace):
    pass


def _noop(*args, **kwargs):
    return None


def _hidden(input_ids: torch.Tensor, positions: torch.Tensor, previous: torch.Tensor | None) -> torch.Tensor:
    """The stand-in model: a fixed function of what the model reads."""
    base = input_ids.to(torch.float32)[:, None] * 0.25 + positions.to(torch.float32)[:, None] * 0.5
    base = base + torch.arange(HIDDEN, dtype=torch.float32)[None, :]
    if previous is not None:
        base = base + previous * 0.125
    return base


class _RecordingBuilder:
    """The attention backend's metadata builder: records what vllm-ascend's build_attn_metadata
    gives it, returns the fields vllm-ascend's draft loop writes back (seq_lens, seq_lens_cpu)."""

    def __init__(self, group: int, seen: list):
        self.group, self.seen = group, seen

    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        cm = common_attn_metadata
        g = self.group
        self.seen.append({f"attn.slot_mapping[{g}]": cm.slot_mapping, f"block_tables[{g}]": cm.block_table_tensor,
                          f"attn.seq_lens[{g}]": cm.seq_lens, f"attn.query_start_loc[{g}]": cm.query_start_loc,
                          f"attn.seq_lens_cpu[{g}]": cm.seq_lens_cpu})
        return _Stub(seq_lens=cm.seq_lens, seq_lens_cpu=cm.seq_lens_cpu.clone(), attn_state=None, decode=None)


def _vllm_config(cfg: Config):
    return _Stub(model_config=_Stub(runner_type="generate", max_model_len=MAX_MODEL_LEN, rswa_window=None,
                                    is_deepseek_mla=False),
                 speculative_config=_Stub(method=cfg.method, num_speculative_tokens=cfg.k),
                 scheduler_config=_Stub(enable_chunked_prefill=True, max_num_seqs=MAX_NUM_REQS,
                                        max_num_batched_tokens=MAX_NUM_TOKENS),
                 compilation_config=_Stub(cudagraph_mode=CUDAGraphMode.FULL_AND_PIECEWISE),
                 parallel_config=_Stub(prefill_context_parallel_size=cfg.pcp, decode_context_parallel_size=cfg.dcp,
                                       cp_kv_cache_interleave_size=1))


def build(cfg: Config):
    runner = NPUModelRunner.__new__(NPUModelRunner)
    with torch_cuda_wrapper():  # NPUModelRunner.__init__'s: torch.cuda's streams and events are torch.npu's
        pass
    cp_size, cp_rank = cfg.dcp * cfg.pcp, cfg.pcp_rank * cfg.dcp + cfg.dcp_rank
    runner.device = CPU
    runner.vllm_config = _vllm_config(cfg)
    runner.compilation_config = runner.vllm_config.compilation_config
    runner.max_num_reqs, runner.max_num_tokens, runner.max_model_len = MAX_NUM_REQS, MAX_NUM_TOKENS, MAX_MODEL_LEN
    runner.num_speculative_steps = cfg.k
    runner.decode_query_len = cfg.k + 1
    runner.dcp_size, runner.dcp_rank, runner.cp_interleave = cfg.dcp, cfg.dcp_rank, 1
    runner.use_dcp = False  # vllm-ascend's V2 prepare_inputs leaves the DCP local seq_lens to its builders
    runner.use_pp, runner.is_last_pp_rank = False, True
    runner.model_config = runner.vllm_config.model_config
    runner.req_states = AscendRequestState(MAX_NUM_REQS, MAX_MODEL_LEN, MAX_NUM_TOKENS, cfg.k, VOCAB, CPU)
    widths = groups_blocks(MAX_MODEL_LEN + cfg.k + 1, BLOCK_SIZES, [cp_size] * len(BLOCK_SIZES))
    runner.block_tables = AscendBlockTables(BLOCK_SIZES, MAX_NUM_REQS, MAX_NUM_TOKENS, widths, CPU, KERNEL_BLOCK_SIZES,
                                            cp_size=cp_size, cp_rank=cp_rank, cp_interleave=1)
    runner.input_buffers = AscendInputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
    runner.lora_state = LoraState(MAX_NUM_REQS)
    for name in ("pooling_runner", "encoder_cache", "pp_handler", "kv_block_zeroer", "pcp_manager"):
        setattr(runner, name, None)
    runner.model_state = _Stub(num_new_sampled_tokens_per_step=1, add_request=_noop, remove_request=_noop,
                               apply_staged_writes=_noop, postprocess_state=_noop, preprocess_state=_noop)
    # vllm-ascend's own host copy of the counts (NPUModelRunner.__init__'s).
    runner.num_computed_tokens_event = torch.npu.Event()
    runner.num_computed_tokens_stream = torch.npu.Stream()
    runner.num_computed_tokens_cpu = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
    bins = torch.zeros(MAX_NUM_REQS, VOCAB, dtype=torch.int32)

    def add_request(req_index, prompt_len, sampling_params):
        bins[req_index].zero_()

    runner.sampler = _Stub(add_request=add_request, apply_staged_writes=_noop,
                           penalties_state=_Stub(output_bin_counts=bins),
                           sampling_states=_Stub(temperature=_Stub(gpu=torch.zeros(MAX_NUM_REQS)),
                                                 seeds=_Stub(gpu=torch.arange(MAX_NUM_REQS, dtype=torch.int64))))
    runner.prompt_logprobs_worker = _Stub(add_request=_noop, remove_request=_noop)
    if cfg.pcp > 1:
        vllm_pcp = sys.modules["vllm.v1.worker.gpu.pcp_manager"]
        vllm_pcp.get_pcp_group = lambda: ascend_host.FakePCPGroup(cfg.pcp, cfg.pcp_rank)
        runner.pcp_manager = ascend_pcp.AscendPCPManager(
            cfg.pcp, cfg.pcp_rank, CPU, runner.vllm_config, req_states=runner.req_states, max_num_reqs=MAX_NUM_REQS,
            max_num_tokens=MAX_NUM_TOKENS, block_tables=runner.block_tables, dcp_world_size=cfg.dcp,
            dcp_rank=cfg.dcp_rank)
    runner.speculator = _speculator(cfg, runner) if cfg.k > 0 else None
    return runner, bins


def _speculator(cfg: Config, runner):
    cls = AscendMTPSpeculator if cfg.method == "mtp" else AscendEagleSpeculator
    spec = cls.__new__(cls)
    spec.vllm_config = runner.vllm_config
    spec.device, spec.method = CPU, cfg.method
    spec.num_speculative_steps, spec.max_num_reqs, spec.max_num_tokens = cfg.k, MAX_NUM_REQS, MAX_NUM_TOKENS
    spec.max_model_len = MAX_MODEL_LEN
    spec.draft_max_seq_len, spec.hidden_size, spec.vocab_size, spec.dtype = MAX_MODEL_LEN, HIDDEN, VOCAB, torch.float32
    spec.dp_size, spec.dp_rank = 1, 0
    spec.attn_architecture = None
    spec.input_buffers = AscendInputBuffers(MAX_NUM_REQS, MAX_NUM_TOKENS, CPU)
    spec.input_batch = None
    spec.idx_mapping = torch.zeros(MAX_NUM_REQS, dtype=torch.int32)
    spec.temperature = torch.zeros(MAX_NUM_REQS, dtype=torch.float32)
    spec.seeds = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    spec.draft_tokens = torch.zeros(MAX_NUM_REQS, cfg.k, dtype=torch.int64)
    spec.draft_logits = None
    spec.hidden_states = torch.zeros(MAX_NUM_TOKENS, HIDDEN, dtype=torch.float32)
    spec.current_draft_step = torch.tensor(0, dtype=torch.int64)
    spec.last_token_indices = torch.zeros(MAX_NUM_REQS, dtype=torch.int64)
    spec.inputs_embeds, spec.supports_mm_inputs = None, False
    spec.prefill_cudagraph_manager = spec.decode_cudagraph_manager = None
    spec.eplb_state = None
    spec.block_tables = runner.block_tables
    spec.arange = torch.arange(MAX_NUM_REQS + 1, dtype=torch.int32)
    spec.kv_cache_config = _Stub(kv_cache_groups=[_Stub(layer_names=[f"layer{g}"]) for g in range(len(BLOCK_SIZES))])
    spec.seen = []
    spec.attn_groups = [[_Stub(get_metadata_builder=lambda i=0, b=_RecordingBuilder(g, spec.seen): b,
                               layer_names=[f"layer{g}"])] for g in range(len(BLOCK_SIZES))]
    return spec


def _persistent(runner, bins) -> dict:
    rs, bt, ib, spec = runner.req_states, runner.block_tables, runner.input_buffers, runner.speculator
    out = {
        "req.all_token_ids": rs.all_token_ids.gpu, "req.total_len": rs.total_len.gpu,
        "req.num_computed_tokens": rs.num_computed_tokens.gpu, "req.num_computed_tokens_cpu": rs.num_computed_tokens_cpu,
        "req.last_sampled_tokens": rs.last_sampled_tokens, "req.draft_tokens": rs.draft_tokens,
        "req.next_prefill_tokens": rs.next_prefill_tokens, "req.prefill_len": rs.prefill_len.gpu,
        "req.output_bin_counts": bins, "runner.num_computed_tokens_cpu": runner.num_computed_tokens_cpu,
        "bt.num_blocks": bt.num_blocks.gpu, "bt.slot_mappings": bt.slot_mappings,
        "in.input_ids": ib.input_ids, "in.positions": ib.positions, "in.query_start_loc": ib.query_start_loc,
        "in.seq_lens": ib.seq_lens, "in.seq_lens_cpu": ib.seq_lens_cpu, "in.dcp_local_seq_lens": ib.dcp_local_seq_lens,
    }
    if spec is not None:
        out.update({
            "spec.input_ids": spec.input_buffers.input_ids, "spec.positions": spec.input_buffers.positions,
            "spec.query_start_loc": spec.input_buffers.query_start_loc, "spec.seq_lens": spec.input_buffers.seq_lens,
            "spec.idx_mapping": spec.idx_mapping, "spec.draft_tokens": spec.draft_tokens,
            "spec.hidden_states": spec.hidden_states, "spec.last_token_indices": spec.last_token_indices,
            "spec.current_draft_step": spec.current_draft_step, "spec.temperature": spec.temperature,
            "spec.seeds": spec.seeds})
    for g in range(bt.num_kv_cache_groups):
        out[f"bt.block_tables[{g}]"] = bt.block_tables[g].gpu
        out[f"bt.input_block_tables[{g}]"] = bt.input_block_tables[g]
    if runner.pcp_manager is not None:
        pm = runner.pcp_manager
        pb = pm._input_buffers
        out.update({"pcp.input_ids": pb.input_ids, "pcp.positions": pb.positions,
                    "pcp.query_start_loc": pb.query_start_loc, "pcp.seq_lens": pb.seq_lens,
                    "pcp.global_slot_mappings": pm._global_batch_slot_mappings})
        if pm._padded_gather_idx is not None:  # the extent the step wrote (the buffer is torch.empty's)
            out["pcp.gathered_slot_mappings"] = pm._gathered_kv_slot_mappings[:, :pm._padded_gather_idx.shape[0]]
        for g, table in enumerate(pm._local_block_tables):
            out[f"pcp.local_block_tables[{g}]"] = table
    return out


def run(cfg: Config) -> dict:
    ascend_host.fake_for_the_guard(cfg)
    load_general_plugins()
    ascend_host.worker_patches()  # NPUWorker.__init__'s adapt_patch(): the plugin patches after it
    points = watch_adapters(ADAPTER_OWNERS)
    runner, bins = build(cfg)
    spec = runner.speculator
    sched = Scheduler(cfg, BLOCK_SIZES, [cfg.dcp * cfg.pcp] * len(BLOCK_SIZES))
    recorder = Recorder()
    rng = random.Random(cfg.seed * 7919 + 1)
    step_counts = []
    state = {"step": 0, "draft": 0}

    def run_model(self, num_tokens, attn_metadata, slot_mappings, num_tokens_across_dp,
                  cudagraph_runtime_mode=CUDAGraphMode.NONE, mm_inputs=None):
        buffers = self.input_buffers
        ids, pos = buffers.input_ids[:num_tokens], buffers.positions[:num_tokens]
        phase = f"draft{state['draft']}"
        state["draft"] += 1
        seen = {"input_ids": ids, "positions": pos, "hidden_states": self.hidden_states[:num_tokens],
                "slot_mappings": self.block_tables.slot_mappings, "query_start_loc": buffers.query_start_loc,
                "seq_lens": buffers.seq_lens}
        for record in self.seen:
            seen.update(record)
        self.seen.clear()
        recorder.add(state["step"], phase, seen)
        out = _hidden(ids, pos, self.hidden_states[:num_tokens])
        return out, out

    def sample_draft(self, hidden, src_positions, idx_mapping, *args, **kwargs):
        value = hidden[:, 0] * 4 + hidden[:, 3] * 2 + src_positions.to(torch.float32)
        return value.to(torch.int64).remainder(VOCAB)

    # vLLM's forward (below vllm-ascend's _run_model override) and sampler stand in.
    vllm_ar.AutoRegressiveSpeculator._run_model = run_model
    if spec is not None:
        spec.sample_draft = types.MethodType(sample_draft, spec)

    instruments = Instruments()
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
            num_tokens = so.total_num_scheduled_tokens
            num_reqs = len(so.num_scheduled_tokens)
            if cfg.pcp > 1:
                # PCP pads tokens only (a piecewise graph).
                desc = BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, -(-num_tokens // 8) * 8 + 8 * (step % 2),
                                                None)
            else:
                desc = BatchExecutionDescriptor(CUDAGraphMode.PIECEWISE, min(-(-num_tokens // 8) * 8 + 8 * (step % 2),
                                                                             MAX_NUM_TOKENS),
                                                min(num_reqs + step % 3, MAX_NUM_REQS))
            batch = runner.prepare_inputs(so, desc)
            tables, slots = runner.prepare_attn(batch)
            seen = {"input_ids": batch.input_ids, "positions": batch.positions, "slot_mappings": slots,
                    "query_start_loc": batch.query_start_loc, "seq_lens": batch.seq_lens,
                    "idx_mapping": batch.idx_mapping, "seq_lens_np": torch.from_numpy(np.array(batch.seq_lens_np))}
            for g, table in enumerate(tables):
                seen[f"block_tables[{g}]"] = table
            recorder.add(step, "forward", seen)
            hidden = _hidden(batch.input_ids, batch.positions, None)
            # A real model's outputs for padding tokens are never read; the stand-in's are 0.
            hidden[batch.num_tokens:] = 0
            draft_hidden = hidden
            if runner.pcp_manager is not None:
                hidden, batch = runner.pcp_manager.restore_for_sampling(hidden)
            sampled, num_sampled, num_rejected, record = stand_in_sampling(
                batch, rng, cfg.k, rejection_sampler, sampler_module, runner.req_states.prefill_len.gpu)
            recorder.add(step, "sampled", record)
            runner.postprocess_sampled(batch.idx_mapping, sampled, num_sampled, num_rejected, batch.query_start_loc)
            if spec is not None:
                drafts = spec.propose(batch, None, None, draft_hidden, None, num_sampled, num_rejected,
                                      runner.req_states.last_sampled_tokens, runner.req_states.next_prefill_tokens,
                                      runner.sampler.sampling_states.temperature.gpu,
                                      runner.sampler.sampling_states.seeds.gpu, is_profile=True)
                runner.req_states.draft_tokens[batch.idx_mapping] = drafts
            recorder.add(step, "end", _persistent(runner, bins))
            step_counts.append(instruments.step_counts().as_dict())
            sched.update(batch.req_ids, [int(q) for q in batch.num_scheduled_tokens], num_sampled.tolist(),
                         num_rejected.tolist())
    return {"records": recorder.records, "counts": step_counts, "points": points, "states": plugin_states()}


def main() -> None:
    cfg = Config(**json.loads(sys.argv[1]))
    result = run(cfg)
    torch.save(result, sys.argv[2])


if __name__ == "__main__":
    main()
