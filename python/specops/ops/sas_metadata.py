"""sas_metadata: the schedule of Ascend's shared-KV sparse-attention kernel, word for word what
its AI-CPU metadata kernel writes (docs/sas_metadata.md)."""

from __future__ import annotations

import torch

from specops.ops._checks import check_outputs_alias_nothing, check_tensor
from specops.ops._op import SpecOp
from specops.reference.sas_metadata import sas_metadata as _reference
from specops.sas_layout import (
    ASCEND950,
    CMP_RATIOS,
    CMP_TOPKS,
    INT32_MAX,
    INT32_MIN,
    LAYOUT_KV_BSND,
    LAYOUT_KV_CODES,
    LAYOUT_KV_PA_ND,
    LAYOUT_KV_TND,
    LAYOUT_Q_CODES,
    LAYOUT_Q_TND,
    MASK_BAND,
    MASK_CAUSAL,
    MASK_NONE,
    MAX_CUBE_CORES,
    MAX_VECTOR_CORES,
    MAX_WINDOW,
    NUM_WORDS,
    is_given,
    num_batches,
)

_LENGTH_TENSORS = ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv")
# The kernel reads these attributes as int32; it would truncate anything wider.
_INT32_ATTRIBUTES = ("num_heads_q", "num_heads_kv", "head_dim", "batch_size", "max_seqlen_q", "max_seqlen_kv",
                     "ori_topk", "cmp_topk", "cmp_ratio", "ori_mask_mode", "cmp_mask_mode")


