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
def kv_quant_sas_metadata(
    num_heads_q: int, num_heads_kv: int, head_dim: int, kv_quant_mode: int, cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_ori_kv: torch.Tensor | None, cu_seqlens_cmp_kv: torch.Tensor | None, seqused_q: torch.Tensor | None,
    seqused_kv: torch.Tensor | None, batch_size: int, max_seqlen_q: int, max_seqlen_kv: int, ori_topk: int,
    cmp_topk: int, tile_size: int, rope_head_dim: int, cmp_ratio: int, ori_mask_mode: int, cmp_mask_mode: int,
    ori_win_left: int, ori_win_right: int, layout_q: int, layout_kv: int, has_ori_kv: bool, has_cmp_kv: bool,
    num_cube_cores: int, num_vector_cores: int, ascend950: bool, out: torch.Tensor,
) -> None:
    plan = kv_quant_plan(num_heads_q, has_cmp_kv and cmp_topk > 0, ascend950, num_cube_cores, num_vector_cores)
    launch_schedule(query_lengths(layout_q, cu_seqlens_q, seqused_q, max_seqlen_q),
                    LengthSource(SOURCE_PER_BATCH, "seqused_kv", seqused_kv), out,
                    num_batches(layout_q, cu_seqlens_q, seqused_q, batch_size), num_heads_q, plan.variant,
                    ori_mask_mode, ori_win_left, 0, has_cmp_kv, cmp_ratio, cmp_topk)
