"""Reference for kv_quant_sas_metadata: sas_metadata's reference schedule (reference/sas_metadata.py)
with the A5 variant: its tiles, 9-word entries and core pairs (sas_family_layout.kv_quant_plan).
The kernel ignores ori_win_right (the band ends at each token) and reads only seqused_kv for KV."""

from __future__ import annotations

import torch

from specops.reference.sas_metadata import InvalidValues, schedule_words
from specops.sas_family_layout import kv_quant_plan
from specops.sas_layout import NUM_WORDS, LAYOUT_KV_PA_ND


def kv_quant_sas_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    plan = kv_quant_plan(a.num_heads_q, a.has_cmp_kv and a.cmp_topk > 0, a.ascend950, a.num_cube_cores, a.num_vector_cores)
    try:
        # seqused_kv is the only KV length read: the PA_ND layout code picks it whatever layout_kv is.
        words = schedule_words(a.num_heads_q, a.cu_seqlens_q, None, a.seqused_q, a.seqused_kv, a.batch_size, a.max_seqlen_q, 0,
                               a.cmp_topk, a.cmp_ratio, a.ori_mask_mode, a.ori_win_left, 0, a.layout_q, LAYOUT_KV_PA_ND,
                               a.has_cmp_kv, plan.variant.planned_cores, a.ascend950, plan.variant)
    except InvalidValues:
        words = [0] * NUM_WORDS
    a.out.copy_(torch.tensor(words, dtype=torch.int32))
