"""Reference for compressor_metadata_multi: compressor_metadata's reference for every group g
and step s, on row s of cu_seqlens / start_pos and step s of group g's outputs."""

from __future__ import annotations

import torch

from specops.reference.compressor_metadata import compressor_metadata


def compressor_metadata_multi(rope_cos: list[torch.Tensor], rope_sin: list[torch.Tensor], cu_seqlens: torch.Tensor,
                              start_pos: torch.Tensor, kv_block_tables: list[torch.Tensor], kv_block_sizes: list[int],
                              slot_mapping_formats: list[int], compress_ratios: list[int], num_reqs_actual: int,
                              compress_cos: list[torch.Tensor], compress_sin: list[torch.Tensor],
                              slot_mappings: list[torch.Tensor]) -> None:
    for g in range(len(rope_cos)):
        for s in range(cu_seqlens.shape[0]):
            compressor_metadata(rope_cos[g], rope_sin[g], cu_seqlens[s], start_pos[s], kv_block_tables[g],
                                kv_block_sizes[g], slot_mapping_formats[g], compress_ratios[g], num_reqs_actual,
                                compress_cos[g][s], compress_sin[g][s], slot_mappings[g][s])
