"""The OpSpec of torch.ops.specops.sas_metadata (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from strategies import sas_calls

import specops

from ._corruptions import _one_entry, _negative, _decreasing
from ._spec import (
    I32, I64, Call, Arg, Bad, Corruption, OpSpec, SLOW_KERNEL_GUARD_EXAMPLES, bad, t32, t64, stale,
)


# The length tensors of sas_metadata and kv_quant_sas_metadata, and out.
SAS_TENSORS = dict(cu_seqlens_q=Arg((I32, I64), 1), cu_seqlens_ori_kv=Arg((I32, I64), 1),
                   cu_seqlens_cmp_kv=Arg((I32, I64), 1), seqused_q=Arg((I32, I64), 1),
                   seqused_kv=Arg((I32, I64), 1), out=Arg((I32,), 1))


def schedule_rows() -> list[Bad]:
    """The rows every member of the sas family rejects alike: out's size, an attribute past
    int32, a negative B or query length."""
    return [
        bad("out of 1023 words", "out", out=stale(1023)),
        bad("head_dim past int32", "head_dim", head_dim=2**31),
        bad("batch_size -1", "batch_size", batch_size=-1),
        bad("max_seqlen_q -1", "max_seqlen_q", max_seqlen_q=-1),
    ]


def _sas_valid() -> Call:
    # Every tensor given: seqused_q sets B and the query lengths, seqused_kv the KV lengths (the
    # cumulative ones are the kernel's fallbacks and go unread here).
    return dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=t32(0, 2, 3), cu_seqlens_ori_kv=t32(0, 10, 310),
                cu_seqlens_cmp_kv=t32(0, 2, 77), seqused_q=t32(2, 1), seqused_kv=t32(10, 300), batch_size=2,
                max_seqlen_q=2, max_seqlen_kv=300, ori_topk=0, cmp_topk=512, cmp_ratio=4, ori_mask_mode=4,
                cmp_mask_mode=3, ori_win_left=127, ori_win_right=0, layout_q="TND", layout_kv="PA_ND",
                has_ori_kv=True, has_cmp_kv=True, num_cube_cores=4, num_vector_cores=8, soc_version="Ascend910B1",
                out=stale(1024))


def _sas_metadata() -> list[Bad]:
    # The AI-CPU kernel's own refusals, the inputs it has no defined answer for, and the int32
    # range of the attributes it reads as int32.
    return schedule_rows() + [
        bad("num_heads_q 0", "num_heads_q", num_heads_q=0),
        bad("num_heads_q past int32", "num_heads_q", num_heads_q=2**31),
        bad("num_heads_q 16 with layout_kv BSND", "num_heads_q", num_heads_q=16, layout_q="BSND", layout_kv="BSND"),
        bad("num_heads_kv 2", "num_heads_kv", num_heads_kv=2),
        bad("max_seqlen_kv -1", "max_seqlen_kv", max_seqlen_kv=-1),
        bad("ori_topk past int32", "ori_topk", ori_topk=-(2**31) - 1),
        bad("cmp_topk 256", "cmp_topk", cmp_topk=256),
        bad("cmp_ratio 8", "cmp_ratio", cmp_ratio=8),
        bad("ori_mask_mode 1", "ori_mask_mode", ori_mask_mode=1),
        bad("cmp_mask_mode past int32", "cmp_mask_mode", cmp_mask_mode=2**32),
        bad("ori_win_left -1", "ori_win_left", ori_win_left=-1),
        bad("ori_win_left past 2^62", "ori_win_left", ori_win_left=2**62 + 1),
        bad("ori_win_right -1", "ori_win_right", ori_win_right=-1),
        bad("num_cube_cores 0", "num_cube_cores", num_cube_cores=0),
        bad("num_cube_cores 37", "num_cube_cores", num_cube_cores=37),
        bad("num_vector_cores 0", "num_vector_cores", num_vector_cores=0),
        bad("num_vector_cores 73", "num_vector_cores", num_vector_cores=73),
        bad("layout_q BNSD", "layout_q", layout_q="BNSD"),
        bad("layout_kv PA_BSND", "layout_kv", layout_kv="PA_BSND"),
        bad("layout_kv BSND with layout_q TND", "layout_kv", layout_kv="BSND"),
        bad("TND without cu_seqlens_q", "cu_seqlens_q", cu_seqlens_q=None),
        bad("TND with an empty cu_seqlens_q", "cu_seqlens_q", cu_seqlens_q=torch.zeros(0, dtype=I32)),
        bad("PA_ND without seqused_kv", "seqused_kv", seqused_kv=None),
        bad("seqused_kv shorter than B", ("seqused_kv", "seqused_q"), seqused_kv=t32(10)),
        bad("cu_seqlens_ori_kv shorter than B + 1", ("cu_seqlens_ori_kv", "seqused_q"), seqused_kv=None,
            layout_kv="TND", cu_seqlens_ori_kv=t32(0, 10)),
    ]


def _sas_values() -> list[Bad]:
    return [
        bad("cu_seqlens_q decreasing", "cu_seqlens_q", seqused_q=None, cu_seqlens_q=t32(0, 3, 2)),
        bad("negative seqused_q", "seqused_q", seqused_q=t32(2, -1)),
        bad("negative seqused_kv", "seqused_kv", seqused_kv=t32(-1, 300)),
        bad("cu_seqlens_ori_kv decreasing", "cu_seqlens_ori_kv", seqused_kv=None, layout_kv="TND",
            cu_seqlens_ori_kv=t32(0, 10, 9)),
        bad("seqused_kv past int32", "seqused_kv", seqused_kv=t64(10, 2**31)),
        bad("more than 2^31 - 1 query rows", "seqused_q", seqused_q=t32(2, 2**25)),
    ]


def _sas_negative_query_length(draw, call: Call) -> bool:
    """A negative query length where the call reads it: seqused_q, else a decreasing cu_seqlens_q
    (TND); BSND without seqused_q reads no tensor."""
    if call.get("seqused_q") is not None and call["seqused_q"].numel():
        return _one_entry("seqused_q", _negative, native_raises=True)(draw, call)
    if call["layout_q"] == "TND":
        return _decreasing("cu_seqlens_q", first=1)(draw, call)
    return False


SAS = OpSpec(
    name="sas_metadata",
    wrapper=specops.sas_metadata,
    tensors=SAS_TENSORS,
    outputs=("out",),
    valid_call=_sas_valid,
    metadata_errors=_sas_metadata,
    value_errors=_sas_values,
    draw_call=sas_calls(max_reqs=5, max_prefill=20, max_context=800),
    corruptions=(
        Corruption("negative seqused_kv", _one_entry("seqused_kv", _negative, native_raises=True)),
        Corruption("negative query length", _sas_negative_query_length),
    ),
    guard_examples=SLOW_KERNEL_GUARD_EXAMPLES,
    # On a device the runner passes the host copies of the lengths (the host-planned form).
    host_tensors=("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv"),
    scalars=("num_heads_q", "num_heads_kv", "head_dim", "batch_size", "max_seqlen_q", "max_seqlen_kv", "ori_topk",
             "cmp_topk", "cmp_ratio", "ori_mask_mode", "cmp_mask_mode", "ori_win_left", "ori_win_right",
             "num_cube_cores", "num_vector_cores"),
    allocation_sizes={},
)
