"""Drives vllm-ascend 0.26.0rc1's DSA-CP draft metadata (the V1 proposer path DSA models with
context parallelism take) on this host for N steps and records every field it builds.

    TRITON_INTERPRET=1 python drive_dsa_cp.py CONFIG_JSON OUT_FILE

vllm-ascend's own code does the work: `AscendEagleProposer.build_draft_attn_metadata` (an
instance made with `__new__`; `llm_base_proposer.py`) over the draft KV-cache groups, each with
its own `AscendDSACPMetadataBuilder` (`attention/context_parallel/dsa_cp.py`): `build` per group
on the MTP first pass, `build_for_drafting` per group for DSpark's parallel-drafting pass, and,
with `draft_steps`, the MTP draft steps after the first (`attn_update_stack_num_spec_norm`
for each draft index and group, as `_propose` loops over them). The sparse-attention and
lightning-indexer schedules are vllm-ascend's CANN ops, answered by specops' drop-ins
(ascend_ops.py). What stands in: the NPU (npu_stand_ins.py), the tensor-parallel group (CP
size and rank, whose ranks split the token stream), the model's RoPE layers (the tables they
register in vllm-ascend's RoPE state), and the runner (each step's batch: decodes with 1 to
K + 1 tokens and prefill chunks, positions, the groups' block tables and slot mappings).

Configurations: `method` "mtp" (first pass, `build`) or "dspark" (`build_for_drafting`, SWA
groups only in 0.26.0rc1), `groups` a list of "swa" / "c4" / "c128", `cp` and `cp_rank`, `k`
drafts, `draft_steps` (MTP: also the later draft steps).

Recorded per step: every field of every group's metadata (flattened: dataclass fields, the
RoPE proxies' tables, tensors by value); costs per step (device_model.py): launches,
device-to-host reads; host syncs inside the plugin's adapters (instruments.py).
"""

from __future__ import annotations

import dataclasses
import json
import random
import sys
import types

import ascend_host

ascend_host.apply()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from device_model import DEVICE, DeviceModel  # noqa: E402
from instruments import Instruments, Recorder, plugin_states, watch_adapters  # noqa: E402
from vllm.plugins import load_general_plugins  # noqa: E402
from vllm_ascend.attention.attention_v1 import AscendAttentionState  # noqa: E402
from vllm_ascend.attention.context_parallel import dsa_cp  # noqa: E402
from vllm_ascend.attention.context_parallel.dsa_cp import AscendDSACPMetadataBuilder  # noqa: E402
from vllm_ascend.attention.utils import AscendCommonAttentionMetadata  # noqa: E402
from vllm_ascend.ops import rope_dsv4  # noqa: E402
from vllm_ascend.spec_decode import llm_base_proposer  # noqa: E402
from vllm_ascend.spec_decode.eagle_proposer import AscendEagleProposer  # noqa: E402

MAX_NUM_REQS = 8
MAX_NUM_TOKENS = 128
MAX_POSITION = 4096
ROT_DIM = 16
BLOCK_SIZE = 128  # the KV cache's (and the DSA slot format's) block size
STORAGE = {"swa": 128, "c4": 32, "c128": 1}  # each group's block size as its table holds it
WINDOW = 128
NUM_HEADS, HEAD_DIM = 64, 512
INDEX_TOPK, INDEX_HEADS, INDEX_HEAD_DIM = 512, 64, 128

ADAPTER_OWNERS = [llm_base_proposer, llm_base_proposer.AscendSpecDecodeBaseProposer, dsa_cp,
                  AscendDSACPMetadataBuilder]


class Config(types.SimpleNamespace):
    """name, seed, steps, method, groups, cp, cp_rank, k, draft_steps."""


class _Stub(types.SimpleNamespace):
    pass


class _Group:
    """The tensor-parallel group DSA-CP splits the token stream over (its CP ranks)."""

    def __init__(self, world_size: int, rank: int):
        self.world_size, self.rank_in_group = world_size, rank


