"""sparse_attn_sharedkv_metadata_host: sgl-kernel-npu's call form of the sas schedule
(`torch.ops.npu.sparse_attn_sharedkv_metadata_host`, the host port of the AI-CPU kernel SGLang
runs on the NPU), answered by `specops.sas_metadata`: the same argument names, order and
defaults, host lengths in, the device tensor out. Not an op of its own (no schema): a call form,
as the docs name it (docs/sas_metadata.md, "The call sgl-kernel-npu makes")."""

from __future__ import annotations

import torch

from specops.ops.sas_metadata import sas_metadata

__all__ = ["sparse_attn_sharedkv_metadata_host"]


def sparse_attn_sharedkv_metadata_host(
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    layout_q: str,
    layout_kv: str,
    cu_seqlens_q: torch.Tensor | None = None,
    seqused_kv: torch.Tensor | None = None,
    batch_size: int = 0,
    cmp_topk: int = 0,
    cmp_ratio: int = -1,
    ori_mask_mode: int = 4,
    cmp_mask_mode: int = 3,
    ori_win_left: int = 127,
    ori_win_right: int = 0,
    has_ori_kv: bool = True,
    has_cmp_kv: bool = True,
    *,
    num_cube_cores: int | None = None,
    num_vector_cores: int | None = None,
    soc_version: str | None = None,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """The 1024-word schedule on the device, from host (CPU) int32 lengths, as sgl-kernel-npu's
    op returns it: computed on the host, then one non-blocking copy from pinned memory on the
    current stream (no device read, no host wait).

    `device`: where the words go; None is the current NPU when torch_npu sees one (what the
    port does), else the CPU. The core counts and SoC, when None, are the NPU's (the port asks
    the device too); a schedule for the CPU must be given all three. Where the port departs from
    the AI-CPU kernel (docs/conformance.md), this keeps the kernel's answer: B is
    `len(cu_seqlens_q) - 1` for a TND query (the port takes `batch_size`), the kernel's
    rejections stand (mask modes, windows and layouts the port accepts), "Ascend950" is matched
    with its case (the port ignores case).
    """
    return sas_metadata(
        num_heads_q=num_heads_q, num_heads_kv=num_heads_kv, head_dim=head_dim, cu_seqlens_q=cu_seqlens_q,
        seqused_kv=seqused_kv, batch_size=batch_size,
        cmp_topk=cmp_topk, cmp_ratio=cmp_ratio, ori_mask_mode=ori_mask_mode, cmp_mask_mode=cmp_mask_mode,
        ori_win_left=ori_win_left, ori_win_right=ori_win_right, layout_q=layout_q, layout_kv=layout_kv,
        has_ori_kv=has_ori_kv, has_cmp_kv=has_cmp_kv, num_cube_cores=num_cube_cores,
        num_vector_cores=num_vector_cores, soc_version=soc_version,
        device=_current_npu() if device is None else device)


def _current_npu() -> torch.device:
    """The port's output device: the current NPU when torch_npu has one, else the CPU."""
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return torch.device("npu", npu.current_device())
    return torch.device("cpu")
