"""compressor_metadata: the compressed-cache slots and RoPE rows of every compression group a
step completes, vllm-ascend's AI-core `compressor_metadata` (docs/dsa_metadata_family.md)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.arguments import check_allocated_elements, checked_int, checked_size
from specops.ops._op import SpecOp
from specops.compressor_layout import FORMAT_FLAT
from specops.reference.compressor_metadata import compressor_metadata as _reference

__all__ = ["CompressorMetadata", "compressor_metadata"]


class CompressorMetadata(NamedTuple):
    compress_cos: torch.Tensor  # [N, 1, 1, rope_dim]
    compress_sin: torch.Tensor
    slot_mapping: torch.Tensor  # int32 [N] (format 1) or [N, 2] (format 2)


_OP = SpecOp("compressor_metadata", _reference)


def compressor_metadata(
    rope_cos: torch.Tensor,
    rope_sin: torch.Tensor,
    cu_seqlens: torch.Tensor,
    start_pos: torch.Tensor,
    kv_block_table: torch.Tensor,
    kv_block_size: int,
    slot_mapping_format: int,
    compress_ratio: int,
    num_compressed_tokens: int,
    num_reqs_actual: int,
    *,
    compress_cos: torch.Tensor | None = None,
    compress_sin: torch.Tensor | None = None,
    slot_mapping: torch.Tensor | None = None,
) -> CompressorMetadata:
    """vllm-ascend's `compressor_metadata` (its `_out` form when the three outputs are given):
    for every compression group of `compress_ratio` positions that request r < num_reqs_actual
    completes in this step (cu_seqlens: its query_start_loc, start_pos: seq_lens - query_lens),
    in request order, the group's compressed-cache slot from the logical block table and the
    RoPE cos/sin rows of its first position; rows that cannot be placed, and rows past the valid
    ones up to `num_compressed_tokens`, get cos 1, sin 0 and slot -1 (flat, format 1) or
    (-1, block size - 1) (format 2). rope_cos / rope_sin: [max_pos, rope_dim] (the ratio's full
    tables). Outputs: [N, 1, 1, rope_dim] in the tables' dtype and int32 [N] or [N, 2]; absent
    ones are allocated with N = num_compressed_tokens."""
    num_compressed_tokens = checked_int(num_compressed_tokens, "num_compressed_tokens")  # a wrapper-only int
    if compress_cos is None or compress_sin is None or slot_mapping is None:
        # Sized from rope_cos' width (the op names rope_cos when it is no 2-D tensor: nothing is
        # allocated for it then), checked as every size an output is allocated from
        # (docs/hardening.md): an int (not a bool), >= 0, and the rows times the RoPE width
        # within int32 indexing.
        sized = isinstance(rope_cos, torch.Tensor) and rope_cos.dim() == 2
        width = rope_cos.shape[1] if sized else 0
        num_compressed_tokens = checked_size(num_compressed_tokens, "num_compressed_tokens", 0) if sized else 0
        check_allocated_elements(num_compressed_tokens, max(width, 2), "num_compressed_tokens",
                                 "rows of rope_cos.shape[1] values, or (block id, offset) pairs")
        dtype, device = (rope_cos.dtype, rope_cos.device) if sized else (torch.float32, None)
        rows = (num_compressed_tokens, 1, 1, width)
        if compress_cos is None:
            compress_cos = torch.empty(rows, dtype=dtype, device=device)
        if compress_sin is None:
            compress_sin = torch.empty(rows, dtype=dtype, device=device)
        if slot_mapping is None:
            shape = (num_compressed_tokens,) if slot_mapping_format == FORMAT_FLAT else (num_compressed_tokens, 2)
            slot_mapping = torch.empty(shape, dtype=torch.int32, device=device)
    elif isinstance(compress_cos, torch.Tensor) and compress_cos.dim() >= 1 and \
            num_compressed_tokens != compress_cos.shape[0]:
        raise ValueError(f"num_compressed_tokens ({num_compressed_tokens}) must be compress_cos's row count "
                         f"{compress_cos.shape[0]}")
    _OP.select()(rope_cos, rope_sin, cu_seqlens, start_pos, kv_block_table, kv_block_size, slot_mapping_format,
        compress_ratio, num_reqs_actual, compress_cos, compress_sin, slot_mapping)
    return CompressorMetadata(compress_cos, compress_sin, slot_mapping)
