"""The OpSpec of torch.ops.specops.gather_block_tables (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import make_block_source

import specops

from ._corruptions import _seed, _pick, _one_entry, _negative
from ._spec import I32, I64, INT32_MAX, Call, Arg, Bad, Corruption, OpSpec, bad, t32, t64, stale


def _gather_valid() -> Call:
    # Row 1's first scheduled position is 9: with reach 3 and block_size 2, its entries below
    # (9 - 3) // 2 = 3 are NULL.
    return dict(src_block_table=torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], dtype=I32),
                num_blocks=t32(2, 4, 0), idx_mapping=t64(1, -1, 0), out=stale(5, 4), num_reqs_padded=4,
                num_computed_tokens=t32(0, 9, 4), sliding_window_reach=3, block_size=2)


def _gather_metadata() -> list[Bad]:
    return [
        bad("num_blocks shorter than the table", ("num_blocks", "src_block_table"), num_blocks=t32(2, 4)),
        bad("out with fewer rows than R", ("num_reqs_padded", "out"), out=stale(2, 4), num_reqs_padded=None),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=2),
        bad("num_reqs_padded > out rows", ("num_reqs_padded", "out"), num_reqs_padded=6),
        bad("num_computed_tokens shorter than the table", ("num_computed_tokens", "src_block_table"),
            num_computed_tokens=t32(0, 9)),
        bad("sliding_window_reach -1", "sliding_window_reach", sliding_window_reach=-1),
        bad("sliding_window_reach past int32", "sliding_window_reach", sliding_window_reach=2**31),
        bad("a reach without block_size", ("block_size", "sliding_window_reach"), block_size=None),
        bad("block_size 0", "block_size", block_size=0),
        bad("block_size past int32", "block_size", block_size=2**31),
    ]


def _gather_values() -> list[Bad]:
    return [
        bad("idx_mapping past the table", "idx_mapping", idx_mapping=t64(3, -1, 0)),
        bad("num_blocks past the columns", "num_blocks", num_blocks=t32(2, 5, 0)),
        bad("negative num_blocks", "num_blocks", num_blocks=t32(-1, 4, 0)),
        bad("out narrower than a row's blocks", ("num_blocks", "out"), out=stale(5, 3)),
        bad("negative num_computed_tokens", "num_computed_tokens", num_computed_tokens=t32(0, -9, 4)),
    ]


@st.composite
def _gather_draw(draw) -> Call:
    src_rows, cols = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    out_cols = draw(st.integers(1, 8))
    num_reqs = draw(st.integers(0, 6))
    generator = _seed(draw)
    table, _ = make_block_source(generator, src_rows, cols)
    num_blocks = torch.randint(0, min(cols, out_cols) + 1, (src_rows,), dtype=I32, generator=generator)
    idx_mapping = torch.randint(-1, src_rows, (num_reqs,), generator=generator).to(draw(st.sampled_from([I32, I64])))
    padded = num_reqs + draw(st.integers(0, 3))
    call = dict(src_block_table=table, num_blocks=num_blocks, idx_mapping=idx_mapping,
                out=stale(padded + draw(st.integers(0, 2)), out_cols), num_reqs_padded=padded)
    if draw(st.booleans()):  # a sliding-window group
        block_size = draw(st.sampled_from([1, 4]))
        call.update(num_computed_tokens=torch.randint(0, 8 * block_size, (src_rows,), dtype=I32, generator=generator),
                    sliding_window_reach=draw(st.sampled_from([0, 1, 5])), block_size=block_size)
    return call


def _gather_count_out_of_range(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    request = _pick(draw, num_reqs)
    row = _pick(draw, call["src_block_table"].size(0))
    call["idx_mapping"][request] = row
    most = min(call["src_block_table"].size(1), call["out"].size(1))
    call["num_blocks"][row] = draw(st.sampled_from([most + 1, most + 100, INT32_MAX, -1, -INT32_MAX]))
    return True


def _gather_negative_first_position(draw, call: Call) -> bool:
    """A mapped row whose first position is negative: the host op rejects it where it masks."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0 or call.get("num_computed_tokens") is None:
        return False
    request = _pick(draw, num_reqs)
    row = _pick(draw, call["src_block_table"].size(0))
    call["idx_mapping"][request] = row
    call["num_computed_tokens"][row] = draw(st.sampled_from([-1, -7, -INT32_MAX - 1]))
    return call["sliding_window_reach"] > 0


GATHER = OpSpec(
    name="gather_block_tables",
    wrapper=specops.gather_block_tables,
    tensors=dict(src_block_table=Arg((I32,), 2, row_stride=True), num_blocks=Arg((I32,), 1),
                 idx_mapping=Arg((I32, I64), 1), out=Arg((I32,), 2, row_stride=True),
                 num_computed_tokens=Arg((I32,), 1)),
    outputs=("out",),
    valid_call=_gather_valid,
    metadata_errors=_gather_metadata,
    value_errors=_gather_values,
    draw_call=_gather_draw(),
    corruptions=(
        Corruption("idx_mapping past the table", _one_entry(
            "idx_mapping", lambda call: st.integers(0, 5).map(lambda k: call["src_block_table"].size(0) + k),
            native_raises=True)),
        Corruption("negative idx_mapping", _one_entry("idx_mapping", _negative, native_raises=False)),
        Corruption("num_blocks outside [0, columns]", _gather_count_out_of_range),
        Corruption("negative num_computed_tokens", _gather_negative_first_position),
    ),
    allocation_sizes={},
)
