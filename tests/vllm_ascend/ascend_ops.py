"""The CANN custom ops vllm-ascend's DSA-CP metadata builders call (`torch.ops._C_ascend.*`),
answered by specops' drop-ins for them under vllm-ascend's names and argument names.

- `npu_sparse_attn_sharedkv_metadata`: `specops.sas_metadata` (the same arguments; the AI-CPU
  kernel's 1024 schedule words).
- `npu_vllm_quant_lightning_indexer_metadata`: `specops.lightning_indexer_metadata`.

Both are planned for the stand-in NPU (npu_stand_ins.py: an Ascend910B1, 24 cube and 48 vector
cores). Their conformance to the CANN kernels is specops' own tests' business (tests/ops and the
golden data); here they give vllm-ascend's builders the words its kernels would get, so the
builders run end to end, and both runs of a configuration get them from the same op.
"""

from __future__ import annotations

import torch

PLATFORM = dict(num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1")
_LIBRARY = None
_INT64_MAX = (1 << 63) - 1


def install() -> None:
    global _LIBRARY
    if _LIBRARY is not None:
        return
    import specops

    library = torch.library.Library("_C_ascend", "FRAGMENT")
    library.define(
        "npu_sparse_attn_sharedkv_metadata(*, int num_heads_q, int num_heads_kv, int head_dim, "
        "Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_ori_kv=None, Tensor? cu_seqlens_cmp_kv=None, "
        "Tensor? seqused_q=None, Tensor? seqused_kv=None, int batch_size=0, int max_seqlen_q=0, "
        "int max_seqlen_kv=0, int ori_topk=0, int cmp_topk=0, int cmp_ratio=-1, int ori_mask_mode=4, "
        "int cmp_mask_mode=3, int ori_win_left=127, int ori_win_right=0, str layout_q='BSND', "
        "str layout_kv='PA_ND', bool has_ori_kv=True, bool has_cmp_kv=True, str device='npu') -> Tensor")
    library.define(
        "npu_vllm_quant_lightning_indexer_metadata(*, Tensor? actual_seq_lengths_query=None, "
        "Tensor? actual_seq_lengths_key=None, int num_heads_q, int num_heads_k, int head_dim, "
        "int query_quant_mode, int key_quant_mode, int batch_size=0, int max_seqlen_q=0, int max_seqlen_k=0, "
        "str layout_query='BSND', str layout_key='BSND', int sparse_count=2048, int sparse_mode=3, "
        f"int pre_tokens={_INT64_MAX}, int next_tokens={_INT64_MAX}, int cmp_ratio=1, str device='npu') -> Tensor")

    # The dispatcher leaves out the keyword arguments a caller gave at their schema default: each
    # impl spells every argument out with the schema's defaults (specops' own defaults differ).
    def sas(*, num_heads_q, num_heads_kv, head_dim, cu_seqlens_q=None, cu_seqlens_ori_kv=None,
            cu_seqlens_cmp_kv=None, seqused_q=None, seqused_kv=None, batch_size=0, max_seqlen_q=0, max_seqlen_kv=0,
            ori_topk=0, cmp_topk=0, cmp_ratio=-1, ori_mask_mode=4, cmp_mask_mode=3, ori_win_left=127, ori_win_right=0,
            layout_q="BSND", layout_kv="PA_ND", has_ori_kv=True, has_cmp_kv=True, device="npu"):
        return specops.sas_metadata(
            num_heads_q, num_heads_kv, head_dim, cu_seqlens_q=cu_seqlens_q, cu_seqlens_ori_kv=cu_seqlens_ori_kv,
            cu_seqlens_cmp_kv=cu_seqlens_cmp_kv, seqused_q=seqused_q, seqused_kv=seqused_kv, batch_size=batch_size,
            max_seqlen_q=max_seqlen_q, max_seqlen_kv=max_seqlen_kv, ori_topk=ori_topk, cmp_topk=cmp_topk,
            cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode, cmp_mask_mode=cmp_mask_mode, ori_win_left=ori_win_left,
            ori_win_right=ori_win_right, layout_q=layout_q, layout_kv=layout_kv, has_ori_kv=has_ori_kv,
            has_cmp_kv=has_cmp_kv, **PLATFORM)

    def indexer(*, num_heads_q, num_heads_k, head_dim, query_quant_mode, key_quant_mode, actual_seq_lengths_query=None,
                actual_seq_lengths_key=None, batch_size=0, max_seqlen_q=0, max_seqlen_k=0, layout_query="BSND",
                layout_key="BSND", sparse_count=2048, sparse_mode=3, pre_tokens=_INT64_MAX, next_tokens=_INT64_MAX,
                cmp_ratio=1, device="npu"):
        return specops.lightning_indexer_metadata(
            num_heads_q, num_heads_k, head_dim, query_quant_mode, key_quant_mode,
            actual_seq_lengths_query=actual_seq_lengths_query, actual_seq_lengths_key=actual_seq_lengths_key,
            batch_size=batch_size, max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, layout_query=layout_query,
            layout_key=layout_key, sparse_count=sparse_count, sparse_mode=sparse_mode, pre_tokens=pre_tokens,
            next_tokens=next_tokens, cmp_ratio=cmp_ratio, **PLATFORM)

    for name, impl in (("npu_sparse_attn_sharedkv_metadata", sas),
                       ("npu_vllm_quant_lightning_indexer_metadata", indexer)):
        library.impl(name, impl, "CompositeExplicitAutograd")
    _LIBRARY = library
