"""The OpSpec of torch.ops.specops.dspark_swa_indices_multi (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import cp_batches

import specops

from ._corruptions import (
    _seed, _pick, _one_entry, _tokens_below_real, _negative, _negative_block_ids, _query_start_loc_past,
)
from ._spec import I32, INT32_MAX, Call, Arg, Bad, Corruption, OpSpec, PAST_INT32, bad, t32, stale
from .dspark_swa_indices import _dspark_valid, _dspark_visible, _dspark_rows, _dspark_request_with_tokens


def _dspark_multi_valid() -> Call:
    # _dspark_valid's batch for two groups: group 1 has block size 2 and window 1 (request 0 sees
    # positions 3..5, request 1 positions 6, 7).
    single = _dspark_valid()
    return dict(block_tables=[single["block_table"], torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]], dtype=I32)],
                query_start_loc=single["query_start_loc"], seq_lens=single["seq_lens"], windows=[2, 1],
                num_speculative_tokens=1, block_sizes=[4, 2], num_tokens=4, widths=[4, 3], cp_size=1, cp_rank=0,
                out=[stale(5, 1, 4), stale(4, 1, 3)], out_lens=[stale(5), stale(4)])


def _dspark_multi_metadata() -> list[Bad]:
    shared = stale(12)
    return [
        bad("one window for two tables", ("windows", "block_tables"), windows=[2]),
        bad("three widths for two tables", ("widths", "block_tables"), widths=[4, 3, 3]),
        bad("one block size for two tables", ("block_sizes", "block_tables"), block_sizes=[4]),
        bad("one output for two tables", ("out", "block_tables"), out=[stale(5, 1, 4)]),
        bad("one out_lens for two tables", ("out_lens", "block_tables"), out_lens=[stale(5)]),
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("seq_lens longer than R", ("seq_lens", "query_start_loc"), seq_lens=t32(6, 8, 1)),
        bad("block_tables[1] with fewer rows than R", "block_tables[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32), torch.tensor([[1, 2, 3, 4]], dtype=I32)]),
        bad("windows[1] -1", "windows[1]", windows=[2, -1]),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 2]),
        bad("widths[1] below windows[1] + num_speculative_tokens", "widths[1]", widths=[4, 1],
            out=[stale(5, 1, 4), stale(4, 1, 1)]),
        bad("num_speculative_tokens -1", "num_speculative_tokens", num_speculative_tokens=-1),
        bad("num_tokens -1", "num_tokens", num_tokens=-1),
        bad("num_tokens past int32", "num_tokens", num_tokens=INT32_MAX),
        bad("cp_size 0", "cp_size", cp_size=0),
        bad("cp_rank = cp_size", ("cp_rank", "cp_size"), cp_rank=1),
        bad("out[1] narrower than widths[1]", ("out[1]", "widths[1]"), out=[stale(5, 1, 4), stale(4, 1, 2)]),
        bad("out[0] with fewer rows than tokens", "out[0]", out=[stale(3, 1, 4), stale(4, 1, 3)]),
        bad("out_lens[1] with fewer entries than tokens", "out_lens[1]", out_lens=[stale(5), stale(3)]),
        bad("out_lens sharing memory", ("out_lens[1]", "out_lens[0]"), out_lens=[shared[:5], shared[4:8]]),
    ]


def _dspark_multi_values() -> list[Bad]:
    return [
        bad("negative seq_len", "seq_lens", seq_lens=t32(-1, 8)),
        bad("seq_len past block_tables[1]", "block_tables[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=I32), torch.tensor([[1, 2], [3, 4]], dtype=I32)]),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("num_tokens below query_start_loc[R]", ("num_tokens", "query_start_loc"), num_tokens=2),
        bad("widths[1] below what a request sees", "widths[1]", windows=[2, 3], widths=[4, 4],
            out=[stale(5, 1, 4), stale(4, 1, 4)]),
    ]


def _dspark_multi_as_groups(call: Call) -> list[Call]:
    """The single-op view of each group (what _dspark_visible and the corruptions read)."""
    return [dict(call, block_table=table, window=window, block_size=block_size, width=width)
            for table, window, block_size, width in zip(call["block_tables"], call["windows"], call["block_sizes"],
                                                        call["widths"])]


@st.composite
def _dspark_multi_draw(draw) -> Call:
    batch = draw(cp_batches(max_reqs=5, max_query_len=6, max_context=40, block_size=4))
    num_groups = draw(st.integers(1, 3))
    call = dict(query_start_loc=batch.query_start_loc, seq_lens=batch.seq_lens,
                num_speculative_tokens=draw(st.integers(0, 4)), num_tokens=batch.num_input_tokens,
                cp_size=batch.cp_size, cp_rank=_pick(draw, batch.cp_size), block_tables=[], windows=[],
                block_sizes=[], widths=[])
    generator = _seed(draw)
    for _ in range(num_groups):
        block_size = draw(st.sampled_from([2, 4]))
        cols = batch.block_table.size(1) * 4 // block_size
        call["block_tables"].append(
            torch.randint(0, 1 << 12, (batch.block_table.size(0), cols), dtype=I32, generator=generator))
        call["block_sizes"].append(block_size)
        call["windows"].append(draw(st.integers(0, 10)))
    for group in _dspark_multi_as_groups(dict(call, widths=[0] * num_groups)):
        least = max([1, group["window"] + call["num_speculative_tokens"], *_dspark_visible(group)])
        call["widths"].append(least + draw(st.integers(0, 3)))
    rows = _dspark_rows(call)
    call["out"] = [stale(rows + draw(st.integers(0, 2)), 1, width) for width in call["widths"]]
    call["out_lens"] = [stale(rows + draw(st.integers(0, 2))) for _ in call["widths"]]
    return call


def _dspark_multi_seq_len_past_a_table(draw, call: Call) -> bool:
    request = _dspark_request_with_tokens(draw, call)
    if request is None:
        return False
    covered = min(t.size(1) * b for t, b in zip(call["block_tables"], call["block_sizes"]))
    call["seq_lens"][request] = covered + draw(st.integers(1, 20))
    _dspark_multi_fit_widths(call)
    return True


def _dspark_multi_fit_widths(call: Call) -> None:
    """Widths (and outputs) that hold what every request sees, so that only one thing is wrong."""
    for g, group in enumerate(_dspark_multi_as_groups(call)):
        width = max([group["width"], *_dspark_visible(group)])
        if width != call["widths"][g]:
            call["widths"] = [width if i == g else w for i, w in enumerate(call["widths"])]
            call["out"] = [stale(call["out"][g].size(0), 1, width) if i == g else t for i, t in enumerate(call["out"])]


def _dspark_multi_negative_block_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _dspark_multi_width_below_visible(draw, call: Call) -> bool:
    g = _pick(draw, len(call["widths"]))
    width = max(1, call["windows"][g] + call["num_speculative_tokens"])
    call["widths"] = [width if i == g else w for i, w in enumerate(call["widths"])]
    call["out"] = [stale(call["out"][g].size(0), 1, width) if i == g else t for i, t in enumerate(call["out"])]
    return any(v > width for v in _dspark_visible(_dspark_multi_as_groups(call)[g]))


DSPARK_MULTI = OpSpec(
    name="dspark_swa_indices_multi",
    wrapper=specops.dspark_swa_indices_multi,
    tensors={"block_tables[0]": Arg((I32,), 2, row_stride=True), "block_tables[1]": Arg((I32,), 2, row_stride=True),
             "query_start_loc": Arg((I32,), 1), "seq_lens": Arg((I32,), 1),
             "out[0]": Arg((I32,), 3, row_stride=True), "out[1]": Arg((I32,), 3, row_stride=True),
             "out_lens[0]": Arg((I32,), 1), "out_lens[1]": Arg((I32,), 1)},
    outputs=("out[0]", "out[1]", "out_lens[0]", "out_lens[1]"),
    valid_call=_dspark_multi_valid,
    metadata_errors=_dspark_multi_metadata,
    value_errors=_dspark_multi_values,
    offsets=("query_start_loc",),
    draw_call=_dspark_multi_draw(),
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True,
                                                  where=_dspark_request_with_tokens)),
        Corruption("seq_len past a block table", _dspark_multi_seq_len_past_a_table),
        Corruption("negative block ids", _dspark_multi_negative_block_ids),
        Corruption("num_tokens below query_start_loc[R]", _tokens_below_real("num_tokens")),
        Corruption("a width below what a request sees", _dspark_multi_width_below_visible),
        Corruption("query_start_loc[R] past num_tokens", _query_start_loc_past(lambda call: call["num_tokens"]),
                   device="bounds"),
    ),
    guard_examples=25,
    scalars=("windows", "num_speculative_tokens", "block_sizes", "num_tokens", "widths", "cp_size", "cp_rank"),
    allocation_sizes={"widths": PAST_INT32},
)
