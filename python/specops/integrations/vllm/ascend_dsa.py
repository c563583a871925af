"""vllm-ascend's DSA-CP draft metadata (point "dsa_cp_draft"; docs/integrations.md, "Ascend").

The V1 proposer that DSA models with context parallelism take builds its first draft pass's
attention metadata in `build_draft_attn_metadata` (vllm_ascend/spec_decode/llm_base_proposer.py):
one `AscendDSACPMetadataBuilder` (attention/context_parallel/dsa_cp.py) per draft KV-cache group,
each given a fresh cache dict, so every group recomputes what no group changes (the split
statistics, positions, RoPE rows, the CP-local query layout and lengths, the sas and indexer
schedules), and its indexer schedule reads two lengths off the device (`.item()`). For DSpark's
parallel-drafting pass it calls each builder's `build_for_drafting` the same way.

Here the whole pass is `specops.drafting`: one DraftMetadataBuilder per group (made once per
proposer), one StepCache across the groups, so the group-invariant results are computed once
and each group adds its formatted slot mapping (one launch for all groups) and, for DSpark, its
indices (one launch for all); host lengths come from the runner's host copies, nothing is read
off the device (the runner's `seq_lens_cpu`; where it has none, the drafting layer makes one
device-to-host copy, where vllm-ascend's builders make one each). The adapter hands
vllm-ascend's own metadata classes (`AscendDSAMetadata`, `AscendDSAReqMetadata`,
`DSACPMetadata`, the RoPE proxies) with every field as its builders fill them. The tensors are the drafting layer's persistent buffers (per group and draft index),
shared by the groups where vllm-ascend's are per builder; the builders' own buffers are left
alone, so the adapter serves eager and piecewise drafting only (a FULL-graph proposer keeps
vllm-ascend's builders, which its captured graphs read).

Served when: every draft group's builder is an AscendDSACPMetadataBuilder, the proposer uses
the compressed-attention path, the method is MTP's first pass (`build`) or DSpark (`build_for_
drafting`, SWA groups), the model's main RoPE rows come from one table, and the step's sizes
fit the builders. Anything else is vllm-ascend's own method.
"""

from __future__ import annotations

import functools
import weakref

import torch

from specops.integrations.vllm.mrv2 import point

_P = "vllm_ascend.spec_decode.llm_base_proposer"
_DSA = "vllm_ascend.attention.context_parallel.dsa_cp"
_BUILDER = f"{_DSA}:AscendDSACPMetadataBuilder"


def points(Point, Patch):
    """The point of the Ascend row; its reads: every builder method whose results it reproduces."""
    reads = tuple(f"{_BUILDER}.{name}" for name in (
        "__init__", "build", "build_for_drafting", "build_req_metadata", "build_req_metadata_for_drafting",
        "_ensure_device_local_metadata", "_build_local_token_metadata", "_build_sas_metadata", "_build_qli_metadata",
        "_get_cmp_seqlens_for_metadata", "_num_compressor_metadata_rows"))
    return (Point("dsa_cp_draft", (Patch(f"{_P}:AscendSpecDecodeBaseProposer.build_draft_attn_metadata",
                                         make_build_draft_attn_metadata),),
                  reads=reads + ("vllm_ascend.ops.rope_dsv4:get_cos_and_sin_dsa",
                                 "vllm_ascend.attention.utils:split_decodes_and_prefills",
                                 "vllm_ascend.attention.dsa_v1:build_dspark_swa_indices")),)


class _Served:
    """One proposer's drafting-layer builders and what the adapter reads of the model."""

    def __init__(self, builders, groups, rope_keys, dspark: bool, max_num_reqs: int, max_num_tokens: int):
        self.builders, self.groups, self.rope_keys, self.dspark = builders, groups, rope_keys, dspark
        self.max_num_reqs, self.max_num_tokens = max_num_reqs, max_num_tokens


_served: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _platform(device: torch.device) -> dict:
    """The core counts and SoC the schedules are for: on the NPU each drafting builder reads its
    own; on any other device (a proof's stand-in NPU), torch.npu's device properties."""
    if device.type == "npu":
        return {}
    properties = torch.npu.get_device_properties(0)
    return dict(num_cube_cores=properties.cube_core_num, num_vector_cores=properties.vector_core_num,
                soc_version=properties.name)


def _rope_table():
    """(the config keys of vllm-ascend's RoPE state, the main layers' [max_position, rot_dim]
    cos | sin table), or None when the main rows ("default") come from other than one table."""
    from vllm_ascend.ops import rope_dsv4

    state = rope_dsv4._ROPE_STATE
    keys = [key for key in state.registry_summary if key in state.full_rope_cache]
    main = [key for key in keys if "default" in state.registry_summary[key]]
    if len(main) != 1:
        return None
    cos, sin = state.full_rope_cache[main[0]]
    return keys, main[0], torch.cat([cos, sin], dim=1)


