"""lightning_indexer_metadata: the schedule of Ascend's lightning indexer, word for word what
vllm-ascend's `npu_vllm_quant_lightning_indexer_metadata` writes (its `qli_metadata`;
docs/dsa_metadata_family.md). The quant modes do not change the schedule, hence the name."""

from __future__ import annotations

import torch

import specops.ops._sas_inputs as inputs
from specops.ops._ascend_platform import resolved_platform
from specops.ops._op import SpecOp
from specops.reference.lightning_indexer_metadata import lightning_indexer_metadata as _reference
from specops.sas_family_layout import (
    INT64_MAX,
    LAYOUT_KEY_BSND,
    LAYOUT_KEY_CODES,
    LAYOUT_KEY_TND,
    LAYOUT_QUERY_BSND,
    LAYOUT_QUERY_CODES,
    LAYOUT_QUERY_TND,
    LI_HEADS,
    SPARSE_MODE_ALL,
    SPARSE_MODE_CAUSAL,
)
from specops.sas_layout import INT32_MAX, MAX_CUBE_CORES, MAX_VECTOR_CORES, is_given

_LENGTH_TENSORS = ("actual_seq_lengths_query", "actual_seq_lengths_key")
_INT32_ATTRIBUTES = ("num_heads_q", "num_heads_k", "head_dim", "query_quant_mode", "key_quant_mode", "batch_size",
                     "max_seqlen_q", "max_seqlen_k", "sparse_count", "sparse_mode", "cmp_ratio")
_LAYOUT_QUERY_CHOICES = "TND or BSND"
_LAYOUT_KEY_CHOICES = "PA_BSND, TND or BSND"


def _check(
    num_heads_q: int, num_heads_k: int, head_dim: int, query_quant_mode: int, key_quant_mode: int,
    actual_seq_lengths_query: torch.Tensor | None, actual_seq_lengths_key: torch.Tensor | None, batch_size: int,
    max_seqlen_q: int, max_seqlen_k: int, layout_query: int, layout_key: int, sparse_count: int, sparse_mode: int,
    pre_tokens: int, next_tokens: int, cmp_ratio: int, num_cube_cores: int, num_vector_cores: int, ascend950: bool,
    out: torch.Tensor,
) -> None:
    """Every rejection of the AI-CPU kernel, in its order, plus what would be undefined there
    (mirrors csrc/cpu/lightning_indexer_metadata.cpp)."""
    arguments = locals()
    inputs.check_schedule_inputs(arguments, _LENGTH_TENSORS, _INT32_ATTRIBUTES)

    # The kernel's own checks.
    inputs.check_cube_cores_given(num_cube_cores)
    if num_vector_cores == 0 or num_vector_cores % num_cube_cores != 0:
        raise ValueError(f"num_vector_cores (AIV num) must be a non-zero multiple of num_cube_cores "
                         f"({num_cube_cores}), got {num_vector_cores}")
    inputs.check_nonnegative(arguments, ("batch_size", "max_seqlen_q", "max_seqlen_k"))
    if num_heads_q != LI_HEADS:
        raise ValueError(f"num_heads_q should only be 64, but got {num_heads_q}")
    if num_heads_k != 1:
        raise ValueError(f"num_heads_k should only be 1, but got {num_heads_k}")
    inputs.check_layout_code(layout_query, LAYOUT_QUERY_CODES, "layout_query", _LAYOUT_QUERY_CHOICES)
    inputs.check_layout_code(layout_key, LAYOUT_KEY_CODES, "layout_key", _LAYOUT_KEY_CHOICES)
    if layout_query == LAYOUT_QUERY_TND and layout_key == LAYOUT_KEY_BSND:
        raise ValueError("layout_key must be PA_BSND or TND when layout_query is TND, got BSND")
    if layout_query == LAYOUT_QUERY_BSND and layout_key == LAYOUT_KEY_TND:
        raise ValueError("layout_key must be PA_BSND or BSND when layout_query is BSND, got TND")
    if sparse_mode not in (SPARSE_MODE_ALL, SPARSE_MODE_CAUSAL):
        raise ValueError(f"sparse_mode should be 0 or 3, but got {sparse_mode}")
    if pre_tokens != INT64_MAX:
        raise ValueError(f"pre_tokens should only be 2^63-1, but got {pre_tokens}")
    if next_tokens != INT64_MAX:
        raise ValueError(f"next_tokens should only be 2^63-1, but got {next_tokens}")
    has_query, has_key = is_given(actual_seq_lengths_query), is_given(actual_seq_lengths_key)
    if layout_query == LAYOUT_QUERY_TND and not has_query:
        raise ValueError("actual_seq_lengths_query must be provided (and non-empty) for layout_query TND")
    if layout_key != LAYOUT_KEY_BSND and not has_key:
        raise ValueError("actual_seq_lengths_key must be provided (and non-empty) for layout_key PA_BSND or TND")
    query_batches = actual_seq_lengths_query.numel() if has_query else batch_size
    key_batches = actual_seq_lengths_key.numel() if has_key else batch_size
    if (layout_query == LAYOUT_QUERY_BSND or layout_key == LAYOUT_KEY_TND) and query_batches != key_batches:
        raise ValueError(f"actual_seq_lengths_query must have as many entries as actual_seq_lengths_key "
                         f"({key_batches}) for layout_query BSND or TND/TND, got {query_batches}")
    if abs(query_batches - key_batches) > 1:
        raise ValueError(f"actual_seq_lengths_query ({query_batches} batches) and actual_seq_lengths_key "
                         f"({key_batches}) may differ by at most one entry")
    if not 1 <= cmp_ratio <= 128:
        raise ValueError(f"cmp_ratio should be in [1, 128], but got {cmp_ratio}")
    if ascend950 and cmp_ratio not in (1, 4, 128):
        raise ValueError(f"cmp_ratio should be 1, 4 or 128 on Ascend950, but got {cmp_ratio}")
    if not ascend950 and cmp_ratio & (cmp_ratio - 1):
        raise ValueError(f"cmp_ratio should be a power of two (1 .. 128) on A2/A3, but got {cmp_ratio}")

    # Inputs on which the kernel's behaviour is undefined.
    if not 1 <= num_cube_cores <= MAX_CUBE_CORES:
        raise ValueError(f"num_cube_cores (AIC num) must be in [1, {MAX_CUBE_CORES}], got {num_cube_cores}")
    if not 1 <= num_vector_cores <= MAX_VECTOR_CORES:
        raise ValueError(f"num_vector_cores (AIV num) must be in [1, {MAX_VECTOR_CORES}], got {num_vector_cores}")
    if not has_key and max_seqlen_k * cmp_ratio > INT32_MAX:
        raise ValueError(f"max_seqlen_k * cmp_ratio ({max_seqlen_k * cmp_ratio}) must fit int32 (the kernel's key "
                         "length without a tensor)")
    inputs.check_lengths_alias_nothing(arguments, _LENGTH_TENSORS)