def _check(
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    cu_seqlens_q: torch.Tensor | None,
    cu_seqlens_ori_kv: torch.Tensor | None,
    cu_seqlens_cmp_kv: torch.Tensor | None,
    seqused_q: torch.Tensor | None,
    seqused_kv: torch.Tensor | None,
    batch_size: int,
    max_seqlen_q: int,
    max_seqlen_kv: int,
    ori_topk: int,
    cmp_topk: int,
    cmp_ratio: int,
    ori_mask_mode: int,
    cmp_mask_mode: int,
    ori_win_left: int,
    ori_win_right: int,
    layout_q: int,
    layout_kv: int,
    has_ori_kv: bool,
    has_cmp_kv: bool,
    num_cube_cores: int,
    num_vector_cores: int,
    ascend950: bool,
    out: torch.Tensor,
) -> None:
    """Every rejection of the AI-CPU kernel, in its order, plus what would be undefined there
    (mirrors csrc/cpu/sas_metadata.cpp)."""
    check_tensor(out, "out", [torch.int32], 1)
    if out.numel() != NUM_WORDS:
        raise ValueError(f"out must have exactly {NUM_WORDS} int32 words, got {out.numel()}")
    arguments = locals()
    for name in _LENGTH_TENSORS:
        tensor = arguments[name]
        if tensor is None:
            continue
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(f"{name} must be a tensor or None, got {type(tensor).__name__}")
        # An empty tensor is not provided, whatever its dtype and shape (vllm-ascend passes empty
        # float32 placeholders); its device counts, as it selects the kernel.
        if tensor.device != out.device:
            raise ValueError(f"{name} must be on {out.device} like out, got {tensor.device}")
        if tensor.numel():
            check_tensor(tensor, name, [torch.int32, torch.int64], 1, out.device)
    for name in _INT32_ATTRIBUTES:
        if not INT32_MIN <= arguments[name] <= INT32_MAX:
            raise ValueError(f"{name} must fit int32 (the kernel's attribute type), got {arguments[name]}")

    # The kernel's own checks.
    if not 1 <= num_cube_cores <= MAX_CUBE_CORES:
        raise ValueError(f"num_cube_cores (AIC num) must be in [1, {MAX_CUBE_CORES}], got {num_cube_cores}")
    if not 1 <= num_vector_cores <= MAX_VECTOR_CORES:
        raise ValueError(f"num_vector_cores (AIV num) must be in [1, {MAX_VECTOR_CORES}], got {num_vector_cores}")
    if batch_size < 0:
        raise ValueError(f"batch_size should not be negative, but got {batch_size}")
    if max_seqlen_q < 0:
        raise ValueError(f"max_seqlen_q should not be negative, but got {max_seqlen_q}")
    if layout_kv == LAYOUT_KV_BSND and num_heads_q not in (32, 64):
        raise ValueError(f"num_heads_q should only be 64 or 32 when layout_kv is BSND, but got {num_heads_q}")
    if num_heads_kv != 1:
        raise ValueError(f"num_heads_kv should only be 1, but got {num_heads_kv}")
    if ori_mask_mode not in (MASK_NONE, MASK_CAUSAL, MASK_BAND):
        raise ValueError(f"ori_mask_mode should be 0, 3 or 4, but got {ori_mask_mode}")
    for name, window in (("ori_win_left", ori_win_left), ("ori_win_right", ori_win_right)):
        if window < 0:
            raise ValueError(f"{name} should be non-negative, but got {window}")
        if window > MAX_WINDOW:
            raise ValueError(f"{name} must be at most 2^62 (a wider window sees every KV token; near 2^63 the "
                             f"kernel's int64 window sums overflow), got {window}")
    if layout_q not in LAYOUT_Q_CODES.values():
        raise ValueError(f"layout_q must be TND or BSND, got code {layout_q}")
    if layout_kv not in LAYOUT_KV_CODES.values():
        raise ValueError(f"layout_kv must be TND, BSND or PA_ND, got code {layout_kv}")
    if layout_q == LAYOUT_Q_TND and layout_kv == LAYOUT_KV_BSND:
        raise ValueError("layout_kv must be PA_ND or TND when layout_q is TND, got BSND")
    if layout_q == LAYOUT_Q_TND and not is_given(cu_seqlens_q):
        raise ValueError("cu_seqlens_q must be provided for layout_q TND")
    if layout_kv == LAYOUT_KV_PA_ND and not is_given(seqused_kv):
        raise ValueError("seqused_kv must be provided when layout_kv is PA_ND")
    if has_cmp_kv:
        if cmp_topk not in CMP_TOPKS:
            raise ValueError(f"cmp_topk should be 0, 512 or 1024 when has_cmp_kv, but got {cmp_topk}")
        if cmp_ratio not in CMP_RATIOS:
            raise ValueError(f"cmp_ratio should only be 4 or 128 when has_cmp_kv, but got {cmp_ratio}")

    # Inputs on which the kernel's behaviour is undefined.
    if num_heads_q < 1:
        raise ValueError(f"num_heads_q must be >= 1 (the kernel divides by it), got {num_heads_q}")
    if max_seqlen_kv < 0:
        raise ValueError(f"max_seqlen_kv should not be negative, but got {max_seqlen_kv}")
    batches = num_batches(layout_q, cu_seqlens_q, seqused_q, batch_size)
    if batches > INT32_MAX:
        raise ValueError(f"seqused_q / cu_seqlens_q describe {batches} batches, more than 2^31 - 1")
    if is_given(seqused_kv):
        if seqused_kv.numel() < batches:
            raise ValueError(f"seqused_kv must have at least B = {batches} entries (the batches of "
                             f"{_batch_source(layout_q, cu_seqlens_q, seqused_q)}), got {seqused_kv.numel()}")
    elif layout_kv == LAYOUT_KV_TND and is_given(cu_seqlens_ori_kv) and cu_seqlens_ori_kv.numel() < batches + 1:
        raise ValueError(f"cu_seqlens_ori_kv must have at least B + 1 = {batches + 1} entries (the batches of "
                         f"{_batch_source(layout_q, cu_seqlens_q, seqused_q)}), got {cu_seqlens_ori_kv.numel()}")

    # The kernel reads its length tensors while it writes the schedule: out shares memory with none.
    check_outputs_alias_nothing([(out, "out")], [(arguments[name], name) for name in _LENGTH_TENSORS
                                                 if is_given(arguments[name])])


