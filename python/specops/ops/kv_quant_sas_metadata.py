"""kv_quant_sas_metadata: the A5 (Ascend950) schedule of Ascend's shared-KV sparse-attention
kernel, word for word what vllm-ascend's `npu_kv_quant_sparse_attn_sharedkv_metadata` writes
(docs/dsa_metadata_family.md). The sas schedule with the A5 variant (sas_family_layout.Variant)."""

from __future__ import annotations

import torch

import specops.ops._sas_inputs as inputs
from specops.ops._ascend_platform import resolved_platform
from specops.ops._op import SpecOp
from specops.reference.kv_quant_sas_metadata import kv_quant_sas_metadata as _reference
from specops.sas_family_layout import kv_quant_plan
from specops.sas_layout import (
    LAYOUT_KV_TND,
    LAYOUT_Q_BSND,
    MAX_CUBE_CORES,
    MAX_VECTOR_CORES,
    is_given,
)

_LENGTH_TENSORS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv")
_INT32_ATTRIBUTES = ("num_heads_q", "num_heads_kv", "head_dim", "kv_quant_mode", "batch_size", "max_seqlen_q",
                     "max_seqlen_kv", "ori_topk", "cmp_topk", "tile_size", "rope_head_dim", "cmp_ratio",
                     "ori_mask_mode", "cmp_mask_mode")


def _check(
    num_heads_q: int, num_heads_kv: int, head_dim: int, kv_quant_mode: int, cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_ori_kv: torch.Tensor | None, cu_seqlens_cmp_kv: torch.Tensor | None, seqused_q: torch.Tensor | None,
    seqused_kv: torch.Tensor | None, batch_size: int, max_seqlen_q: int, max_seqlen_kv: int, ori_topk: int,
    cmp_topk: int, tile_size: int, rope_head_dim: int, cmp_ratio: int, ori_mask_mode: int, cmp_mask_mode: int,
    ori_win_left: int, ori_win_right: int, layout_q: int, layout_kv: int, has_ori_kv: bool, has_cmp_kv: bool,
    num_cube_cores: int, num_vector_cores: int, ascend950: bool, out: torch.Tensor,
) -> None:
    """Every rejection of the A5 AI-CPU kernel, in its order, plus what would be undefined there
    (mirrors csrc/cpu/kv_quant_sas_metadata.cpp)."""
    arguments = locals()
    inputs.check_schedule_inputs(arguments, _LENGTH_TENSORS, _INT32_ATTRIBUTES)

    # The kernel's own checks.
    inputs.check_cube_cores_given(num_cube_cores)
    if num_vector_cores == 0:
        raise ValueError("num_vector_cores (AIV num) should not be 0")
    inputs.check_nonnegative(arguments, ("batch_size", "max_seqlen_q"))
    if num_heads_q not in (64, 128):
        raise ValueError(f"num_heads_q should be 64 or 128, but got {num_heads_q}")
    inputs.check_kv_heads_and_mask(arguments)
    inputs.check_window_sign("ori_win_left", ori_win_left)
    inputs.check_sas_layouts(arguments)
    if layout_q == LAYOUT_Q_BSND and layout_kv == LAYOUT_KV_TND:
        raise ValueError("layout_kv must be PA_ND or BSND when layout_q is BSND, got TND")
    inputs.check_cu_seqlens_q(arguments)
    if not is_given(seqused_kv):
        raise ValueError("seqused_kv must be provided (the only KV length the kernel reads)")
    if has_cmp_kv:
        inputs.check_cmp_ratio(cmp_ratio)
        inputs.check_cmp_topk(cmp_topk)

    # Inputs on which the kernel's behaviour is undefined.
    plan = kv_quant_plan(num_heads_q, has_cmp_kv and cmp_topk > 0, ascend950, num_cube_cores, num_vector_cores)
    if not (num_cube_cores >= 1 and plan.fa_entries <= MAX_CUBE_CORES and plan.variant.planned_cores >= 1):
        pairs = " (128 heads: two per planned core; on Ascend950 aic / 2 planned cores)" if plan.variant.paired else ""
        raise ValueError(f"num_cube_cores (AIC num) must give 1 to {MAX_CUBE_CORES} FA entries{pairs}, got "
                         f"{num_cube_cores}")
    if not (num_vector_cores >= 1 and plan.fd_entries <= MAX_VECTOR_CORES):
        raise ValueError(f"num_vector_cores (AIV num) must give at most {MAX_VECTOR_CORES} FD entries, got "
                         f"{num_vector_cores}")
    inputs.check_window_bound("ori_win_left", ori_win_left)
    batches = inputs.checked_batches(arguments)
    if seqused_kv.numel() < batches:
        raise ValueError(f"seqused_kv must have at least B = {batches} entries (the batches of "
                         f"{inputs.batch_source(arguments)}), got {seqused_kv.numel()}")
    inputs.check_lengths_alias_nothing(arguments, _LENGTH_TENSORS)


_OP = SpecOp("kv_quant_sas_metadata", _check, _reference)
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
    _OP.select()(num_heads_q, num_heads_kv, head_dim, kv_quant_mode, cu_seqlens_q, cu_seqlens_ori_kv,
                 cu_seqlens_cmp_kv, seqused_q, seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk,
                 tile_size, rope_head_dim, cmp_ratio, ori_mask_mode, cmp_mask_mode, ori_win_left, ori_win_right,
                 codes.first_layout, codes.second_layout, has_ori_kv, has_cmp_kv, num_cube_cores, num_vector_cores,
                 codes.ascend950, out)
    return out
