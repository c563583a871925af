"""sas_metadata: the work schedule of the shared-KV sparse-attention kernel (docs/sas_metadata.md)."""

from __future__ import annotations

import torch

from specops.ops._checks import check_outputs_alias_nothing, check_positive, check_tensor
from specops.ops._op import SpecOp
from specops.reference.sas_metadata import sas_metadata as _reference
from specops.sas_layout import INT32_MAX, MAX_CUBE_CORES, MAX_VECTOR_CORES, NUM_WORDS


def _check(
    cu_seqlens_q: torch.Tensor,
    seqused_kv: torch.Tensor,
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    window_left: int,
    window_right: int,
    num_cube_cores: int,
    num_vector_cores: int,
    out: torch.Tensor,
) -> None:
    check_tensor(out, "out", [torch.int32], 1)
    if out.numel() != NUM_WORDS:
        raise ValueError(f"out must have exactly {NUM_WORDS} int32 words, got {out.numel()}")
    device = out.device
    check_tensor(cu_seqlens_q, "cu_seqlens_q", [torch.int32], 1, device)
    if cu_seqlens_q.numel() < 1:
        raise ValueError("cu_seqlens_q must have R + 1 >= 1 entries, got 0")
    num_reqs = cu_seqlens_q.numel() - 1
    check_tensor(seqused_kv, "seqused_kv", [torch.int32], 1, device)
    if seqused_kv.numel() != num_reqs:
        raise ValueError(f"seqused_kv must have R = cu_seqlens_q.numel() - 1 = {num_reqs} entries, got {seqused_kv.numel()}")
    check_positive(num_heads_q, "num_heads_q")
    if num_heads_q > INT32_MAX:
        raise ValueError(f"num_heads_q must be < 2^31, got {num_heads_q}")
    check_positive(num_heads_kv, "num_heads_kv")
    if num_heads_q % num_heads_kv:
        raise ValueError(f"num_heads_q must be a multiple of num_heads_kv = {num_heads_kv}, got {num_heads_q}")
    if num_reqs * num_heads_kv > INT32_MAX:
        raise ValueError(f"num_heads_kv * R must be < 2^31 (bn2 is an int32 word), got {num_reqs * num_heads_kv}")
    check_positive(head_dim, "head_dim")
    if window_left < -1:
        raise ValueError(f"window_left must be >= -1 (-1: unbounded), got {window_left}")
    if window_right < -1:
        raise ValueError(f"window_right must be >= -1 (-1: unbounded), got {window_right}")
    if not 1 <= num_cube_cores <= MAX_CUBE_CORES:
        raise ValueError(f"num_cube_cores must be in [1, {MAX_CUBE_CORES}], got {num_cube_cores}")
    if not num_cube_cores <= num_vector_cores <= MAX_VECTOR_CORES:
        raise ValueError(
            f"num_vector_cores must be in [num_cube_cores = {num_cube_cores}, {MAX_VECTOR_CORES}], got {num_vector_cores}"
        )
    check_outputs_alias_nothing([(out, "out")], [(cu_seqlens_q, "cu_seqlens_q"), (seqused_kv, "seqused_kv")])


_OP = SpecOp("sas_metadata", _check, _reference)


def sas_metadata(
    cu_seqlens_q: torch.Tensor,
    seqused_kv: torch.Tensor,
    *,
    num_heads_q: int,
    num_heads_kv: int,
    head_dim: int,
    window_left: int = -1,
    window_right: int = 0,
    num_cube_cores: int = 24,
    num_vector_cores: int = 48,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The balanced work schedule of the shared-KV sparse-attention kernel: 1024 int32 words.

    cu_seqlens_q: int32 [R + 1] (only differences are read); seqused_kv: int32 [R], KV length of
    each request including its new tokens. Windows: -1 is unbounded; (-1, 0) is causal. out:
    int32 [1024], allocated on cu_seqlens_q's device when absent. Decode the words with
    `specops.decode_sas_metadata`. The host op rejects invalid values; a device kernel writes
    the all-zero buffer for them (version word 0).
    """
    if out is None:
        out = torch.empty(NUM_WORDS, dtype=torch.int32, device=cu_seqlens_q.device)
    _OP.select()(cu_seqlens_q, seqused_kv, num_heads_q, num_heads_kv, head_dim, window_left, window_right,
        num_cube_cores, num_vector_cores, out)
    return out
