"""The OpSpec of torch.ops.specops.dspark_swa_indices (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import cp_batches

import specops

from ._corruptions import _pick, _one_entry, _tokens_below_real, _negative, _negative_block_ids, _query_start_loc_past
from ._spec import I32, INT32_MAX, Call, Arg, Bad, Corruption, OpSpec, PAST_INT32, bad, t32, stale


def _dspark_valid() -> Call:
    # Request 0: 2 tokens, seq_len 6, window 2 -> positions 2..5 (visible 4); request 1: 1 token,
    # seq_len 8 -> positions 5..7. block_size 4, two blocks per row: positions < 8.
    return dict(block_table=torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=I32), query_start_loc=t32(0, 2, 3),
                seq_lens=t32(6, 8), window=2, num_speculative_tokens=1, block_size=4, num_tokens=4, width=4,
                cp_size=1, cp_rank=0, out=stale(5, 1, 4), out_lens=stale(5))


def _dspark_metadata() -> list[Bad]:
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("block_table with fewer rows than R", "block_table", block_table=torch.tensor([[1, 2]], dtype=I32)),
        bad("seq_lens longer than R", ("seq_lens", "query_start_loc"), seq_lens=t32(6, 8, 1)),
        bad("out with fewer rows than tokens", "out", out=stale(3, 1, 4)),
        bad("out narrower than width", ("out", "width"), out=stale(5, 1, 3)),
        bad("out with 2 in its middle dimension", "out", out=stale(5, 2, 4)),
        bad("out_lens with fewer entries than tokens", "out_lens", out_lens=stale(3)),
        bad("window -1", "window", window=-1),
        bad("num_speculative_tokens -1", "num_speculative_tokens", num_speculative_tokens=-1),
        bad("block_size 0", "block_size", block_size=0),
        bad("width below window + num_speculative_tokens", "width", width=2, out=stale(5, 1, 2)),
        bad("num_tokens -1", "num_tokens", num_tokens=-1),
        bad("num_tokens past int32", "num_tokens", num_tokens=INT32_MAX),
        bad("cp_size 0", "cp_size", cp_size=0),
        bad("cp_rank = cp_size", ("cp_rank", "cp_size"), cp_rank=1),
    ]


def _dspark_values() -> list[Bad]:
    return [
        bad("negative seq_len", "seq_lens", seq_lens=t32(-1, 8)),
        bad("seq_len past the block table", "seq_lens", seq_lens=t32(6, 9)),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("num_tokens below query_start_loc[R]", ("num_tokens", "query_start_loc"), num_tokens=2),
        bad("width below what a request sees", "width", width=3, out=stale(5, 1, 3)),
        # Request 0 sees positions 2..5: block 2^29 of 4 tokens puts them past 2^31 - 1.
        bad("a slot past int32", ("out", "block_table"), block_table=torch.tensor([[2**29, 2], [3, 4], [5, 6]], dtype=I32)),
    ]


def _dspark_visible(call: Call) -> list[int]:
    """Entries each request with tokens sees (what the width must hold)."""
    qsl, seq_lens = call["query_start_loc"].tolist(), call["seq_lens"].tolist()
    visible = []
    for r, seq_len in enumerate(seq_lens):
        query_len = qsl[r + 1] - qsl[r]
        if query_len > 0:
            visible.append(seq_len - max(seq_len - query_len - call["window"], 0))
    return visible


def _dspark_rows(call: Call) -> int:
    return -(-call["num_tokens"] // call["cp_size"])


@st.composite
def _dspark_draw(draw) -> Call:
    batch = draw(cp_batches(max_reqs=5, max_query_len=6, max_context=40, block_size=4))
    call = dict(block_table=batch.block_table, query_start_loc=batch.query_start_loc, seq_lens=batch.seq_lens,
                window=draw(st.integers(0, 10)), num_speculative_tokens=draw(st.integers(0, 4)), block_size=4,
                num_tokens=batch.num_input_tokens, cp_size=batch.cp_size, cp_rank=_pick(draw, batch.cp_size))
    least = max([1, call["window"] + call["num_speculative_tokens"], *_dspark_visible(call)])
    call["width"] = least + draw(st.integers(0, 3))
    rows = _dspark_rows(call) + draw(st.integers(0, 2))
    call.update(out=stale(rows, 1, call["width"]), out_lens=stale(rows))
    return call


def _dspark_request_with_tokens(draw, call: Call) -> int | None:
    qsl = call["query_start_loc"]
    with_tokens = (qsl[1:] > qsl[:-1]).nonzero().flatten().tolist()
    return draw(st.sampled_from(with_tokens)) if with_tokens else None


def _dspark_seq_len_past_table(draw, call: Call) -> bool:
    request = _dspark_request_with_tokens(draw, call)
    if request is None:
        return False
    covered = call["block_table"].size(1) * call["block_size"]
    call["seq_lens"][request] = covered + draw(st.integers(1, 20))
    # The width follows, or the request would also see more than the width holds.
    call["width"] = max([call["width"], *_dspark_visible(call)])
    call.update(out=stale(call["out"].size(0), 1, call["width"]))
    return True


def _dspark_width_below_visible(draw, call: Call) -> bool:
    call["width"] = max(1, call["window"] + call["num_speculative_tokens"])
    call.update(out=stale(call["out"].size(0), 1, call["width"]))
    return any(v > call["width"] for v in _dspark_visible(call))


DSPARK = OpSpec(
    name="dspark_swa_indices",
    wrapper=specops.dspark_swa_indices,
    tensors=dict(block_table=Arg((I32,), 2, row_stride=True), query_start_loc=Arg((I32,), 1),
                 seq_lens=Arg((I32,), 1), out=Arg((I32,), 3, row_stride=True), out_lens=Arg((I32,), 1)),
    outputs=("out", "out_lens"),
    valid_call=_dspark_valid,
    metadata_errors=_dspark_metadata,
    value_errors=_dspark_values,
    offsets=("query_start_loc",),
    draw_call=_dspark_draw(),
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True,
                                                  where=_dspark_request_with_tokens)),
        Corruption("seq_len past the block table", _dspark_seq_len_past_table),
        Corruption("negative block ids", _negative_block_ids),
        Corruption("num_tokens below query_start_loc[R]", _tokens_below_real("num_tokens")),
        Corruption("width below what a request sees", _dspark_width_below_visible),
        Corruption("query_start_loc[R] past num_tokens", _query_start_loc_past(lambda call: call["num_tokens"]),
                   device="bounds"),
    ),
    allocation_sizes={"width": PAST_INT32},
)