def _setup(proposer) -> _Served | None:
    from vllm_ascend.attention.context_parallel import dsa_cp

    from specops.drafting import DraftMetadataBuilder, GroupConfig, ModelConfig

    groups = proposer.draft_attn_groups
    builders = [group.get_metadata_builder() for group in groups]
    dspark = proposer.method == "dspark"
    if (not proposer.use_compress or getattr(proposer, "use_cuda_graph", False) or not builders
            or any(type(b) is not dsa_cp.AscendDSACPMetadataBuilder for b in builders)
            or (dspark and any(b.compressor_ratio > 1 for b in builders))):
        return None
    rope = _rope_table()
    if rope is None:
        return None
    keys, main, table = rope
    vllm_config = builders[0].vllm_config
    hf = vllm_config.model_config.hf_config
    tp = dsa_cp.get_tp_group()
    table = table.to(builders[0].device)
    device = table.device  # the builders' device as tensors report it
    model = ModelConfig(num_heads_q=hf.num_attention_heads, num_heads_kv=1,
                        head_dim=vllm_config.model_config.get_head_size(), rope_cos_sin_cache=table,
                        num_speculative_tokens=vllm_config.speculative_config.num_speculative_tokens,
                        cp_size=tp.world_size, cp_rank=tp.rank_in_group, index_topk=getattr(hf, "index_topk", 512),
                        index_n_heads=getattr(hf, "index_n_heads", 64), index_head_dim=getattr(hf, "index_head_dim", 128),
                        **_platform(device))
    scheduler = vllm_config.scheduler_config
    made = []
    for group, builder in zip(groups, builders):
        ratio = builder.compressor_ratio if builder.compressor_ratio > 1 else 1
        config = GroupConfig(builder.cache_group_key, block_size=group.kv_cache_spec.block_size,
                             storage_block_size=group.kv_cache_spec.block_size, sliding_window=hf.sliding_window,
                             dspark=dspark, slot_mapping_format="int32_actual", compress_ratio=ratio,
                             compressor_metadata=False)  # vllm-ascend launches it in the forward
        made.append(DraftMetadataBuilder(model, config, max_num_reqs=scheduler.max_num_seqs,
                                         max_num_tokens=scheduler.max_num_batched_tokens, device=device))
    return _Served(made, groups, (keys, main), dspark, scheduler.max_num_seqs, scheduler.max_num_batched_tokens)


def _served_for(proposer) -> _Served | None:
    if proposer not in _served:
        try:
            _served[proposer] = _setup(proposer)
        except (ValueError, TypeError, AttributeError):  # a model or group the drafting layer does not take
            _served[proposer] = None
    return _served[proposer]


def _proxies(keys_main, cos, sin):
    """vllm-ascend's RoPE proxies over these rows: every registered table's entry, the main
    layers' group in its own ("default"), the others' empty, as get_cos_and_sin_dsa builds them."""
    from vllm_ascend.ops.rope_dsv4 import RopeDataProxy

    keys, main = keys_main
    data = {key: ({"default": (cos, sin)} if key == main else {}) for key in keys}
    return RopeDataProxy(data, is_cos=True), RopeDataProxy(data, is_cos=False)


def _inputs(served: _Served, cm, num_input_tokens: int, group_tables, group_slots):
    """The drafting layer's inputs; group_tables / group_slots: DSpark's per-group buffers (the
    proposer's, by KV-cache group id), None on MTP's first pass."""
    from specops.drafting import CommonDraftInputs

    names = [b.group.name for b in served.builders]
    if served.dspark:
        tables = {name: group_tables[g.kv_cache_group_id][:cm.num_reqs] for name, g in zip(names, served.groups)}
        slots = {name: group_slots[g.kv_cache_group_id][:num_input_tokens] for name, g in zip(names, served.groups)}
    else:  # the MTP first pass: every group maps the common layout
        tables = dict.fromkeys(names, cm.block_table_tensor)
        slots = dict.fromkeys(names, cm.slot_mapping)
    is_prefilling = cm.is_prefilling
    return CommonDraftInputs(
        query_start_loc=cm.query_start_loc, query_start_loc_cpu=cm.query_start_loc_cpu, seq_lens=cm.seq_lens,
        seq_lens_cpu=cm.seq_lens_cpu, positions=cm.positions, num_reqs=cm.num_reqs,
        num_actual_tokens=cm.num_actual_tokens, num_input_tokens=num_input_tokens, causal=bool(cm.causal),
        block_tables=tables, slot_mappings=slots,
        is_prefilling=None if is_prefilling is None or is_prefilling.device.type != "cpu" else is_prefilling), tables


def _fits(served: _Served, cm, num_input_tokens: int) -> bool:
    """Host sizes only: the step is one the drafting builders hold, and its host copies are on
    the host (else vllm-ascend's own method)."""
    return (0 < cm.num_reqs <= served.max_num_reqs and cm.num_actual_tokens <= num_input_tokens <= served.max_num_tokens
            and cm.positions is not None and cm.query_start_loc_cpu.device.type == "cpu"
            and (cm.is_prefilling is None or cm.is_prefilling.device.type == "cpu"))