def _rope_tables(model: DeviceModel) -> None:
    """The model's RoPE layers register their tables in vllm-ascend's RoPE state: the main
    layers' (group "default", with a runtime buffer for decode steps) and the compressed layers'
    ("c4", "c128", one table of their own)."""
    state = rope_dsv4._ROPE_STATE
    angles = torch.arange(MAX_POSITION, dtype=torch.float32)[:, None] / (
        10000 ** (torch.arange(0, ROT_DIM, 2, dtype=torch.float32) / ROT_DIM))
    state.full_rope_cache["main"] = (angles.cos().contiguous(), angles.sin().contiguous())
    state.registry_summary["main"] = {"default"}
    compressed = angles * 0.25
    state.full_rope_cache["compressed"] = (compressed.cos().contiguous(), compressed.sin().contiguous())
    state.registry_summary["compressed"] = {"c4", "c128"}
    state.runtime_buffer["main"] = {"default": (torch.zeros(MAX_NUM_TOKENS, ROT_DIM // 2, device=DEVICE),
                                                torch.zeros(MAX_NUM_TOKENS, ROT_DIM // 2, device=DEVICE))}
    model.register(*state.full_rope_cache["main"], *state.full_rope_cache["compressed"],
                   *state.runtime_buffer["main"]["default"])


def _vllm_config(cfg: Config):
    hf = _Stub(model_type="deepseek_v4_draft", sliding_window=WINDOW, num_attention_heads=NUM_HEADS,
               index_topk=INDEX_TOPK, index_n_heads=INDEX_HEADS, index_head_dim=INDEX_HEAD_DIM,
               compress_ratios=[0, 4, 128], qk_rope_head_dim=ROT_DIM)
    model = _Stub(hf_config=hf, hf_text_config=hf, enable_sleep_mode=False, get_head_size=lambda: HEAD_DIM,
                  use_mla=True)
    return _Stub(model_config=model, scheduler_config=_Stub(max_num_seqs=MAX_NUM_REQS,
                                                            max_num_batched_tokens=MAX_NUM_TOKENS),
                 speculative_config=_Stub(num_speculative_tokens=cfg.k, method=cfg.method))


def _builders(cfg: Config, vllm_config, model: DeviceModel):
    groups = []
    for gid, kind in enumerate(cfg.groups):
        spec = _Stub(block_size=BLOCK_SIZE, compress_ratio={"swa": 0, "c4": 4, "c128": 128}[kind])
        builder = AscendDSACPMetadataBuilder(spec, [f"layers.{gid}.attn"], vllm_config, DEVICE)
        model.register_attributes(builder)
        groups.append(_Stub(get_metadata_builder=lambda b=builder: b, layer_names=[f"layers.{gid}.attn"],
                            kv_cache_spec=spec, kv_cache_group_id=gid))
    return groups


def _proposer(cfg: Config, vllm_config, groups, model: DeviceModel):
    proposer = AscendEagleProposer.__new__(AscendEagleProposer)
    proposer.vllm_config = vllm_config
    proposer.method = cfg.method
    proposer.use_compress = True
    proposer.draft_attn_groups = groups
    proposer.attn_layer_names = [name for g in groups for name in g.layer_names]
    proposer.runner = _Stub(get_model=lambda: None)
    if cfg.method == "dspark":
        proposer._per_group_block_table_buffers = {
            g: torch.zeros(MAX_NUM_REQS, 64, dtype=torch.int32, device=DEVICE) for g in range(len(groups))}
        proposer._per_group_query_slot_mapping_buffers = {
            g: torch.zeros(MAX_NUM_TOKENS, dtype=torch.int32, device=DEVICE) for g in range(len(groups))}
        for buffers in (proposer._per_group_block_table_buffers, proposer._per_group_query_slot_mapping_buffers):
            model.register(*buffers.values())
    return proposer


class Batch:
    """One step's batch as the runner hands it to the proposer (its persistent buffers)."""

    def __init__(self, cfg: Config, model: DeviceModel):
        self.cfg, self.rng = cfg, random.Random(cfg.seed)
        self.query_start_loc = torch.zeros(MAX_NUM_REQS + 1, dtype=torch.int32, device=DEVICE)
        self.seq_lens = torch.zeros(MAX_NUM_REQS, dtype=torch.int32, device=DEVICE)
        self.positions = torch.zeros(MAX_NUM_TOKENS, dtype=torch.int64, device=DEVICE)
        self.tables = [torch.zeros(MAX_NUM_REQS, 64, dtype=torch.int32, device=DEVICE) for _ in cfg.groups]
        self.slots = [torch.zeros(MAX_NUM_TOKENS, dtype=torch.int32, device=DEVICE) for _ in cfg.groups]
        # vllm-ascend's V1 runner derives it from its host counts: a host tensor.
        self.is_prefilling = torch.zeros(MAX_NUM_REQS, dtype=torch.bool)
        model.register(self.query_start_loc, self.seq_lens, self.positions, *self.tables, *self.slots)
        self.next_block = 1

    def next(self, step: int) -> AscendCommonAttentionMetadata:
        """The step's inputs, written into the buffers outside the measured region."""
        rng, k = self.rng, self.cfg.k
        num_reqs = rng.randint(1, MAX_NUM_REQS)
        lens, computed, prefilling = [], [], []
        # Decodes first, then prefills, as vLLM's runners order a batch (vllm-ascend's split counts
        # the decodes before the first prefill).
        num_prefills = sum(rng.random() < 0.25 for _ in range(num_reqs)) if self.cfg.method == "mtp" else 0
        for r in range(num_reqs):
            prefill = r >= num_reqs - num_prefills
            lens.append(rng.randint(k + 2, 20) if prefill else (k + 1 if self.cfg.method == "dspark"
                                                               else rng.randint(1, k + 1)))
            computed.append(rng.randint(0, 3000))
            prefilling.append(prefill)
        num_tokens = sum(lens)
        num_input_tokens = min(-(-num_tokens // 8) * 8 + 8 * (step % 2), MAX_NUM_TOKENS)
        qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        seq = np.array([c + q for c, q in zip(computed, lens)], dtype=np.int32)
        pos = np.concatenate([np.arange(c, c + q) for c, q in zip(computed, lens)])
        with torch.no_grad():
            self.query_start_loc.copy_(torch.from_numpy(np.concatenate([qsl, np.full(MAX_NUM_REQS - num_reqs, qsl[-1])])))
            self.seq_lens.zero_()
            self.seq_lens[:num_reqs] = torch.from_numpy(seq)
            self.positions.zero_()
            self.positions[:num_tokens] = torch.from_numpy(pos)
            self.is_prefilling.zero_()
            self.is_prefilling[:num_reqs] = torch.tensor(prefilling)
            for g, kind in enumerate(self.cfg.groups):
                per_block = BLOCK_SIZE if kind == "swa" else BLOCK_SIZE * {"c4": 4, "c128": 128}[kind] // BLOCK_SIZE
                self.tables[g].zero_()
                for r in range(num_reqs):
                    need = -(-int(seq[r]) // BLOCK_SIZE)
                    self.tables[g][r, :need] = torch.arange(self.next_block, self.next_block + need, dtype=torch.int32)
                    self.next_block += need
                table = self.tables[g]
                req_of = np.repeat(np.arange(num_reqs), lens)
                slot = table[torch.from_numpy(req_of), torch.from_numpy(pos // BLOCK_SIZE)].long() * BLOCK_SIZE + \
                    torch.from_numpy(pos % BLOCK_SIZE)
                self.slots[g].fill_(-1)
                self.slots[g][:num_tokens] = slot.to(torch.int32)
                del per_block
        cm = AscendCommonAttentionMetadata(
            query_start_loc=self.query_start_loc[:num_reqs + 1], query_start_loc_cpu=torch.from_numpy(qsl),
            seq_lens=self.seq_lens[:num_reqs], num_reqs=num_reqs, num_actual_tokens=num_tokens,
            max_query_len=max(lens), max_seq_len=int(seq.max()), block_table_tensor=self.tables[0][:num_reqs],
            slot_mapping=self.slots[0][:num_input_tokens], causal=self.cfg.method != "dspark",
            is_prefilling=self.is_prefilling[:num_reqs], seq_lens_cpu=torch.from_numpy(seq.copy()),
            positions=self.positions[:num_input_tokens], num_input_tokens=num_input_tokens,
            attn_state=AscendAttentionState.ChunkedPrefill if any(prefilling) else AscendAttentionState.SpecDecoding,
            num_computed_tokens_cpu=torch.tensor(computed, dtype=torch.int32))
        return cm


def flatten(obj, prefix: str, out: dict) -> dict:
    """Every field of a metadata object, tensors by value (a clone), the rest as a tensor or a
    string the comparison can check."""
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            flatten(getattr(obj, field.name), f"{prefix}.{field.name}", out)
    elif isinstance(obj, rope_dsv4.RopeDataProxy):
        out[f"{prefix}.idx"] = torch.tensor(obj.idx)
        for key in sorted(obj._data):
            for group in sorted(obj._data[key]):
                cos, sin = obj._data[key][group]
                out[f"{prefix}[{key}][{group}].cos"], out[f"{prefix}[{key}][{group}].sin"] = cos, sin
    elif isinstance(obj, dict):
        for key in sorted(obj, key=str):
            flatten(obj[key], f"{prefix}[{key}]", out)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            flatten(value, f"{prefix}[{i}]", out)
    elif isinstance(obj, (bool, int, float)) or obj is None:
        out[prefix] = torch.tensor(float("nan") if obj is None else obj, dtype=torch.float64)
    else:
        out[prefix] = torch.tensor([ord(c) for c in str(obj)], dtype=torch.int32)
    return out


def run(cfg: Config) -> dict:
    ascend_host.fake_for_the_guard(cfg)
    load_general_plugins()
    ascend_host.worker_patches()
    points = watch_adapters(ADAPTER_OWNERS)
    dsa_cp.get_tp_group = lambda: _Group(cfg.cp, cfg.cp_rank)
    model = DeviceModel()
    _rope_tables(model)
    vllm_config = _vllm_config(cfg)
    groups = _builders(cfg, vllm_config, model)
    proposer = _proposer(cfg, vllm_config, groups, model)
    batch = Batch(cfg, model)
    recorder = Recorder()
    costs, step_counts = [], []
    instruments = Instruments()
    for step in range(cfg.steps):
        cm = batch.next(step)
        if cfg.method == "dspark":
            for g in range(len(groups)):
                proposer._per_group_block_table_buffers[g].copy_(batch.tables[g])
                proposer._per_group_query_slot_mapping_buffers[g].copy_(batch.slots[g])
        with instruments, model:
            metas, first = proposer.build_draft_attn_metadata(cm, cm.num_input_tokens, cm.num_actual_tokens)
            step_costs = model.step_costs()
        # The host copies (query_start_loc_cpu, seq_lens_cpu) are host tensors here: the device
        # model says which reads leave the device, and those inside an adapter are its host syncs.
        counts = instruments.step_counts().as_dict()
        counts["adapter_syncs"] = step_costs.adapter_d2h
        step_counts.append(counts)
        costs.append(step_costs.as_dict())
        fields = {}
        for layer, meta in sorted(metas[0].items()):
            flatten(meta, layer, fields)
        recorder.add(step, "first_pass", fields)
    return {"records": recorder.records, "counts": step_counts, "costs": costs, "points": points, "states": plugin_states()}


def main() -> None:
    cfg = Config(**json.loads(sys.argv[1]))
    torch.save(run(cfg), sys.argv[2])


if __name__ == "__main__":
    main()
