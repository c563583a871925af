"""compressor_metadata: the compressed-cache slots and RoPE rows of every compression group a
step completes, vllm-ascend's AI-core `compressor_metadata` (docs/dsa_metadata_family.md)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from specops.ops._checks import (
    check_allocated_elements,
    check_outputs_alias_nothing,
    check_positive,
    check_tensor,
    checked_int,
    checked_size,
)
from specops.ops._op import SpecOp
from specops.reference.compressor_metadata import FORMAT_BLOCK_OFFSET, FORMAT_FLAT
from specops.reference.compressor_metadata import compressor_metadata as _reference
from specops.sas_layout import INT32_MAX

_FLOATS = [torch.float32, torch.bfloat16, torch.float16]


class CompressorMetadata(NamedTuple):
    compress_cos: torch.Tensor  # [N, 1, 1, rope_dim]
    compress_sin: torch.Tensor
    slot_mapping: torch.Tensor  # int32 [N] (format 1) or [N, 2] (format 2)


class GroupNames(NamedTuple):
    """How the messages name one group's arguments: the single op's names, or a list element's
    (kv_block_tables[1]) in compressor_metadata_multi."""

    rope_cos: str = "rope_cos"
    rope_sin: str = "rope_sin"
    kv_block_table: str = "kv_block_table"
    kv_block_size: str = "kv_block_size"
    slot_mapping_format: str = "slot_mapping_format"
    compress_ratio: str = "compress_ratio"
    compress_cos: str = "compress_cos"
    compress_sin: str = "compress_sin"
    slot_mapping: str = "slot_mapping"

    @classmethod
    def of_group(cls, g: int) -> GroupNames:
        return cls(f"rope_cos[{g}]", f"rope_sin[{g}]", f"kv_block_tables[{g}]", f"kv_block_sizes[{g}]",
                   f"slot_mapping_formats[{g}]", f"compress_ratios[{g}]", f"compress_cos[{g}]", f"compress_sin[{g}]",
                   f"slot_mappings[{g}]")


SINGLE = GroupNames()


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def check_group(rope_cos: torch.Tensor, rope_sin: torch.Tensor, kv_block_table: torch.Tensor, kv_block_size: int,
                slot_mapping_format: int, compress_ratio: int, compress_cos: torch.Tensor, compress_sin: torch.Tensor,
                slot_mapping: torch.Tensor, names: GroupNames = SINGLE,
                steps: int | None = None, rope_dtypes: list[torch.dtype] | None = None,
                device: torch.device | None = None, device_of: str = "rope_cos") -> None:
    """One group's metadata but its table's rows (check_table_rows, after num_reqs_actual's own
    checks): compressor_metadata's, and compressor_metadata_multi's for group g (names:
    GroupNames.of_group(g); steps: S, the leading dimension of its outputs; rope_dtypes:
    rope_cos[0]'s dtype; device: the call's). Mirrors csrc/cpu/compressor_metadata.cpp and
    csrc/cpu/compressor_metadata_multi.cpp."""
    n = names
    check_tensor(rope_cos, n.rope_cos, rope_dtypes or _FLOATS, 2, device, device_of)
    device = rope_cos.device if device is None else device
    for name, t in ((n.rope_sin, rope_sin), (n.compress_cos, compress_cos), (n.compress_sin, compress_sin)):
        if isinstance(t, torch.Tensor) and t.dtype != rope_cos.dtype:
            raise ValueError(f"{name} must have {n.rope_cos}'s dtype {_dtype(rope_cos)}, got {_dtype(t)}")
    lead = () if steps is None else (steps,)
    check_tensor(rope_sin, n.rope_sin, [rope_cos.dtype], 2, device, device_of)
    if rope_sin.shape != rope_cos.shape:
        raise ValueError(f"{n.rope_sin} must have {n.rope_cos}'s shape {list(rope_cos.shape)}, got "
                         f"{list(rope_sin.shape)}")
    if rope_sin.stride(0) != rope_cos.stride(0):
        raise ValueError(f"{n.rope_sin} must have {n.rope_cos}'s row stride {rope_cos.stride(0)}, got "
                         f"{rope_sin.stride(0)}")
    check_tensor(kv_block_table, n.kv_block_table, [torch.int32], 2, device, device_of)
    check_tensor(compress_cos, n.compress_cos, [rope_cos.dtype], 4 + len(lead), device, device_of)
    check_tensor(compress_sin, n.compress_sin, [rope_cos.dtype], 4 + len(lead), device, device_of)
    if not (compress_cos.is_contiguous() and compress_sin.is_contiguous()):
        raise ValueError(f"{n.compress_cos} and {n.compress_sin} must be contiguous")
    steps_text = "" if steps is None else f"S = {steps}, "
    num_rows, rope_dim = compress_cos.shape[len(lead)], rope_cos.shape[1]
    if tuple(compress_cos.shape) != (*lead, num_rows, 1, 1, rope_dim):
        raise ValueError(f"{n.compress_cos} must have shape [{steps_text}N, 1, 1, {rope_dim}], got "
                         f"{list(compress_cos.shape)}")
    if compress_sin.shape != compress_cos.shape:
        raise ValueError(f"{n.compress_sin} must have {n.compress_cos}'s shape {list(compress_cos.shape)}, got "
                         f"{list(compress_sin.shape)}")
    if slot_mapping_format not in (FORMAT_FLAT, FORMAT_BLOCK_OFFSET):
        raise ValueError(f"{n.slot_mapping_format} must be 1 (flat) or 2 (block, offset), got {slot_mapping_format}")
    if slot_mapping_format == FORMAT_FLAT:
        check_tensor(slot_mapping, n.slot_mapping, [torch.int32], 1 + len(lead), device, device_of)
        if tuple(slot_mapping.shape) != (*lead, num_rows) or not slot_mapping.is_contiguous():
            raise ValueError(f"{n.slot_mapping} must have N = {num_rows} rows, got {list(slot_mapping.shape)}"
                             if steps is None else f"{n.slot_mapping} must be a contiguous [{steps_text}N = "
                             f"{num_rows}] tensor, got {list(slot_mapping.shape)}")
    else:
        check_tensor(slot_mapping, n.slot_mapping, [torch.int32], 2 + len(lead), device, device_of)
        if tuple(slot_mapping.shape) != (*lead, num_rows, 2) or not slot_mapping.is_contiguous():
            raise ValueError(f"{n.slot_mapping} must be a contiguous [{steps_text}N = {num_rows}, 2] tensor, got "
                             f"{list(slot_mapping.shape)}")
    for name, value in ((n.kv_block_size, kv_block_size), (n.compress_ratio, compress_ratio)):
        check_positive(value, name)
        if value > INT32_MAX:
            raise ValueError(f"{name} must fit int32, got {value}")


def check_table_rows(kv_block_table: torch.Tensor, name: str, num_reqs_actual: int) -> None:
    if kv_block_table.shape[0] < num_reqs_actual:
        raise ValueError(f"{name} must have at least num_reqs_actual = {num_reqs_actual} rows, got "
                         f"{kv_block_table.shape[0]}")


def check_num_reqs(cu_seqlens: torch.Tensor, start_pos: torch.Tensor, num_reqs_actual: int) -> None:
    """num_reqs_actual against the entries (the columns, for compressor_metadata_multi's rows of
    steps) of cu_seqlens and start_pos."""
    if num_reqs_actual < 0:
        raise ValueError(f"num_reqs_actual must be >= 0, got {num_reqs_actual}")
    for name, t, need, what in (("cu_seqlens", cu_seqlens, num_reqs_actual + 1, "num_reqs_actual + 1"),
                                ("start_pos", start_pos, num_reqs_actual, "num_reqs_actual")):
        entries = t.shape[-1] if t.dim() else t.numel()
        if entries < need:
            raise ValueError(f"{name} must have at least {what} = {need} entries, got {entries}")


def _check(rope_cos: torch.Tensor, rope_sin: torch.Tensor, cu_seqlens: torch.Tensor, start_pos: torch.Tensor,
           kv_block_table: torch.Tensor, kv_block_size: int, slot_mapping_format: int, compress_ratio: int,
           num_reqs_actual: int, compress_cos: torch.Tensor, compress_sin: torch.Tensor,
           slot_mapping: torch.Tensor) -> None:
    """Mirrors csrc/cpu/compressor_metadata.cpp."""
    check_group(rope_cos, rope_sin, kv_block_table, kv_block_size, slot_mapping_format, compress_ratio, compress_cos,
                compress_sin, slot_mapping)
    device = rope_cos.device
    check_tensor(cu_seqlens, "cu_seqlens", [torch.int32], 1, device, "rope_cos")
    check_tensor(start_pos, "start_pos", [torch.int32], 1, device, "rope_cos")
    check_num_reqs(cu_seqlens, start_pos, num_reqs_actual)
    check_table_rows(kv_block_table, "kv_block_table", num_reqs_actual)
    check_outputs_alias_nothing(
        [(compress_cos, "compress_cos"), (compress_sin, "compress_sin"), (slot_mapping, "slot_mapping")],
        [(rope_cos, "rope_cos"), (rope_sin, "rope_sin"), (cu_seqlens, "cu_seqlens"), (start_pos, "start_pos"),
         (kv_block_table, "kv_block_table")])


_OP = SpecOp("compressor_metadata", _check, _reference)


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
        if not isinstance(rope_cos, torch.Tensor) or rope_cos.dim() != 2:
            raise ValueError("rope_cos must be a 2-D tensor")
        # Checked as every size an output is allocated from (docs/hardening.md): an int (not a
        # bool), >= 0, and the rows times the RoPE width within int32 indexing.
        num_compressed_tokens = checked_size(num_compressed_tokens, "num_compressed_tokens", 0)
        check_allocated_elements(num_compressed_tokens, max(rope_cos.shape[1], 2), "num_compressed_tokens",
                                 "rows of rope_cos.shape[1] values, or (block id, offset) pairs")
        rows = (num_compressed_tokens, 1, 1, rope_cos.shape[1])
        if compress_cos is None:
            compress_cos = torch.empty(rows, dtype=rope_cos.dtype, device=rope_cos.device)
        if compress_sin is None:
            compress_sin = torch.empty(rows, dtype=rope_cos.dtype, device=rope_cos.device)
        if slot_mapping is None:
            shape = (num_compressed_tokens,) if slot_mapping_format == FORMAT_FLAT else (num_compressed_tokens, 2)
            slot_mapping = torch.empty(shape, dtype=torch.int32, device=rope_cos.device)
    elif isinstance(compress_cos, torch.Tensor) and compress_cos.dim() >= 1 and \
            num_compressed_tokens != compress_cos.shape[0]:
        raise ValueError(f"num_compressed_tokens ({num_compressed_tokens}) must be compress_cos's row count "
                         f"{compress_cos.shape[0]}")
    _OP.select()(rope_cos, rope_sin, cu_seqlens, start_pos, kv_block_table, kv_block_size, slot_mapping_format,
                 compress_ratio, num_reqs_actual, compress_cos, compress_sin, slot_mapping)
    return CompressorMetadata(compress_cos, compress_sin, slot_mapping)
