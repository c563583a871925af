"""The OpSpec of torch.ops.specops.kv_quant_sas_metadata (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import attention_batches, query_start_loc_of

import specops

from ._corruptions import _decreasing, _negative, _one_entry
from ._spec import I32, I64, Bad, Call, Corruption, OpSpec, bad, stale, t32, t64
from .sas_metadata import SAS_TENSORS, schedule_rows


def _kvq_valid() -> Call:
    return dict(num_heads_q=128, num_heads_kv=1, head_dim=512, kv_quant_mode=1, cu_seqlens_q=t32(0, 2, 3),
                cu_seqlens_ori_kv=t32(0, 10, 310), cu_seqlens_cmp_kv=t32(0, 2, 77), seqused_q=t32(2, 1), seqused_kv=t32(10, 300),
                batch_size=2, max_seqlen_q=2, max_seqlen_kv=300, ori_topk=0, cmp_topk=512, tile_size=0,
                rope_head_dim=0, cmp_ratio=4, ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=127, ori_win_right=0,
                layout_q="TND", layout_kv="PA_ND", has_ori_kv=True, has_cmp_kv=True, num_cube_cores=8,
                num_vector_cores=16, soc_version="Ascend950PR_9599", out=stale(1024))


def _kvq_metadata() -> list[Bad]:
    return schedule_rows() + [
        bad("num_heads_q 32", "num_heads_q", num_heads_q=32),
        bad("num_heads_kv 2", "num_heads_kv", num_heads_kv=2),
        bad("kv_quant_mode past int32", "kv_quant_mode", kv_quant_mode=2**31),
        bad("tile_size past int32", "tile_size", tile_size=2**31),
        bad("rope_head_dim past int32", "rope_head_dim", rope_head_dim=2**31),
        bad("ori_topk past int32", "ori_topk", ori_topk=-(2**31) - 1),
        bad("cmp_mask_mode past int32", "cmp_mask_mode", cmp_mask_mode=2**32),
        bad("max_seqlen_kv past int32", "max_seqlen_kv", max_seqlen_kv=2**31),
        bad("cmp_ratio -1 with compressed KV", "cmp_ratio", cmp_ratio=-1),
        bad("cmp_topk 256", "cmp_topk", cmp_topk=256),
        bad("ori_mask_mode 1", "ori_mask_mode", ori_mask_mode=1),
        bad("ori_win_left -1", "ori_win_left", ori_win_left=-1),
        bad("ori_win_left past 2^62", "ori_win_left", ori_win_left=2**62 + 1),
        bad("num_cube_cores 0", "num_cube_cores", num_cube_cores=0),
        bad("num_cube_cores 1 with 128 heads on Ascend950", "num_cube_cores", num_cube_cores=1),
        bad("num_cube_cores 38 with 128 heads", "num_cube_cores", num_cube_cores=38),
        bad("128 heads on A2/A3 with 24 cube cores", "num_cube_cores", num_cube_cores=24, soc_version="Ascend910B1"),
        bad("num_vector_cores 0", "num_vector_cores", num_vector_cores=0),
        bad("layout_q BSH", "layout_q", layout_q="BSH"),
        bad("layout_kv BSND with layout_q TND", "layout_kv", layout_kv="BSND"),
        bad("TND without cu_seqlens_q", "cu_seqlens_q", cu_seqlens_q=None),
        bad("without seqused_kv", "seqused_kv", seqused_kv=None),
        bad("seqused_kv shorter than B", ("seqused_kv", "seqused_q"), seqused_kv=t32(10)),
    ]


def _kvq_values() -> list[Bad]:
    return [
        bad("cu_seqlens_q decreasing", "cu_seqlens_q", seqused_q=None, cu_seqlens_q=t32(0, 3, 2)),
        bad("negative seqused_q", "seqused_q", seqused_q=t32(2, -1)),
        bad("negative seqused_kv", "seqused_kv", seqused_kv=t32(-1, 300)),
        bad("seqused_kv past int32", "seqused_kv", seqused_kv=t64(10, 2**31)),
    ]


@st.composite
def _kvq_draw(draw) -> Call:
    query_lens, kv_lens = draw(attention_batches(max_reqs=4, max_prefill=12, max_context=900))
    heads = draw(st.sampled_from([64, 128]))
    a5 = draw(st.booleans())
    dtype = draw(st.sampled_from([I32, I64]))
    cores = draw(st.integers(2, 36 if (a5 or heads == 64) else 18))
    has_cmp_kv = draw(st.booleans())
    return dict(num_heads_q=heads, num_heads_kv=1, head_dim=512, kv_quant_mode=1,
                cu_seqlens_q=query_start_loc_of(query_lens).to(dtype), cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None,
                seqused_q=None, seqused_kv=torch.tensor(kv_lens or [0], dtype=dtype), batch_size=len(query_lens),
                max_seqlen_q=max(query_lens, default=0), max_seqlen_kv=max(kv_lens, default=0), ori_topk=0,
                cmp_topk=draw(st.sampled_from([0, 512])), tile_size=0, rope_head_dim=0,
                cmp_ratio=draw(st.sampled_from([4, 128])) if has_cmp_kv else 1,
                ori_mask_mode=draw(st.sampled_from([0, 3, 4])), cmp_mask_mode=3,
                ori_win_left=draw(st.sampled_from([0, 127, 1000])), ori_win_right=draw(st.sampled_from([0, 5])),
                layout_q="TND", layout_kv="PA_ND", has_ori_kv=True, has_cmp_kv=has_cmp_kv, num_cube_cores=cores,
                num_vector_cores=draw(st.integers(1, 72)) if not (a5 and heads == 128) else 2 * cores,
                soc_version="Ascend950PR_9599" if a5 else "Ascend910B1", out=stale(1024))


def _read_kv_entry(draw, call: Call) -> int | None:
    """An entry of seqused_kv the kernel reads (one of the first B; with B = 0 none is)."""
    batches = call["cu_seqlens_q"].numel() - 1
    return draw(st.integers(0, batches - 1)) if batches > 0 else None


KV_QUANT_SAS = OpSpec(
    name="kv_quant_sas_metadata",
    wrapper=specops.kv_quant_sas_metadata,
    tensors=SAS_TENSORS,
    outputs=("out",),
    valid_call=_kvq_valid,
    metadata_errors=_kvq_metadata,
    value_errors=_kvq_values,
    draw_call=_kvq_draw(),
    corruptions=(
        Corruption("negative seqused_kv", _one_entry("seqused_kv", _negative, native_raises=True, where=_read_kv_entry)),
        Corruption("decreasing cu_seqlens_q", _decreasing("cu_seqlens_q", first=1)),
    ),
    guard_examples=8,
    host_tensors=("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv"),
    # ori_win_right is not listed: the kernel ignores it, so no value of it is rejected.
    scalars=("num_heads_q", "num_heads_kv", "head_dim", "kv_quant_mode", "batch_size", "max_seqlen_q",
             "max_seqlen_kv", "ori_topk", "cmp_topk", "tile_size", "rope_head_dim", "cmp_ratio", "ori_mask_mode",
             "cmp_mask_mode", "ori_win_left", "num_cube_cores", "num_vector_cores"),
    allocation_sizes={},
)