def _batch_source(layout_q: int, cu_seqlens_q: torch.Tensor | None, seqused_q: torch.Tensor | None) -> str:
    if is_given(seqused_q):
        return "seqused_q"
    return "cu_seqlens_q" if layout_q == LAYOUT_Q_TND and is_given(cu_seqlens_q) else "batch_size"


_OP = SpecOp("sas_metadata", _check, _reference)


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
    num_cube_cores: int = 24,
    num_vector_cores: int = 48,
    soc_version: str = "Ascend910B1",
    device: str | torch.device | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The schedule of vllm-ascend's `npu_sparse_attn_sharedkv`: the 1024 int32 words its AI-CPU
    kernel `npu_sparse_attn_sharedkv_metadata` computes for the same arguments (words it leaves
    unwritten are 0 here), or a ValueError naming the argument it rejects.

    Tensors: int32 (int64 accepted) [B + 1] cumulative or [B] per-batch lengths, on out's device;
    None or an empty tensor of any dtype and shape means not provided (vllm-ascend passes empty
    float32 placeholders). num_cube_cores / num_vector_cores / soc_version are the device's (the
    AI-CPU kernel gets them from the platform). device: where out is allocated when absent, as
    the peer's `device=` ("npu:0", a torch.device); with out given it must be out's device.
    Without it, out is allocated on the device of the first tensor that holds values (else of
    the first tensor given, else the CPU). out: int32 [1024]. Decode with
    `specops.decode_sas_metadata`. On a device the values are not checked (that would sync):
    invalid values give 1024 zero words instead of an error.
    """
    layout_q_code = LAYOUT_Q_CODES.get(layout_q) if isinstance(layout_q, str) else None
    if layout_q_code is None:
        raise ValueError(f"layout_q must be TND or BSND, got {layout_q!r}")
    layout_kv_code = LAYOUT_KV_CODES.get(layout_kv) if isinstance(layout_kv, str) else None
    if layout_kv_code is None:
        raise ValueError(f"layout_kv must be TND, BSND or PA_ND, got {layout_kv!r}")
    if not isinstance(soc_version, str):
        raise ValueError(f"soc_version must be a str, got {type(soc_version).__name__}")
    if device is not None:
        device = _checked_device(device, out)
    if out is None:
        out = torch.empty(NUM_WORDS, dtype=torch.int32, device=device if device is not None else _first_device(
            cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q, seqused_kv))
    _OP.select()(num_heads_q, num_heads_kv, head_dim, cu_seqlens_q, cu_seqlens_ori_kv, cu_seqlens_cmp_kv, seqused_q,
                 seqused_kv, batch_size, max_seqlen_q, max_seqlen_kv, ori_topk, cmp_topk, cmp_ratio, ori_mask_mode,
                 cmp_mask_mode, ori_win_left, ori_win_right, layout_q_code, layout_kv_code, has_ori_kv, has_cmp_kv,
                 num_cube_cores, num_vector_cores, ASCEND950 in soc_version, out)
    return out


def _checked_device(device: object, out: torch.Tensor | None) -> torch.device:
    """`device=` as a torch.device; with out given, out's device (an index-less "npu" names any
    NPU, as torch.device does)."""
    if not isinstance(device, (str, torch.device)):
        raise ValueError(f"device must be a str or torch.device, got {type(device).__name__}")
    try:
        resolved = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device must name a device, got {device!r}: {error}") from None
    if isinstance(out, torch.Tensor) and (
            out.device.type != resolved.type or resolved.index is not None and out.device.index != resolved.index):
        raise ValueError(f"device is {device!r} but out is on {out.device}")
    return resolved


def _first_device(*tensors: torch.Tensor | None) -> torch.device:
    """Where out goes without `device=`: the device of the first tensor that holds values, else
    of the first tensor given (the lengths all share out's device)."""
    given = [tensor for tensor in tensors if isinstance(tensor, torch.Tensor)]
    for tensor in given:
        if tensor.numel():
            return tensor.device
    return given[0].device if given else torch.device("cpu")
