"""The OpSpec of torch.ops.specops.gather_block_tables_multi (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import make_block_source

import specops

from ._corruptions import _seed, _pick
from ._spec import I32, I64, INT32_MAX, Call, Arg, Bad, Corruption, OpSpec, bad, t32, t64, stale


def _gather_multi_valid() -> Call:
    # Group 0 is gather_block_tables' valid call (a sliding window: row 1's entries below
    # (9 - 3) // 2 = 3 are NULL); group 1 a full-attention group with a fourth source row.
    return dict(src_block_tables=[torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], dtype=I32),
                                  torch.tensor([[21, 22], [23, 24], [25, 26], [27, 28]], dtype=I32)],
                num_blocks=[t32(2, 4, 0), t32(1, 2, 2, 1)], idx_mapping=t64(1, -1, 0), out=[stale(5, 4), stale(4, 3)],
                num_reqs_padded=4, num_computed_tokens=t32(0, 9, 4, 7), sliding_window_reach=[3, 0],
                block_sizes=[2, 0])


def _gather_multi_metadata() -> list[Bad]:
    shared = stale(9, 4)
    return [
        bad("one output for two tables", ("out", "src_block_tables"), out=[stale(5, 4)]),
        bad("three counts for two tables", ("num_blocks", "src_block_tables"),
            num_blocks=[t32(2, 4, 0), t32(1, 2, 2, 1), t32(0)]),
        bad("one reach for two tables", ("sliding_window_reach", "src_block_tables"), sliding_window_reach=[3]),
        bad("one block size for two tables", ("block_sizes", "src_block_tables"), block_sizes=[2]),
        bad("num_blocks[1] shorter than its table", ("num_blocks[1]", "src_block_tables[1]"),
            num_blocks=[t32(2, 4, 0), t32(1, 2, 2)]),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=2),
        bad("num_reqs_padded > out[1] rows", ("num_reqs_padded", "out[1]"), num_reqs_padded=5),
        bad("num_computed_tokens shorter than table 1", ("num_computed_tokens", "src_block_tables[1]"),
            num_computed_tokens=t32(0, 9, 4)),
        bad("sliding_window_reach[0] -1", "sliding_window_reach[0]", sliding_window_reach=[-1, 0]),
        bad("sliding_window_reach[1] past int32", "sliding_window_reach[1]", sliding_window_reach=[3, 2**31]),
        bad("a reach without a block size", ("block_sizes[0]", "sliding_window_reach[0]"), block_sizes=[0, 0]),
        bad("block_sizes[1] -1", "block_sizes[1]", block_sizes=[2, -1]),
        bad("block_sizes[0] past int32", "block_sizes[0]", block_sizes=[2**31, 0]),
        bad("outputs sharing memory", ("out[1]", "out[0]"), out=[shared[:5], shared[4:8, :3]]),
    ]


def _gather_multi_values() -> list[Bad]:
    return [
        bad("idx_mapping past table 0 only", ("idx_mapping", "src_block_tables[0]"), idx_mapping=t64(3, -1, 0)),
        bad("num_blocks[1] past the columns", "num_blocks[1]", num_blocks=[t32(2, 4, 0), t32(1, 3, 2, 1)]),
        bad("negative num_blocks[0]", "num_blocks[0]", num_blocks=[t32(-1, 4, 0), t32(1, 2, 2, 1)]),
        bad("out[0] narrower than a row's blocks", ("num_blocks[0]", "out[0]"), out=[stale(5, 3), stale(4, 3)]),
        bad("negative num_computed_tokens", "num_computed_tokens", num_computed_tokens=t32(0, -9, 4, 7)),
    ]


@st.composite
def _gather_multi_draw(draw) -> Call:
    generator = _seed(draw)
    num_groups = draw(st.integers(1, 3))
    rows = draw(st.integers(1, 5))  # every table has at least these rows: idx_mapping points below
    num_reqs = draw(st.integers(0, 6))
    padded = num_reqs + draw(st.integers(0, 3))
    call = dict(src_block_tables=[], num_blocks=[], out=[], sliding_window_reach=[], block_sizes=[],
                idx_mapping=torch.randint(-1, rows, (num_reqs,), generator=generator).to(
                    draw(st.sampled_from([I32, I64]))),
                num_reqs_padded=padded)
    for _ in range(num_groups):
        cols, out_cols = draw(st.integers(1, 6)), draw(st.integers(1, 8))
        table, _ = make_block_source(generator, rows + draw(st.integers(0, 2)), cols)
        call["src_block_tables"].append(table)
        call["num_blocks"].append(
            torch.randint(0, min(cols, out_cols) + 1, (table.size(0),), dtype=I32, generator=generator))
        call["out"].append(stale(padded + draw(st.integers(0, 2)), out_cols))
        sliding = draw(st.booleans())
        call["sliding_window_reach"].append(draw(st.sampled_from([1, 5])) if sliding else 0)
        call["block_sizes"].append(draw(st.sampled_from([1, 4])) if sliding else draw(st.sampled_from([0, 16])))
    if draw(st.booleans()):
        most_rows = max(table.size(0) for table in call["src_block_tables"])
        call["num_computed_tokens"] = torch.randint(0, 32, (most_rows,), dtype=I32, generator=generator)
    return call


def _gather_multi_row_past_a_table(draw, call: Call) -> bool:
    """A batch row mapped past the shortest table: NULL there on the device, rejected natively."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    fewest = min(table.size(0) for table in call["src_block_tables"])
    call["idx_mapping"][_pick(draw, num_reqs)] = fewest + draw(st.integers(0, 5))
    return True


