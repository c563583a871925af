"""The OpSpec of torch.ops.specops.apply_staged_writes (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import make_staged_writes

import specops

from ._corruptions import _seed, _pick, _one_entry, _decreasing
from ._spec import I32, I64, INT32_MAX, Call, Arg, Bad, Corruption, OpSpec, bad, t32, t64


def _apply_valid() -> Call:
    return dict(table=torch.full((3, 4), 9, dtype=I32), rows=t64(2, 0), starts=t32(1, 0), cu_lens=t32(0, 3, 4),
                values=t32(5, 6, 7, 8))


def _apply_metadata() -> list[Bad]:
    return [
        bad("starts shorter than rows", ("starts", "rows"), starts=t32(1)),
        bad("cu_lens without K + 1 entries", ("cu_lens", "rows"), cu_lens=t32(0, 3)),
    ]


def _apply_values() -> list[Bad]:
    return [
        bad("row past the table", "rows", rows=t64(3, 0)),
        bad("negative row", "rows", rows=t64(-1, 0)),
        bad("write past the last column", "starts", starts=t32(2, 0)),
        bad("negative start", "starts", starts=t32(-1, 0)),
        bad("cu_lens[0] != 0", "cu_lens", cu_lens=t32(1, 3, 4)),
        bad("cu_lens decreasing", "cu_lens", cu_lens=t32(0, 3, 2)),
        bad("cu_lens[K] past values", ("cu_lens", "values"), cu_lens=t32(0, 3, 5)),
        bad("table narrower than a write", ("starts", "table"), table=torch.full((3, 3), 9, dtype=I32)),
    ]


@st.composite
def _apply_draw(draw) -> Call:
    table_rows, table_cols = draw(st.integers(1, 6)), draw(st.integers(1, 8))
    generator = _seed(draw)
    rows, starts, cu_lens, values = make_staged_writes(generator, table_rows, table_cols)
    unused = torch.randint(1, 1 << 20, (draw(st.integers(0, 3)),), dtype=I32, generator=generator)
    table = torch.randint(1, 1 << 20, (table_rows, table_cols), dtype=I32, generator=generator)
    return dict(table=table, rows=rows.to(draw(st.sampled_from([I32, I64]))), starts=starts, cu_lens=cu_lens,
                values=torch.cat([values, unused]))


def _apply_start_out_of_range(draw, call: Call) -> bool:
    num_writes = call["rows"].numel()
    if num_writes == 0:
        return False
    k = _pick(draw, num_writes)
    length = int(call["cu_lens"][k + 1] - call["cu_lens"][k])
    call["starts"][k] = draw(st.sampled_from([-1, -(2**31), call["table"].size(1) - length + 1, INT32_MAX]))
    return True


def _apply_cu_lens_past_values(draw, call: Call) -> bool:
    call["cu_lens"][-1] = call["values"].numel() + draw(st.integers(1, 4))
    return True


APPLY = OpSpec(
    name="apply_staged_writes",
    wrapper=specops.apply_staged_writes,
    tensors=dict(table=Arg((I32,), 2, row_stride=True), rows=Arg((I32, I64), 1), starts=Arg((I32,), 1),
                 cu_lens=Arg((I32,), 1), values=Arg((I32,), 1)),
    outputs=("table",),
    valid_call=_apply_valid,
    metadata_errors=_apply_metadata,
    value_errors=_apply_values,
    offsets=("cu_lens",),
    draw_call=_apply_draw(),
    corruptions=(
        Corruption("row outside the table", _one_entry(
            "rows", lambda call: st.sampled_from([-1, -(2**31), call["table"].size(0), call["table"].size(0) + 7]),
            native_raises=True)),
        Corruption("start outside the row", _apply_start_out_of_range),
        Corruption("cu_lens[K] past values", _apply_cu_lens_past_values),
        # Write boundaries that go backwards: which values land where is unspecified.
        Corruption("cu_lens decreasing", _decreasing("cu_lens"), device="bounds"),
    ),
    allocation_sizes={},
)
