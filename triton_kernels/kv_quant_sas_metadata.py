"""Triton launcher for kv_quant_sas_metadata: sas_metadata's kernel (triton_kernels/sas_metadata.py)
with the A5 variant: its tiles, 9-word entries, core pairs and s2_max_num; ori_win_right ignored,
seqused_kv the only KV length."""

from __future__ import annotations

import torch

from specops.sas_family_layout import kv_quant_plan
from specops.sas_layout import SOURCE_PER_BATCH, LengthSource, num_batches, query_lengths
from specops.triton_kernels._sas_family import npu_host_routed
from specops.triton_kernels.sas_metadata import launch_schedule


@npu_host_routed("kv_quant_sas_metadata")
def kv_quant_sas_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    plan = kv_quant_plan(a.num_heads_q, a.has_cmp_kv and a.cmp_topk > 0, a.ascend950, a.num_cube_cores, a.num_vector_cores)
    launch_schedule(query_lengths(a.layout_q, a.cu_seqlens_q, a.seqused_q, a.max_seqlen_q),
                    LengthSource(SOURCE_PER_BATCH, "seqused_kv", a.seqused_kv), a.out,
                    num_batches(a.layout_q, a.cu_seqlens_q, a.seqused_q, a.batch_size), a.num_heads_q, plan.variant,
                    a.ori_mask_mode, a.ori_win_left, 0, a.has_cmp_kv, a.cmp_ratio, a.cmp_topk)