def _gather_multi_negative_row(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs:
        call["idx_mapping"][_pick(draw, num_reqs)] = draw(st.integers(-1000, -1))
    return False


def _gather_multi_count_out_of_range(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    g = _pick(draw, len(call["src_block_tables"]))
    row = _pick(draw, min(table.size(0) for table in call["src_block_tables"]))
    call["idx_mapping"][_pick(draw, num_reqs)] = row
    most = min(call["src_block_tables"][g].size(1), call["out"][g].size(1))
    call["num_blocks"][g][row] = draw(st.sampled_from([most + 1, most + 100, INT32_MAX, -1, -INT32_MAX]))
    return True


def _gather_multi_negative_first_position(draw, call: Call) -> bool:
    """A mapped row whose first position is negative: the host op rejects it where a group masks."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0 or call.get("num_computed_tokens") is None:
        return False
    row = _pick(draw, min(table.size(0) for table in call["src_block_tables"]))
    call["idx_mapping"][_pick(draw, num_reqs)] = row
    call["num_computed_tokens"][row] = draw(st.sampled_from([-1, -7, -INT32_MAX - 1]))
    return any(reach > 0 for reach in call["sliding_window_reach"])


GATHER_MULTI = OpSpec(
    name="gather_block_tables_multi",
    wrapper=specops.gather_block_tables_multi,
    tensors={"src_block_tables[0]": Arg((I32,), 2, row_stride=True),
             "src_block_tables[1]": Arg((I32,), 2, row_stride=True),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1), "idx_mapping": Arg((I32, I64), 1),
             "out[0]": Arg((I32,), 2, row_stride=True), "out[1]": Arg((I32,), 2, row_stride=True),
             "num_computed_tokens": Arg((I32,), 1)},
    outputs=("out[0]", "out[1]"),
    valid_call=_gather_multi_valid,
    metadata_errors=_gather_multi_metadata,
    value_errors=_gather_multi_values,
    draw_call=_gather_multi_draw(),
    corruptions=(
        Corruption("idx_mapping past a table", _gather_multi_row_past_a_table),
        Corruption("negative idx_mapping", _gather_multi_negative_row),
        Corruption("num_blocks outside [0, columns]", _gather_multi_count_out_of_range),
        Corruption("negative num_computed_tokens", _gather_multi_negative_first_position),
    ),
    scalars=("num_reqs_padded", "sliding_window_reach", "block_sizes"),
    allocation_sizes={},
)
