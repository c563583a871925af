"""Triton launcher for lightning_indexer_metadata: sas_metadata's kernel (triton_kernels/sas_metadata.py)
with the indexer's tiles (256 query rows, 2048 or 128 keys) and tile cost (_sas_family.py)."""

from __future__ import annotations

import torch

from specops.sas_family_layout import LAYOUT_KEY_TND, LAYOUT_QUERY_TND, SOURCE_PREFIX_SUMS, li_variant
from specops.sas_layout import SOURCE_CONSTANT, SOURCE_CUMULATIVE, SOURCE_PER_BATCH, LengthSource, is_given
from specops.triton_kernels._sas_family import COST_INDEXER_950, COST_INDEXER_A3, npu_host_routed
from specops.triton_kernels.sas_metadata import launch_schedule


@npu_host_routed("lightning_indexer_metadata")
def lightning_indexer_metadata(
    num_heads_q: int, num_heads_k: int, head_dim: int, query_quant_mode: int, key_quant_mode: int,
    actual_seq_lengths_query: torch.Tensor | None, actual_seq_lengths_key: torch.Tensor | None, batch_size: int,
    max_seqlen_q: int, max_seqlen_k: int, layout_query: int, layout_key: int, sparse_count: int, sparse_mode: int,
    pre_tokens: int, next_tokens: int, cmp_ratio: int, num_cube_cores: int, num_vector_cores: int, ascend950: bool,
    out: torch.Tensor,
) -> None:
    has_query, has_key = is_given(actual_seq_lengths_query), is_given(actual_seq_lengths_key)
    query_batches = actual_seq_lengths_query.numel() if has_query else batch_size
    key_batches = actual_seq_lengths_key.numel() if has_key else batch_size
    if not has_query:
        query = LengthSource(SOURCE_CONSTANT, "max_seqlen_q", constant=max_seqlen_q)
    elif layout_query != LAYOUT_QUERY_TND:
        query = LengthSource(SOURCE_PER_BATCH, "actual_seq_lengths_query", actual_seq_lengths_query)
    else:
        kind = SOURCE_CUMULATIVE if query_batches > key_batches else SOURCE_PREFIX_SUMS
        query = LengthSource(kind, "actual_seq_lengths_query", actual_seq_lengths_query)
    if not has_key:
        key = LengthSource(SOURCE_CONSTANT, "max_seqlen_k", constant=max_seqlen_k * cmp_ratio)
    else:
        kind = SOURCE_PREFIX_SUMS if layout_key == LAYOUT_KEY_TND else SOURCE_PER_BATCH
        key = LengthSource(kind, "actual_seq_lengths_key", actual_seq_lengths_key)
    # The indexer's coster reads the mask mode (3: causal) and cmp_ratio; it has no window.
    launch_schedule(query, key, out, min(query_batches, key_batches), num_heads_q,
                    li_variant(ascend950, num_cube_cores), sparse_mode, 0, 0, True, cmp_ratio, 0,
                    COST_INDEXER_950 if ascend950 else COST_INDEXER_A3)
