"""The naive form of the drafting layer: one group's DraftAttnMetadata for one draft step, written
as plainly as its definition reads, with public ops and plain Python, one group at a time,
nothing shared between groups, nothing kept between steps.

`draft_metadata(model, group, common)` is what `DraftMetadataBuilder.build_for_drafting` must
return field for field (values, dtypes and shapes; the builder's tensors are views of persistent
buffers, these are new tensors), and what the tests compare every builder against. It reads the
host values of its inputs (`.tolist()`), so it syncs on a device: read it, do not run it in a
step.
"""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops.drafting.configs import (
    SLOT_MAPPING_FORMATS,
    CommonDraftInputs,
    DraftAttnMetadata,
    GroupConfig,
    ModelConfig,
)
from specops.drafting.platform import resolved_draft_platform
from specops.ops.compressor_metadata import compressor_metadata
from specops.ops.cp_local_metadata import CPLocalMetadata, cp_local_metadata
from specops.ops.dspark_swa_indices import dspark_swa_indices
from specops.ops.kv_quant_sas_metadata import kv_quant_sas_metadata
from specops.ops.lightning_indexer_metadata import lightning_indexer_metadata
from specops.ops.sas_metadata import sas_metadata


def step_window(group: GroupConfig, num_speculative_tokens: int, causal: bool) -> tuple[int, int]:
    """(left, right) of a step: a sliding window W is (W - 1, 0), full attention (-1, 0); a
    DSpark group on a non-causal step sees its draft block past the window, (W + K - 1, 0)."""
    if group.sliding_window is None:
        return (-1, 0)
    if group.dspark and not causal:
        return (group.sliding_window + num_speculative_tokens - 1, 0)
    return (group.sliding_window - 1, 0)


