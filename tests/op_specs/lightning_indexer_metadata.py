"""The OpSpec of torch.ops.specops.lightning_indexer_metadata (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import attention_batches

import specops

from ._corruptions import _negative, _one_entry
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, bad, stale, t32, t64
from .sas_metadata import schedule_rows

INT64_MAX = 2**63 - 1


def _li_valid() -> Call:
    # vllm-ascend's call: query_start_loc[1:] and seq_lens, TND / PA_BSND, cmp_ratio 4.
    return dict(num_heads_q=64, num_heads_k=1, head_dim=128, query_quant_mode=0, key_quant_mode=0,
                actual_seq_lengths_query=t32(2, 7), actual_seq_lengths_key=t32(3000, 90), batch_size=2,
                max_seqlen_q=5, max_seqlen_k=3000, layout_query="TND", layout_key="PA_BSND", sparse_count=512,
                sparse_mode=3, pre_tokens=INT64_MAX, next_tokens=INT64_MAX, cmp_ratio=4, num_cube_cores=4,
                num_vector_cores=8, soc_version="Ascend910B1", out=stale(1024))


def _li_metadata() -> list[Bad]:
    return schedule_rows() + [
        bad("num_heads_q 32", "num_heads_q", num_heads_q=32),
        bad("num_heads_k 2", "num_heads_k", num_heads_k=2),
        bad("query_quant_mode past int32", "query_quant_mode", query_quant_mode=2**31),
        bad("key_quant_mode past int32", "key_quant_mode", key_quant_mode=-(2**31) - 1),
        bad("sparse_count past int32", "sparse_count", sparse_count=2**31),
        bad("max_seqlen_k -1", "max_seqlen_k", max_seqlen_k=-1),
        bad("sparse_mode 4", "sparse_mode", sparse_mode=4),
        bad("pre_tokens 127", "pre_tokens", pre_tokens=127),
        bad("next_tokens 0", "next_tokens", next_tokens=0),
        bad("cmp_ratio 0", "cmp_ratio", cmp_ratio=0),
        bad("cmp_ratio 3 on A2/A3", "cmp_ratio", cmp_ratio=3),
        bad("cmp_ratio 8 on Ascend950", "cmp_ratio", cmp_ratio=8, soc_version="Ascend950PR"),
        bad("num_cube_cores 0", "num_cube_cores", num_cube_cores=0),
        bad("num_cube_cores 40", "num_cube_cores", num_cube_cores=40, num_vector_cores=40),
        bad("num_vector_cores not a multiple", "num_vector_cores", num_vector_cores=6),
        bad("layout_query BSH", "layout_query", layout_query="BSH"),
        bad("layout_key PA_ND", "layout_key", layout_key="PA_ND"),
        bad("layout_key BSND with layout_query TND", "layout_key", layout_key="BSND"),
        bad("TND without actual_seq_lengths_query", "actual_seq_lengths_query", actual_seq_lengths_query=None),
        bad("PA_BSND with an empty actual_seq_lengths_key", "actual_seq_lengths_key",
            actual_seq_lengths_key=torch.zeros(0, dtype=I32)),
        bad("three query entries for one key entry", "actual_seq_lengths_query",
            actual_seq_lengths_query=t32(2, 7, 9), actual_seq_lengths_key=t32(3000)),
        bad("max_seqlen_k * cmp_ratio past int32", "max_seqlen_k", layout_query="BSND", layout_key="BSND",
            actual_seq_lengths_query=None, actual_seq_lengths_key=None, max_seqlen_k=2**30),
    ]


def _li_values() -> list[Bad]:
    return [
        bad("decreasing query prefix sums", "actual_seq_lengths_query", actual_seq_lengths_query=t32(5, 2)),
        bad("negative key length", "actual_seq_lengths_key", actual_seq_lengths_key=t32(-1, 90)),
        bad("key length past int32", "actual_seq_lengths_key", actual_seq_lengths_key=t64(10, 2**31)),
    ]


@st.composite
def _li_draw(draw) -> Call:
    query_lens, kv_lens = draw(attention_batches(max_reqs=4, max_prefill=24, max_context=9000))
    if not query_lens:
        query_lens, kv_lens = [1], [0]
    dtype = draw(st.sampled_from([I32, I64]))
    a5 = draw(st.booleans())
    cores = draw(st.integers(1, 12))
    ends = torch.cumsum(torch.tensor(query_lens), 0)
    leading_zero = draw(st.booleans())
    query = torch.cat([torch.zeros(1, dtype=ends.dtype), ends]) if leading_zero else ends
    return dict(num_heads_q=64, num_heads_k=1, head_dim=128, query_quant_mode=0, key_quant_mode=0,
                actual_seq_lengths_query=query.to(dtype), actual_seq_lengths_key=torch.tensor(kv_lens, dtype=dtype),
                batch_size=len(query_lens), max_seqlen_q=max(query_lens), max_seqlen_k=max(kv_lens),
                layout_query="TND", layout_key="PA_BSND", sparse_count=512, sparse_mode=draw(st.sampled_from([0, 3])),
                pre_tokens=INT64_MAX, next_tokens=INT64_MAX,
                cmp_ratio=draw(st.sampled_from([1, 4, 128] if a5 else [1, 2, 4, 128])), num_cube_cores=cores,
                num_vector_cores=cores * draw(st.integers(1, 2)), soc_version="Ascend950PR" if a5 else "Ascend910B1",
                out=stale(1024))


LIGHTNING_INDEXER = OpSpec(
    name="lightning_indexer_metadata",
    wrapper=specops.lightning_indexer_metadata,
    tensors=dict(actual_seq_lengths_query=Arg((I32, I64), 1), actual_seq_lengths_key=Arg((I32, I64), 1),
                 out=Arg((I32,), 1)),
    outputs=("out",),
    valid_call=_li_valid,
    metadata_errors=_li_metadata,
    value_errors=_li_values,
    draw_call=_li_draw(),
    corruptions=(Corruption("negative key length", _one_entry("actual_seq_lengths_key", _negative, native_raises=True)),),
    guard_examples=8,
    host_tensors=("actual_seq_lengths_query", "actual_seq_lengths_key"),
    scalars=("num_heads_q", "num_heads_k", "head_dim", "query_quant_mode", "key_quant_mode", "batch_size",
             "max_seqlen_q", "max_seqlen_k", "sparse_count", "sparse_mode", "pre_tokens", "next_tokens", "cmp_ratio",
             "num_cube_cores", "num_vector_cores"),
    allocation_sizes={},
)
