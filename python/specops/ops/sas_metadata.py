"""sas_metadata: the schedule of Ascend's shared-KV sparse-attention kernel, word for word what
its AI-CPU metadata kernel writes (docs/sas_metadata.md)."""

from __future__ import annotations

import torch

import specops.ops._sas_inputs as inputs
from specops.ascend_platform import resolved_platform
from specops.ops._op import SpecOp
from specops.reference.sas_metadata import sas_metadata as _reference

__all__ = ["sas_metadata"]

_OP = SpecOp("sas_metadata", _reference)
_STRINGS = inputs.StringArguments(*inputs.SAS_STRINGS)
_KEPT_STRINGS = _STRINGS.kept


def sas_metadata(
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
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
    cmp_ratio: int = 4,
    ori_mask_mode: int = 4,
    cmp_mask_mode: int = 3,
    ori_win_left: int = 128,
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
    """The schedule of vllm-ascend's `npu_sparse_attn_sharedkv`: the 1024 int32 words its AI-CPU
    kernel `npu_sparse_attn_sharedkv_metadata` computes for the same arguments (words it leaves
    unwritten are 0 here), or a ValueError naming the argument it rejects.

    Tensors: int32 (int64 accepted) [B + 1] cumulative or [B] per-batch lengths; None or an empty
    tensor of any dtype and shape means not provided (vllm-ascend passes empty float32
    placeholders). On a device, pass the runner's host copies (the recommended form): the words
    are computed on the host and reach `out` by one non-blocking copy from pinned memory on the
    current stream, with no device read and no host wait. Lengths on out's device are read there
    by the kernel on CUDA, and refused on the NPU (planned on the host, it would have to read them
    back). num_cube_cores / num_vector_cores / soc_version are the device's (the AI-CPU kernel
    gets them from the platform): when None, read from the NPU the output is on (cached per
    device); for any other output they must be given. device: where out is allocated when
    absent, as the peer's `device=` ("npu:0", a torch.device); with out given it must be out's
    device. Without it, out is allocated on the device of the first tensor that holds values
    (else of the first tensor given, else the CPU). out: int32 [1024]. Decode with
    `specops.decode_sas_metadata`. When the kernel runs on a device the values are not checked
    (that would sync): invalid values give 1024 zero words instead of an error.
    """
    if device is not None:
        device = inputs.checked_device(device, out)
    if out is None:
        out = inputs.schedule_out(device, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_kv)
    if num_cube_cores is None or num_vector_cores is None or soc_version is None:
        num_cube_cores, num_vector_cores, soc_version = resolved_platform(num_cube_cores, num_vector_cores,
                                                                          soc_version, out.device)
    # The strings a runner passes were resolved before: one dict lookup, no Python call. Their
    # codes take their names, the schema's.
    try:
        layout_q, layout_kv, ascend950 = _KEPT_STRINGS[layout_q, layout_kv, soc_version]
    except (KeyError, TypeError):  # TypeError: an unhashable value, which _STRINGS rejects by name
        layout_q, layout_kv, ascend950 = _STRINGS(layout_q, layout_kv, soc_version)
    _OP.select()(num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q,
        seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk, cmp_ratio, ori_mask_mode,
        cmp_mask_mode, ori_win_left, ori_win_right, layout_q, layout_kv, has_ori_kv, has_cmp_kv, num_cube_cores,
        num_vector_cores, ascend950, out)
    return out
