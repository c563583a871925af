"""compressor_metadata_multi: compressor_metadata for every compressed group and every draft pass
of a draft-loop step in one op call (one launch on a device for up to four groups)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.arguments import checked_tensor_list, ints_per_group
from specops.ops._op import SpecOp
from specops.reference.compressor_metadata_multi import compressor_metadata_multi as _reference

__all__ = ["CompressorMetadataMulti", "compressor_metadata_multi"]


class CompressorMetadataMulti(NamedTuple):
    compress_cos: list[torch.Tensor]  # per group [S, N_g, 1, 1, D_g]
    compress_sin: list[torch.Tensor]
    slot_mappings: list[torch.Tensor]  # per group int32 [S, N_g] (format 1) or [S, N_g, 2] (format 2)


_OP = SpecOp("compressor_metadata_multi", _reference)


def compressor_metadata_multi(
    rope_cos: Sequence[torch.Tensor],
    rope_sin: Sequence[torch.Tensor],
    cu_seqlens: torch.Tensor,
    start_pos: torch.Tensor,
    kv_block_tables: Sequence[torch.Tensor],
    kv_block_sizes: int | Sequence[int],
    slot_mapping_formats: int | Sequence[int],
    compress_ratios: int | Sequence[int],
    num_reqs_actual: int,
    *,
    compress_cos: Sequence[torch.Tensor],
    compress_sin: Sequence[torch.Tensor],
    slot_mappings: Sequence[torch.Tensor],
) -> CompressorMetadataMulti:
    """compressor_metadata for G groups and S steps in one call. For every group g and step s,
    compress_cos[g][s], compress_sin[g][s] and slot_mappings[g][s] get exactly what
    compressor_metadata(rope_cos[g], rope_sin[g], cu_seqlens[s], start_pos[s], kv_block_tables[g],
    kv_block_sizes[g], slot_mapping_formats[g], compress_ratios[g], N_g, num_reqs_actual) writes:
    the rows of the compression groups each request completes, then fill rows (cos 1, sin 0,
    slot -1 or (-1, block size - 1)) up to N_g.

    cu_seqlens, start_pos: int32 [S, >= num_reqs_actual + 1] and [S, >= num_reqs_actual], row s
    step s's query_start_loc and start positions (rows of larger buffers allowed: a row stride,
    the last dimension contiguous). Per group (lists of G entries; G = 0 writes nothing):
    rope_cos / rope_sin float [max_pos_g, D_g], one dtype for every group; kv_block_tables int32
    [>= num_reqs_actual, W_g] (a row stride allowed); kv_block_sizes, slot_mapping_formats (1 flat,
    2 (block, offset)) and compress_ratios: one per group or one int for all. Outputs, all given,
    no two sharing memory and none an input's memory: compress_cos / compress_sin contiguous
    [S, N_g, 1, 1, D_g] in the RoPE dtype; slot_mappings contiguous int32 [S, N_g] (format 1) or
    [S, N_g, 2] (format 2). Returns the three output lists, named.
    """
    rope_cos = checked_tensor_list(rope_cos, "rope_cos")
    num_groups = len(rope_cos)
    rope_sin = checked_tensor_list(rope_sin, "rope_sin")
    kv_block_tables = checked_tensor_list(kv_block_tables, "kv_block_tables")
    kv_block_sizes = ints_per_group(kv_block_sizes, num_groups, "kv_block_sizes")
    slot_mapping_formats = ints_per_group(slot_mapping_formats, num_groups, "slot_mapping_formats")
    compress_ratios = ints_per_group(compress_ratios, num_groups, "compress_ratios")
    compress_cos = checked_tensor_list(compress_cos, "compress_cos")
    compress_sin = checked_tensor_list(compress_sin, "compress_sin")
    slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    _OP.select()(rope_cos, rope_sin, cu_seqlens, start_pos, kv_block_tables, kv_block_sizes, slot_mapping_formats,
        compress_ratios, num_reqs_actual, compress_cos, compress_sin, slot_mappings)
    return CompressorMetadataMulti(compress_cos, compress_sin, slot_mappings)