_OP = SpecOp("lightning_indexer_metadata", _check, _reference)
_STRINGS = inputs.StringArguments(("layout_query", LAYOUT_QUERY_CODES, _LAYOUT_QUERY_CHOICES),
                                  ("layout_key", LAYOUT_KEY_CODES, _LAYOUT_KEY_CHOICES))


def lightning_indexer_metadata(
    num_heads_q: int,
    num_heads_k: int,
    head_dim: int,
    query_quant_mode: int,
    key_quant_mode: int,
    *,
    actual_seq_lengths_query: torch.Tensor | None = None,
    actual_seq_lengths_key: torch.Tensor | None = None,
    batch_size: int = 0,
    max_seqlen_q: int = 0,
    max_seqlen_k: int = 0,
    layout_query: str = "BSND",
    layout_key: str = "BSND",
    sparse_count: int = 2048,
    sparse_mode: int = 3,
    pre_tokens: int = INT64_MAX,
    next_tokens: int = INT64_MAX,
    cmp_ratio: int = 1,
    num_cube_cores: int | None = None,
    num_vector_cores: int | None = None,
    soc_version: str | None = None,
    device: str | torch.device | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The schedule of vllm-ascend's `npu_vllm_quant_lightning_indexer`: the 1024 int32 words
    (`qli_metadata`) its AI-CPU kernel `npu_vllm_quant_lightning_indexer_metadata` computes for
    the same arguments (unwritten words 0), or a ValueError naming the argument it rejects.

    Tensors: int32 (int64 accepted); None and an empty tensor both mean not provided. On a
    device, the host copies, as for `specops.sas_metadata` (one non-blocking copy of the words,
    no device read); `device=`, and the core counts and SoC from the NPU when None, as there.
    TND query lengths are prefix sums (a leading 0 when the query tensor is one longer than the
    key tensor), TND key lengths prefix sums without it, other layouts per batch.
    head_dim, the quant modes and sparse_count do not change the schedule. Decode with
    `specops.decode_lightning_indexer_metadata`.
    """
    if device is not None:
        device = inputs.checked_device(device, out)
    if out is None:
        out = inputs.schedule_out(device, actual_seq_lengths_query, actual_seq_lengths_key)
    if num_cube_cores is None or num_vector_cores is None or soc_version is None:
        num_cube_cores, num_vector_cores, soc_version = resolved_platform(num_cube_cores, num_vector_cores,
                                                                          soc_version, out.device)
    codes = _STRINGS(layout_query, layout_key, soc_version)
    _OP.select()(num_heads_q, num_heads_k, head_dim, query_quant_mode, key_quant_mode, actual_seq_lengths_query,
                 actual_seq_lengths_key, batch_size, max_seqlen_q, max_seqlen_k, codes.first_layout,
                 codes.second_layout, sparse_count, sparse_mode, pre_tokens, next_tokens, cmp_ratio, num_cube_cores,
                 num_vector_cores, codes.ascend950, out)
    return out
