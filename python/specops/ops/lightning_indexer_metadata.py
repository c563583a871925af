"""lightning_indexer_metadata: the schedule of Ascend's lightning indexer, word for word what
vllm-ascend's `npu_vllm_quant_lightning_indexer_metadata` writes (its `qli_metadata`;
docs/dsa_metadata_family.md). The quant modes do not change the schedule, hence the name."""

from __future__ import annotations

import torch

import specops.ops._sas_inputs as inputs
from specops.ascend_platform import resolved_platform
from specops.ops._op import SpecOp
from specops.reference.lightning_indexer_metadata import lightning_indexer_metadata as _reference
from specops.sas_family_layout import INT64_MAX, LAYOUT_KEY_CODES, LAYOUT_QUERY_CODES

__all__ = ["lightning_indexer_metadata"]

_LAYOUT_QUERY_CHOICES = "TND or BSND"
_LAYOUT_KEY_CHOICES = "PA_BSND, TND or BSND"


_OP = SpecOp("lightning_indexer_metadata", _reference)
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
    # The string arguments as the schema takes them: codes.
    layout_query, layout_key, ascend950 = codes.first_layout, codes.second_layout, codes.ascend950
    _OP.select()(num_heads_q, num_heads_k, head_dim, query_quant_mode, key_quant_mode, actual_seq_lengths_query,
        actual_seq_lengths_key, batch_size, max_seqlen_q, max_seqlen_k, layout_query, layout_key, sparse_count,
        sparse_mode, pre_tokens, next_tokens, cmp_ratio, num_cube_cores, num_vector_cores, ascend950, out)
    return out
