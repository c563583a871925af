"""The OpSpec of torch.ops.specops.compressor_metadata_multi (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _negative_block_ids
from ._spec import (
    I32, Arg, Bad, Call, Corruption, OpSpec, SLOW_KERNEL_GUARD_EXAMPLES, bad, bad_with, stale, t32,
)
from .compressor_metadata import BF16, F32, _rope


def _filled(*shape: int, dtype=BF16) -> torch.Tensor:
    return torch.full(shape, 7.0, dtype=dtype)


def _multi_valid() -> Call:
    # Two groups (C4 in pairs, rope_dim 4; C128 flat, rope_dim 8), two steps of two requests.
    return dict(rope_cos=[_rope(600), _rope(300, 8)], rope_sin=[_rope(600) * 0.5, _rope(300, 8) * 0.5],
                cu_seqlens=t32(0, 9, 11, 0, 1, 2).reshape(2, 3), start_pos=t32(3, 500, 12, 255).reshape(2, 2),
                kv_block_tables=[t32(4, 5, 6, 7).reshape(2, 2), t32(8, 9).reshape(2, 1)], kv_block_sizes=[128, 16],
                slot_mapping_formats=[2, 1], compress_ratios=[4, 128], num_reqs_actual=2,
                compress_cos=[_filled(2, 4, 1, 1, 4), _filled(2, 3, 1, 1, 8)],
                compress_sin=[_filled(2, 4, 1, 1, 4), _filled(2, 3, 1, 1, 8)],
                slot_mappings=[stale(2, 4, 2), stale(2, 3)])


def _set_entry(name: str, g: int, value) -> callable:
    def change(call: Call) -> None:
        call[name] = [value if i == g else item for i, item in enumerate(call[name])]
    return change


def _multi_metadata() -> list[Bad]:
    shared = _filled(64)
    return [
        bad("one rope_sin for two groups", ("rope_sin", "rope_cos"), rope_sin=[_rope(600)]),
        bad("three block sizes for two groups", ("kv_block_sizes", "rope_cos"), kv_block_sizes=[128, 16, 16]),
        bad("one slot mapping for two groups", ("slot_mappings", "rope_cos"), slot_mappings=[stale(2, 4, 2)]),
        bad("start_pos with 3 steps", ("start_pos", "cu_seqlens"), start_pos=t32(*range(6)).reshape(3, 2)),
        bad("num_reqs_actual past cu_seqlens", "num_reqs_actual", num_reqs_actual=3),
        bad("num_reqs_actual -1", "num_reqs_actual", num_reqs_actual=-1),
        bad("kv_block_sizes[1] 0", "kv_block_sizes[1]", kv_block_sizes=[128, 0]),
        bad("compress_ratios[0] past int32", "compress_ratios[0]", compress_ratios=[2**31, 128]),
        bad("slot_mapping_formats[1] 3", "slot_mapping_formats[1]", slot_mapping_formats=[2, 3]),
        bad("slot_mappings[1] of pairs, format 1", "slot_mappings[1]", slot_mappings=[stale(2, 4, 2), stale(2, 3, 2)]),
        bad_with("kv_block_tables[1] with 1 row", ("kv_block_tables[1]", "num_reqs_actual"),
                 _set_entry("kv_block_tables", 1, t32(8).reshape(1, 1))),
        bad_with("rope_cos[1] in float32", "rope_cos[1]", _set_entry("rope_cos", 1, _rope(300, 8, F32))),
        bad_with("rope_sin[0] of another shape", "rope_sin[0]", _set_entry("rope_sin", 0, _rope(500))),
        bad_with("compress_cos[1] for 3 steps", "compress_cos[1]",
                 _set_entry("compress_cos", 1, _filled(3, 3, 1, 1, 8))),
        bad_with("compress_sin[0] with 3 rows", "compress_sin[0]",
                 _set_entry("compress_sin", 0, _filled(2, 3, 1, 1, 4))),
        bad_with("compress_cos[0] not contiguous", "compress_cos[0]",
                 _set_entry("compress_cos", 0, _filled(4, 2, 1, 1, 4).transpose(0, 1))),
        bad_with("slot_mappings[0] for 1 step", "slot_mappings[0]", _set_entry("slot_mappings", 0, stale(1, 4, 2))),
        bad("outputs of two groups sharing memory", ("compress_cos[1]", "compress_cos[0]"),
            compress_cos=[shared[:32].view(2, 4, 1, 1, 4), shared[16:64].view(2, 3, 1, 1, 8)]),
    ]


@st.composite
def _multi_draw(draw) -> Call:
    generator = torch.Generator().manual_seed(draw(st.integers(0, 99)))
    num_groups = draw(st.integers(0, 5))
    steps = draw(st.integers(1, 3))
    reqs = draw(st.integers(0, 3))
    cu = torch.zeros(steps, reqs + 1 + draw(st.integers(0, 1)), dtype=I32)
    cu[:, 1:] = torch.randint(0, 140, (steps, cu.size(1) - 1), generator=generator).cumsum(1)
    start_pos = torch.randint(-2, 600, (steps, reqs + draw(st.integers(0, 1))), generator=generator).to(I32)
    dtype = draw(st.sampled_from([F32, BF16]))
    call = dict(rope_cos=[], rope_sin=[], cu_seqlens=cu, start_pos=start_pos, kv_block_tables=[], kv_block_sizes=[],
                slot_mapping_formats=[], compress_ratios=[], num_reqs_actual=reqs, compress_cos=[], compress_sin=[],
                slot_mappings=[])
    for _ in range(num_groups):
        dim, rows, fmt = draw(st.sampled_from([2, 4, 8])), draw(st.integers(0, 40)), draw(st.sampled_from([1, 2]))
        rope_rows = draw(st.integers(1, 800))
        call["rope_cos"].append(_rope(rope_rows, dim, dtype))
        call["rope_sin"].append(_rope(rope_rows, dim, dtype) * 0.5)
        table = torch.randint(-1, 40, (max(reqs, 1), draw(st.integers(1, 6))), generator=generator)
        call["kv_block_tables"].append(table.to(I32))
        call["kv_block_sizes"].append(draw(st.sampled_from([16, 128])))
        call["slot_mapping_formats"].append(fmt)
        call["compress_ratios"].append(draw(st.sampled_from([4, 128])))
        call["compress_cos"].append(_filled(steps, rows, 1, 1, dim, dtype=dtype))
        call["compress_sin"].append(_filled(steps, rows, 1, 1, dim, dtype=dtype))
        call["slot_mappings"].append(stale(steps, rows) if fmt == 1 else stale(steps, rows, 2))
    return call


def _negative_ids_in_every_table(draw, call: Call) -> bool:
    for g in range(len(call["kv_block_tables"])):
        _negative_block_ids(draw, call["kv_block_tables"], g)
    return False


_FLOAT = (BF16, F32)
COMPRESSOR_MULTI = OpSpec(
    name="compressor_metadata_multi",
    guard_examples=SLOW_KERNEL_GUARD_EXAMPLES,
    wrapper=specops.compressor_metadata_multi,
    tensors={**{f"{name}[{g}]": Arg(_FLOAT, 2, row_stride=True) for name in ("rope_cos", "rope_sin") for g in (0, 1)},
             "cu_seqlens": Arg((I32,), 2, row_stride=True), "start_pos": Arg((I32,), 2, row_stride=True),
             **{f"kv_block_tables[{g}]": Arg((I32,), 2, row_stride=True) for g in (0, 1)},
             **{f"{name}[{g}]": Arg(_FLOAT, 5) for name in ("compress_cos", "compress_sin") for g in (0, 1)},
             "slot_mappings[0]": Arg((I32,), 3), "slot_mappings[1]": Arg((I32,), 2)},
    outputs=("compress_cos[0]", "compress_sin[0]", "slot_mappings[0]", "compress_cos[1]", "compress_sin[1]",
             "slot_mappings[1]"),
    valid_call=_multi_valid,
    metadata_errors=_multi_metadata,
    value_errors=lambda: [],  # every value has a defined row, as for compressor_metadata
    draw_call=_multi_draw(),
    corruptions=(Corruption("negative block ids", _negative_ids_in_every_table),),
    scalars=("kv_block_sizes", "slot_mapping_formats", "compress_ratios", "num_reqs_actual"),
    allocation_sizes={},
)
