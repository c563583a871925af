"""Triton launcher for lightning_indexer_metadata: sas_metadata's kernel (triton_kernels/sas_metadata.py)
with the indexer's tiles (256 query rows, 2048 or 128 keys) and tile cost (_sas_family.py)."""

from __future__ import annotations

import torch

from specops.sas_family_layout import LAYOUT_KEY_TND, LAYOUT_QUERY_TND, SOURCE_PREFIX_SUMS, li_variant
from specops.sas_layout import SOURCE_CONSTANT, SOURCE_CUMULATIVE, SOURCE_PER_BATCH, LengthSource, is_given
from specops.triton_kernels._sas_family import COST_INDEXER_950, COST_INDEXER_A3, npu_host_routed
from specops.triton_kernels.sas_metadata import launch_schedule


@npu_host_routed("lightning_indexer_metadata")
def lightning_indexer_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    has_query, has_key = is_given(a.actual_seq_lengths_query), is_given(a.actual_seq_lengths_key)
    query_batches = a.actual_seq_lengths_query.numel() if has_query else a.batch_size
    key_batches = a.actual_seq_lengths_key.numel() if has_key else a.batch_size
    if not has_query:
        query = LengthSource(SOURCE_CONSTANT, "max_seqlen_q", constant=a.max_seqlen_q)
    elif a.layout_query != LAYOUT_QUERY_TND:
        query = LengthSource(SOURCE_PER_BATCH, "actual_seq_lengths_query", a.actual_seq_lengths_query)
    else:
        kind = SOURCE_CUMULATIVE if query_batches > key_batches else SOURCE_PREFIX_SUMS
        query = LengthSource(kind, "actual_seq_lengths_query", a.actual_seq_lengths_query)
    if not has_key:
        key = LengthSource(SOURCE_CONSTANT, "max_seqlen_k", constant=a.max_seqlen_k * a.cmp_ratio)
    else:
        kind = SOURCE_PREFIX_SUMS if a.layout_key == LAYOUT_KEY_TND else SOURCE_PER_BATCH
        key = LengthSource(kind, "actual_seq_lengths_key", a.actual_seq_lengths_key)
    # The indexer's coster reads the mask mode (3: causal) and cmp_ratio; it has no window.
    launch_schedule(query, key, a.out, min(query_batches, key_batches), a.num_heads_q,
                    li_variant(a.ascend950, a.num_cube_cores), a.sparse_mode, 0, 0, True, a.cmp_ratio, 0,
                    COST_INDEXER_950 if a.ascend950 else COST_INDEXER_A3)
