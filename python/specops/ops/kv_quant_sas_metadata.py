"""kv_quant_sas_metadata: the A5 (Ascend950) schedule of Ascend's shared-KV sparse-attention
kernel, word for word what vllm-ascend's `npu_kv_quant_sparse_attn_sharedkv_metadata` writes
(docs/dsa_metadata_family.md). The sas schedule with the A5 variant (sas_family_layout.Variant)."""

from __future__ import annotations

import torch

import specops.ops._sas_inputs as inputs
from specops.ascend_platform import resolved_platform
from specops.ops._op import SpecOp
from specops.reference.kv_quant_sas_metadata import kv_quant_sas_metadata as _reference

__all__ = ["kv_quant_sas_metadata"]

_OP = SpecOp("kv_quant_sas_metadata", _reference)
_STRINGS = inputs.StringArguments(*inputs.SAS_STRINGS)


def kv_quant_sas_metadata(
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    kv_quant_mode: int,
    *,
    cu_seqlens_q: torch.Tensor | None = None,
    cu_seqlens_ori_kv: torch.Tensor | None = None,
    cu_seqlens_cmp_kv: torch.Tensor | None = None,
    seqused_q: torch.Tensor | None = None,
    seqused_kv: torch.Tensor | None = None,
    batch_size: int = 0,
    max_seqlen_q: int = 0,
    max_seqlen_kv: int = 0,
    ori_topk: int = 0,
    cmp_topk: int = 0,
    tile_size: int = 0,
    rope_head_dim: int = 0,
    cmp_ratio: int = -1,
    ori_mask_mode: int = 4,
    cmp_mask_mode: int = 3,
    ori_win_left: int = 127,
    ori_win_right: int = 0,
    layout_q: str = "BSND",
    layout_kv: str = "PA_ND",
    has_ori_kv: bool = True,
    has_cmp_kv: bool = True,
    num_cube_cores: int | None = None,
    num_vector_cores: int | None = None,
    soc_version: str | None = None,
    device: str | torch.device | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The schedule of vllm-ascend's `npu_kv_quant_sparse_attn_sharedkv` (A5): the 1024 int32
    words its AI-CPU kernel `npu_kv_quant_sparse_attn_sharedkv_metadata` computes for the same
    arguments (unwritten words 0), or a ValueError naming the argument it rejects.

    As `specops.sas_metadata` (host lengths for a device output, `device=`, the core counts and
    SoC from the NPU when None), with this kernel's arguments and defaults: `kv_quant_mode`
    required, `seqused_kv` required in every layout and the only KV length read,
    `ori_win_right` ignored; 9-word FA entries (FD entries from word 324) and, with 128 heads,
    two identical entries per core pair with word 8 the most S2 blocks of a pair. Decode with
    `specops.decode_kv_quant_sas_metadata`.
    """
    if device is not None:
        device = inputs.checked_device(device, out)
    if out is None:
        out = inputs.schedule_out(device, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_kv)
    if num_cube_cores is None or num_vector_cores is None or soc_version is None:
        num_cube_cores, num_vector_cores, soc_version = resolved_platform(num_cube_cores, num_vector_cores,
                                                                          soc_version, out.device)
    codes = _STRINGS(layout_q, layout_kv, soc_version)
    # The string arguments as the schema takes them: codes.
    layout_q, layout_kv, ascend950 = codes.first_layout, codes.second_layout, codes.ascend950
    _OP.select()(num_heads_q, num_heads_kv, head_dim, kv_quant_mode, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv,
        seqused_q, seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk, tile_size, rope_head_dim,
        cmp_ratio, ori_mask_mode, cmp_mask_mode, ori_win_left, ori_win_right, layout_q, layout_kv, has_ori_kv,
        has_cmp_kv, num_cube_cores, num_vector_cores, ascend950, out)
    return out