def _metadata(served: _Served, group, builder, m, cm, tables, num_input_tokens: int, rope, local_rope):
    """vllm-ascend's metadata of one group from the drafting layer's result `m`."""
    from vllm_ascend.attention.context_parallel.dsa_cp import AscendDSACPMetadataBuilder, AscendDSAReqMetadata, DSACPMetadata
    from vllm_ascend.device.device_op import DeviceOperator
    from vllm_ascend.ops.rope_dsv4 import get_full_cos_and_sin_dsa

    num_reqs, cp, ratio = cm.num_reqs, m.cp, builder.compressor_ratio
    cos, sin = rope
    has_prefill = m.num_prefills > 0
    seq_lens = cm.seq_lens[:num_reqs]
    cp_metadata = DSACPMetadata(local_query_start_loc=cp.local_query_start_loc, local_seq_lens=cp.local_seq_lens,
                                local_start=cp.local_start, local_end=cp.local_end, tokens_per_rank=cp.tokens_per_rank,
                                num_tokens_pad=cp.num_tokens_pad, local_sin=local_rope[1], local_cos=local_rope[0])
    fields = dict(input_positions=m.input_positions, block_table=tables[builder.cache_group_key][:num_reqs],
                  block_size=group.kv_cache_spec.block_size, seq_lens=seq_lens, query_start_loc=cm.query_start_loc,
                  cp_metadata=cp_metadata, cache_group_key=builder.cache_group_key, sin=sin, cos=cos,
                  start_pos=m.start_pos, sas_metadata=m.sas_metadata)
    if served.dspark:
        fields.update(slot_mapping=m.slot_mapping, qli_metadata=None, cu_cmp_seqlen_list=None, ori_win_left=m.window[0],
                      ori_win_right=m.window[1], dspark_swa_indices=m.dspark_swa_indices)
        hadamard = None
    else:
        compressed = ratio > 1
        full_cos, full_sin = get_full_cos_and_sin_dsa(f"c{ratio}") if compressed else (None, None)
        fields.update(
            slot_mapping=None if compressed else m.slot_mapping, full_compress_cos=full_cos, full_compress_sin=full_sin,
            num_compressed_tokens=min(cm.num_actual_tokens, cm.num_actual_tokens // ratio + num_reqs) if compressed
            else None, num_reqs_actual=num_reqs, qli_metadata=m.qli_metadata,
            cu_cmp_seqlen_list=DeviceOperator.get_dsa_decode_cu_seqlens_cmp_kv(builder.cu_seqlens_cmp_kv)
            if compressed and not has_prefill else None)
        hadamard = AscendDSACPMetadataBuilder.hadamard
    return builder.metadata_cls(
        num_input_tokens=cm.num_input_tokens, num_actual_tokens=cm.num_actual_tokens,
        head_dim=builder.model_config.get_head_size(), attn_mask=None, num_decodes=m.num_decodes,
        num_decode_tokens=m.num_decode_tokens, num_prefills=m.num_prefills, attn_state=cm.attn_state,
        req_metadata=AscendDSAReqMetadata(**fields), query_start_loc=cm.query_start_loc, block_tables=None,
        seq_lens=seq_lens, cos=cos, sin=sin, hadamard=hadamard)


def make_build_draft_attn_metadata(original):
    from specops.drafting import StepCache, build_draft_attn_metadata as build_step

    @point("dsa_cp_draft")
    @functools.wraps(original)
    def build_draft_attn_metadata(self, common_attn_metadata, num_input_tokens, num_actual_tokens):
        served = _served_for(self)
        cm = common_attn_metadata
        if served is None or not _fits(served, cm, num_input_tokens) or cm.num_input_tokens != num_input_tokens:
            return original(self, common_attn_metadata, num_input_tokens, num_actual_tokens)
        # DSpark's per-group buffers, as vllm-ascend's method reads them off the proposer.
        common, tables = _inputs(served, cm, num_input_tokens,
                                 self._per_group_block_table_buffers if served.dspark else None,
                                 self._per_group_query_slot_mapping_buffers if served.dspark else None)
        results = build_step(served.builders, common, 1, cache=StepCache())
        first = results[0]
        rope = _proxies(served.rope_keys, first.cos, first.sin)
        local_rope = _proxies(served.rope_keys, first.local_cos, first.local_sin)
        per_layer = {}
        for group, builder, m in zip(served.groups, (g.get_metadata_builder() for g in served.groups), results):
            metadata = _metadata(served, group, builder, m, cm, tables, num_input_tokens, rope, local_rope)
            for layer_name in group.layer_names:
                per_layer[layer_name] = metadata
        return [per_layer], per_layer[served.groups[0].layer_names[0]]
    return build_draft_attn_metadata
