"""The keyword arguments of the ops a draft step launches, every argument by its schema name.

The layer calls each op through the registry (specops.ops.registry.OPS) by keyword, without the
keyword wrapper (which would only convert lists and strings and allocate absent outputs). A step
plan builds each call's arguments once, as a dict of the schema's names; a new batch size copies
it and sets its outputs, and each step sets its inputs, in place (`arguments["cu_seqlens_q"]`),
then calls `op.select()(**arguments)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from specops.ops.registry import OPS, SpecOp
from specops.sas_family_layout import LAYOUT_KEY_CODES, LAYOUT_QUERY_CODES
from specops.sas_layout import LAYOUT_KV_CODES, LAYOUT_Q_CODES

if TYPE_CHECKING:
    from specops.drafting.configs import ModelConfig
    from specops.drafting.platform import DraftPlatform
    from specops.drafting.setup import SasArguments


COMPRESSOR_METADATA = OPS["compressor_metadata"]
COMPRESSOR_METADATA_MULTI = OPS["compressor_metadata_multi"]
DSPARK_SWA_INDICES_MULTI = OPS["dspark_swa_indices_multi"]
FORMAT_SLOT_MAPPING_BLOCKS_MULTI = OPS["format_slot_mapping_blocks_multi"]
KV_QUANT_SAS_METADATA = OPS["kv_quant_sas_metadata"]
LIGHTNING_INDEXER_METADATA = OPS["lightning_indexer_metadata"]
SAS_METADATA = OPS["sas_metadata"]

# The A5 schedule's kv_quant_mode as vllm-ascend's A5 DeviceOperator passes it to the metadata op.
A5_KV_QUANT_MODE = 1

# sas_metadata's KV layout for a step's batch: without requests seqused_kv is empty, which the
# kernel reads as not provided and PA_ND refuses; under the TND KV layout the same empty batch
# gets its schedule (core 0 over none).
LAYOUT_KV_PAGED = LAYOUT_KV_CODES["PA_ND"]
LAYOUT_KV_EMPTY_BATCH = LAYOUT_KV_CODES["TND"]


def format_arguments(block_sizes: list[int]) -> dict[str, object]:
    """format_slot_mapping_blocks_multi for every group of a plan; each size sets out, each step
    slot_mappings and num_slots."""
    return dict(slot_mappings=None, block_sizes=block_sizes, num_slots=None, out=None)


def sas_arguments(fixed: SasArguments, out: torch.Tensor) -> tuple[SpecOp, dict[str, object]]:
    """The schedule op and its arguments, as vllm-ascend's DSA builders
    call it for a group of one compress ratio: the CP-local query starts and KV lengths (TND
    queries, paged KV), one KV head, the band mask of the step's window; compressed groups add
    the compressed KV (C4: cmp_ratio 4 with the indexer's top-k, C128: cmp_ratio 128, cmp_topk 0)
    under the causal mask. sas_metadata on A2/A3, kv_quant_sas_metadata (kv_quant_mode 1) on A5.
    The step sets the batch: cu_seqlens_q, seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv
    and layout_kv."""
    shared = dict(
        num_heads_q=fixed.num_heads_q, num_heads_kv=1, head_dim=fixed.head_dim, cu_seqlens_q=None,
        cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None, seqused_kv=None, batch_size=None,
        max_seqlen_q=None, max_seqlen_kv=None, ori_topk=0, cmp_topk=fixed.cmp_topk, cmp_ratio=fixed.cmp_ratio,
        ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=fixed.ori_win_left, ori_win_right=fixed.ori_win_right,
        layout_q=LAYOUT_Q_CODES["TND"], layout_kv=None, has_ori_kv=True, has_cmp_kv=fixed.has_cmp_kv,
        num_cube_cores=fixed.num_cube_cores, num_vector_cores=fixed.num_vector_cores, ascend950=fixed.ascend950,
        out=out)
    if fixed.a5:
        return KV_QUANT_SAS_METADATA, dict(kv_quant_mode=A5_KV_QUANT_MODE, tile_size=0, rope_head_dim=0, **shared)
    return SAS_METADATA, shared


def indexer_arguments(model: ModelConfig, platform: DraftPlatform, out: torch.Tensor) -> dict[str, object]:
    """lightning_indexer_metadata as vllm-ascend's DSA builders call it for the C4 layers'
    indexer (the model's index heads, head size and top-k; TND queries, paged BSND keys, causal
    sparse mode 3, cmp_ratio 4) on the group's platform (its counts and SoC). The step sets the
    batch: the two length tensors, batch_size, the maxima and the layouts (BSND without tensors
    for an empty batch)."""
    return dict(
        num_heads_q=model.index_n_heads, num_heads_k=1, head_dim=model.index_head_dim, query_quant_mode=0,
        key_quant_mode=0, actual_seq_lengths_query=None, actual_seq_lengths_key=None, batch_size=None,
        max_seqlen_q=None, max_seqlen_k=None, layout_query=None, layout_key=None, sparse_count=model.index_topk,
        sparse_mode=3, pre_tokens=(1 << 63) - 1, next_tokens=(1 << 63) - 1, cmp_ratio=4,
        num_cube_cores=platform.num_cube_cores, num_vector_cores=platform.num_vector_cores,
        ascend950=platform.ascend950, out=out)


QLI_LAYOUT_QUERY, QLI_LAYOUT_KEY = LAYOUT_QUERY_CODES["TND"], LAYOUT_KEY_CODES["PA_BSND"]
QLI_LAYOUT_EMPTY = LAYOUT_QUERY_CODES["BSND"], LAYOUT_KEY_CODES["BSND"]


def set_sas_batch(arguments: dict[str, object], empty_kv: torch.Tensor | None, query_start_loc: torch.Tensor,
                  seq_lens: torch.Tensor, max_query_len: int, max_seq_len: int) -> None:
    """A sas (A5: kv_quant_sas) call's batch, in place: the host query starts and KV lengths of
    the step's (CP-local) batch and their maxima; an empty batch takes the TND KV layout, or on
    A5, which wants seqused_kv in every layout, `empty_kv` (one entry it never reads)."""
    num_reqs = seq_lens.numel()
    arguments["cu_seqlens_q"] = query_start_loc
    arguments["seqused_kv"] = seq_lens
    arguments["batch_size"] = num_reqs
    arguments["max_seqlen_q"] = max_query_len
    arguments["max_seqlen_kv"] = max_seq_len
    arguments["layout_kv"] = LAYOUT_KV_PAGED if num_reqs else LAYOUT_KV_EMPTY_BATCH
    if not num_reqs and empty_kv is not None:
        arguments["seqused_kv"], arguments["layout_kv"] = empty_kv, LAYOUT_KV_PAGED


def set_indexer_batch(arguments: dict[str, object], query_start_loc: torch.Tensor, seq_lens: torch.Tensor, max_query_len: int,
                      max_seq_len: int) -> None:
    """A lightning_indexer_metadata call's batch, in place: the query ends and KV lengths (TND
    queries, paged keys); an empty batch is BSND without tensors (empty TND tensors are refused)."""
    num_reqs = seq_lens.numel()
    if num_reqs:
        arguments["actual_seq_lengths_query"] = query_start_loc[1:]
        arguments["actual_seq_lengths_key"] = seq_lens
        arguments["max_seqlen_q"], arguments["max_seqlen_k"] = max_query_len, max_seq_len
        arguments["layout_query"], arguments["layout_key"] = QLI_LAYOUT_QUERY, QLI_LAYOUT_KEY
    else:
        arguments["actual_seq_lengths_query"] = arguments["actual_seq_lengths_key"] = None
        arguments["max_seqlen_q"] = arguments["max_seqlen_k"] = 0
        arguments["layout_query"], arguments["layout_key"] = QLI_LAYOUT_EMPTY
    arguments["batch_size"] = num_reqs


def dspark_arguments(*, windows: list[int], num_speculative_tokens: int, block_sizes: list[int], widths: list[int],
                     cp_size: int, cp_rank: int) -> dict[str, object]:
    """dspark_swa_indices_multi for one call's groups (their sliding windows, block sizes and
    index widths; their model's draft length and CP split); each size sets num_tokens, out and
    out_lens, each step block_tables, query_start_loc and seq_lens."""
    return dict(
        block_tables=None, query_start_loc=None, seq_lens=None, windows=windows,
        num_speculative_tokens=num_speculative_tokens, block_sizes=block_sizes, num_tokens=None,
        widths=widths, cp_size=cp_size, cp_rank=cp_rank, out=None, out_lens=None)
