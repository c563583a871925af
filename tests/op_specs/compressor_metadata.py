"""The OpSpec of torch.ops.specops.compressor_metadata (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _negative_block_ids
from ._spec import I32, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, SLOW_KERNEL_GUARD_EXAMPLES, bad, t32

F32, BF16 = torch.float32, torch.bfloat16


def _rope(rows: int, dim: int = 4, dtype=BF16) -> torch.Tensor:
    return torch.arange(rows * dim, dtype=torch.float32).reshape(rows, dim).to(dtype)


def _compressor_valid() -> Call:
    return dict(rope_cos=_rope(600), rope_sin=_rope(600) * 0.5, cu_seqlens=t32(0, 9, 11), start_pos=t32(3, 500),
                kv_block_table=t32(4, 5, 6, 7).reshape(2, 2), kv_block_size=128, slot_mapping_format=2,
                compress_ratio=4, num_compressed_tokens=4, num_reqs_actual=2,
                compress_cos=torch.full((4, 1, 1, 4), 7.0, dtype=BF16), compress_sin=torch.full((4, 1, 1, 4), 7.0,
                                                                                              dtype=BF16),
                slot_mapping=torch.full((4, 2), 0x0BADF00D, dtype=I32))


def _compressor_metadata() -> list[Bad]:
    return [
        bad("slot_mapping_format 3", "slot_mapping_format", slot_mapping_format=3),
        bad("kv_block_size 0", "kv_block_size", kv_block_size=0),
        bad("compress_ratio 0", "compress_ratio", compress_ratio=0),
        bad("num_reqs_actual past the batch", "num_reqs_actual", num_reqs_actual=3),
        bad("num_reqs_actual -1", "num_reqs_actual", num_reqs_actual=-1),
        bad("flat slot_mapping of pairs", "slot_mapping", slot_mapping_format=1),
        bad("rope_sin of another shape", "rope_sin", rope_sin=_rope(500)),
        bad("compress_cos of another dtype", "compress_cos", compress_cos=torch.zeros(4, 1, 1, 4)),
        bad("compress_sin with 3 rows", "compress_sin", compress_sin=torch.zeros(3, 1, 1, 4, dtype=BF16)),
        bad("num_compressed_tokens not the rows", "num_compressed_tokens", num_compressed_tokens=5),
    ]


@st.composite
def _compressor_draw(draw) -> Call:
    reqs = draw(st.integers(0, 4))
    lengths = [draw(st.integers(0, 140)) for _ in range(reqs)]
    starts = [draw(st.integers(-2, 600)) for _ in range(reqs)]
    ratio = draw(st.sampled_from([4, 128]))
    width = draw(st.integers(1, 6))
    table = torch.randint(-1, 40, (max(reqs, 1), width), generator=torch.Generator().manual_seed(draw(st.integers(0, 99))))
    rows = draw(st.integers(0, 60))
    fmt = draw(st.sampled_from([1, 2]))
    dtype = draw(st.sampled_from([F32, BF16]))
    rope_rows = draw(st.integers(1, 800))
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + length)
    return dict(rope_cos=_rope(rope_rows, dtype=dtype), rope_sin=_rope(rope_rows, dtype=dtype) * 0.5,
                cu_seqlens=torch.tensor(cu, dtype=I32), start_pos=torch.tensor(starts, dtype=I32),
                kv_block_table=table.to(I32), kv_block_size=draw(st.sampled_from([16, 128])),
                slot_mapping_format=fmt, compress_ratio=ratio, num_compressed_tokens=rows, num_reqs_actual=reqs,
                compress_cos=torch.full((rows, 1, 1, 4), 7.0, dtype=dtype),
                compress_sin=torch.full((rows, 1, 1, 4), 7.0, dtype=dtype),
                slot_mapping=torch.full((rows,) if fmt == 1 else (rows, 2), 0x0BADF00D, dtype=I32))


COMPRESSOR = OpSpec(
    name="compressor_metadata",
    guard_examples=SLOW_KERNEL_GUARD_EXAMPLES,
    wrapper=specops.compressor_metadata,
    tensors=dict(rope_cos=Arg((BF16, F32), 2), rope_sin=Arg((BF16, F32), 2), cu_seqlens=Arg((I32,), 1),
                 start_pos=Arg((I32,), 1), kv_block_table=Arg((I32,), 2, row_stride=True),
                 compress_cos=Arg((BF16, F32), 4), compress_sin=Arg((BF16, F32), 4), slot_mapping=Arg((I32,), 2)),
    outputs=("compress_cos", "compress_sin", "slot_mapping"),
    valid_call=_compressor_valid,
    metadata_errors=_compressor_metadata,
    value_errors=lambda: [],  # every value has a defined row (invalid rows are cos 1, sin 0, slot -1)
    draw_call=_compressor_draw(),
    corruptions=(Corruption("negative block ids", lambda draw, call: _negative_block_ids(draw, call, "kv_block_table")),),
    scalars=("kv_block_size", "slot_mapping_format", "compress_ratio", "num_compressed_tokens", "num_reqs_actual"),
    allocation_sizes={"num_compressed_tokens": (2**30, *PAST_INT32)},  # 2^30 rows of rope_dim values
)
