"""Reference for compressor_metadata_multi: compressor_metadata's reference for every group g
and step s, on row s of cu_seqlens / start_pos and step s of group g's outputs."""

from __future__ import annotations

from types import SimpleNamespace

from specops.reference.compressor_metadata import compressor_metadata


def compressor_metadata_multi(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    for g in range(len(a.rope_cos)):
        for s in range(a.cu_seqlens.shape[0]):
            compressor_metadata(SimpleNamespace(
                rope_cos=a.rope_cos[g], rope_sin=a.rope_sin[g], cu_seqlens=a.cu_seqlens[s], start_pos=a.start_pos[s],
                kv_block_table=a.kv_block_tables[g], kv_block_size=a.kv_block_sizes[g],
                slot_mapping_format=a.slot_mapping_formats[g], compress_ratio=a.compress_ratios[g],
                num_reqs_actual=a.num_reqs_actual, compress_cos=a.compress_cos[g][s],
                compress_sin=a.compress_sin[g][s], slot_mapping=a.slot_mappings[g][s]))
