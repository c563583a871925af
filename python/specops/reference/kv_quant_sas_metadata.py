"""Reference for kv_quant_sas_metadata: sas_metadata's reference schedule (reference/sas_metadata.py)
with the A5 variant: its tiles, 9-word entries and core pairs (sas_family_layout.kv_quant_plan).
The kernel ignores ori_win_right (the band ends at each token) and reads only seqused_kv for KV."""

from __future__ import annotations

import torch

from specops.reference.sas_metadata import InvalidValues, schedule_words
from specops.sas_family_layout import kv_quant_plan
from specops.sas_layout import NUM_WORDS, LAYOUT_KV_PA_ND


def kv_quant_sas_metadata(
    num_heads_q: int, num_heads_kv: int, head_dim: int, kv_quant_mode: int, cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_ori_kv: torch.Tensor | None, cu_seqlens_cmp_kv: torch.Tensor | None, seqused_q: torch.Tensor | None,
    seqused_kv: torch.Tensor | None, batch_size: int, max_seqlen_q: int, max_seqlen_kv: int, ori_topk: int,
    cmp_topk: int, tile_size: int, rope_head_dim: int, cmp_ratio: int, ori_mask_mode: int, cmp_mask_mode: int,
    ori_win_left: int, ori_win_right: int, layout_q: int, layout_kv: int, has_ori_kv: bool, has_cmp_kv: bool,
    num_cube_cores: int, num_vector_cores: int, ascend950: bool, out: torch.Tensor,
) -> None:
    plan = kv_quant_plan(num_heads_q, has_cmp_kv and cmp_topk > 0, ascend950, num_cube_cores, num_vector_cores)
    try:
        # seqused_kv is the only KV length read: the PA_ND layout code picks it whatever layout_kv is.
        words = schedule_words(num_heads_q, cu_seqlens_q, None, seqused_q, seqused_kv, batch_size, max_seqlen_q, 0,
                               cmp_topk, cmp_ratio, ori_mask_mode, ori_win_left, 0, layout_q, LAYOUT_KV_PA_ND,
                               has_cmp_kv, plan.variant.planned_cores, ascend950, plan.variant)
    except InvalidValues:
        words = [0] * NUM_WORDS
    out.copy_(torch.tensor(words, dtype=torch.int32))