def dspark_width(group: GroupConfig, num_speculative_tokens: int) -> int:
    """GroupConfig.dspark_index_width, else W + K rounded up to a multiple of 128."""
    if group.dspark_index_width is not None:
        return group.dspark_index_width
    return -(-(group.sliding_window + num_speculative_tokens) // 128) * 128


def draft_metadata(model: ModelConfig, group: GroupConfig, common: CommonDraftInputs) -> DraftAttnMetadata:
    """Every field of the group's metadata for the step `common` describes."""
    num_reqs, num_tokens, num_input_tokens = common.num_reqs, common.num_actual_tokens, common.num_input_tokens
    device = common.query_start_loc.device
    # The counts, SoC and sas variant the schedules are for: the model's, any left None read
    # from the NPU the inputs are on (as a builder there reads them).
    platform = resolved_draft_platform(model, device)
    query_start_loc = common.query_start_loc[:num_reqs + 1]
    seq_lens = common.seq_lens[:num_reqs]
    starts = query_start_loc.tolist()
    query_lens = [end - start for start, end in zip(starts[:-1], starts[1:])]

    # A decode has at most one token past the K draft tokens and is not still in its prompt
    # (is_prefilling, where given: a short prefill chunk is a prefill); the rest are prefills.
    prefilling = [False] * num_reqs if common.is_prefilling is None else common.is_prefilling[:num_reqs].tolist()
    decodes = [length for length, flag in zip(query_lens, prefilling)
               if length <= 1 + model.num_speculative_tokens and not flag]

    # The padded stream: num_input_tokens rounded up to a multiple of cp_size, split evenly
    # over the ranks; padding tokens sit at position 0.
    pad = -(-num_input_tokens // model.cp_size) * model.cp_size
    per_rank = pad // model.cp_size
    local_start = model.cp_rank * per_rank
    positions = torch.zeros(pad, dtype=torch.int64, device=device)
    positions[:num_tokens] = common.positions[:num_tokens]

    # cos and sin: the two halves of the cache's row at each position.
    half = model.rope_cos_sin_cache.size(1) // 2
    rows = model.rope_cos_sin_cache[positions]
    # This rank's rows, with zeros for the padding tokens (the stream past num_actual_tokens).
    local_rows = rows[local_start:local_start + per_rank].clone()
    local_rows[max(num_tokens - local_start, 0):] = 0

    # This rank's slice of every request (a request with nothing here is empty).
    local_query_start_loc = torch.empty(num_reqs + 1, dtype=torch.int32, device=device)
    local_seq_lens = torch.empty(num_reqs, dtype=torch.int32, device=device)
    start_pos = torch.empty(num_reqs, dtype=torch.int32, device=device)
    cp_local_metadata(query_start_loc=query_start_loc, seq_lens=seq_lens, num_input_tokens=num_input_tokens,
                      cp_size=model.cp_size, cp_rank=model.cp_rank, causal=common.causal,
                      local_query_start_loc=local_query_start_loc, local_seq_lens=local_seq_lens, start_pos=start_pos)
    local_query_lens = (local_query_start_loc[1:] - local_query_start_loc[:-1]).tolist()
    max_local_query_len = max([1, *local_query_lens])
    max_local_seq_len = max([1, *local_seq_lens.tolist()])
    cp = CPLocalMetadata(
        local_query_start_loc=local_query_start_loc, local_seq_lens=local_seq_lens, start_pos=start_pos,
        num_tokens_pad=pad, tokens_per_rank=per_rank, local_start=local_start, local_end=local_start + per_rank,
        max_local_query_len=max_local_query_len, max_local_seq_len=max_local_seq_len)

    # sas_metadata as vllm-ascend's DSA draft builders call it: this rank's query starts and KV
    # lengths, one KV head, no compressed KV, the band mask of the step's window. A group
    # without a sliding window has none. Without requests the KV layout is TND (PA_ND needs
    # seqused_kv, which is then empty).
    # A compressed group adds its compressed KV: C4 with the indexer's top-k, C128 with none. On
    # A5 (platform.sas_variant "a5") the schedule is kv_quant_sas_metadata's, which wants a seqused_kv
    # even for no requests (one entry, never read).
    window = step_window(group, model.num_speculative_tokens, common.causal)
    ratio = group.compress_ratio
    sas = None
    if group.sliding_window is not None:
        arguments = dict(
            cu_seqlens_q=local_query_start_loc, seqused_kv=local_seq_lens, batch_size=num_reqs,
            max_seqlen_q=max_local_query_len, max_seqlen_kv=max_local_seq_len, cmp_ratio=ratio,
            cmp_topk=model.index_topk if ratio == 4 else 0, ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=window[0],
            ori_win_right=window[1], layout_q="TND", layout_kv="PA_ND" if num_reqs else "TND", has_cmp_kv=ratio > 1,
            num_cube_cores=platform.num_cube_cores, num_vector_cores=platform.num_vector_cores,
            soc_version=platform.soc_version)
        if platform.sas_variant == "a5":
            if not num_reqs:
                arguments.update(seqused_kv=torch.zeros(1, dtype=torch.int32, device=device), layout_kv="PA_ND")
            sas = kv_quant_sas_metadata(num_heads_q=model.num_heads_q, num_heads_kv=1, head_dim=model.head_dim,
                                        kv_quant_mode=1, **arguments)
        else:
            sas = sas_metadata(num_heads_q=model.num_heads_q, num_heads_kv=1, head_dim=model.head_dim, **arguments)

    # A C4 group's lightning-indexer schedule: this rank's query ends and KV lengths (TND queries,
    # paged keys); no requests: BSND without tensors, the empty schedule.
    qli = None
    if ratio == 4:
        indexer = dict(batch_size=num_reqs, sparse_count=model.index_topk, sparse_mode=3, cmp_ratio=4,
                       num_cube_cores=platform.num_cube_cores, num_vector_cores=platform.num_vector_cores,
                       soc_version=platform.soc_version)
        if num_reqs:
            indexer.update(actual_seq_lengths_query=local_query_start_loc[1:], actual_seq_lengths_key=local_seq_lens,
                           max_seqlen_q=max_local_query_len, max_seqlen_k=max_local_seq_len, layout_query="TND",
                           layout_key="PA_BSND")
        else:
            indexer.update(layout_query="BSND", layout_key="BSND")
        qli = lightning_indexer_metadata(num_heads_q=model.index_n_heads, num_heads_k=1, head_dim=model.index_head_dim,
                                         query_quant_mode=0, key_quant_mode=0, **indexer)

    # A compressed group's compressor metadata: the compression groups its requests complete,
    # from its block table, with the ratio's RoPE table, min(T, T // ratio + R) rows; slots flat
    # on A5, (block, offset) on A2/A3.
    compressed = None
    if ratio > 1 and group.compressor_metadata:
        table = model.compress_rope_cache(ratio)
        half = table.size(1) // 2
        start_pos = seq_lens - torch.tensor(query_lens, dtype=torch.int32, device=device)
        compressed = compressor_metadata(
            rope_cos=table[:, :half], rope_sin=table[:, half:], cu_seqlens=query_start_loc, start_pos=start_pos,
            kv_block_table=common.block_tables[group.name][:num_reqs], kv_block_size=group.storage_block_size,
            slot_mapping_format=1 if platform.sas_variant == "a5" else 2, compress_ratio=ratio,
            num_compressed_tokens=min(num_tokens, num_tokens // ratio + num_reqs), num_reqs_actual=num_reqs)

    # Each token's slot as (storage block, offset), PAD for the padding tokens; int32 formats
    # stop at the real tokens.
    int64 = group.slot_mapping_format == "int64_padded"
    slots = common.slot_mappings[group.name][:num_tokens].tolist()
    slots += [PAD_SLOT_ID] * (num_input_tokens - num_tokens) if int64 else []
    block = group.storage_block_size
    slot_mapping = torch.tensor([[slot // block, slot % block] for slot in slots],
                                dtype=SLOT_MAPPING_FORMATS[group.slot_mapping_format], device=device).view(-1, 2)

    # DSpark indices exist on non-causal steps only.
    indices = lens = None
    if group.dspark and not common.causal:
        indices, lens = dspark_swa_indices(
            block_table=common.block_tables[group.name][:num_reqs], query_start_loc=query_start_loc, seq_lens=seq_lens,
            window=group.sliding_window,
            num_speculative_tokens=model.num_speculative_tokens, block_size=group.block_size,
            num_tokens=num_input_tokens, width=dspark_width(group, model.num_speculative_tokens),
            cp_size=model.cp_size, cp_rank=model.cp_rank)

    return DraftAttnMetadata(
        num_decodes=len(decodes), num_prefills=num_reqs - len(decodes), num_decode_tokens=sum(decodes),
        num_prefill_tokens=num_tokens - sum(decodes), input_positions=positions[:num_input_tokens],
        cos=rows[:num_input_tokens, :half], sin=rows[:num_input_tokens, half:], cp=cp,
        local_cos=local_rows[:, :half], local_sin=local_rows[:, half:],
        start_pos=seq_lens - torch.tensor(query_lens, dtype=torch.int32, device=device), seq_lens_cpu=seq_lens,
        sas_metadata=sas, slot_mapping=slot_mapping, dspark_swa_indices=indices, dspark_swa_lens=lens, window=window,
        qli_metadata=qli, compress_cos=None if compressed is None else compressed.compress_cos,
        compress_sin=None if compressed is None else compressed.compress_sin,
        compress_slot_mapping=None if compressed is None else compressed.slot_mapping)
