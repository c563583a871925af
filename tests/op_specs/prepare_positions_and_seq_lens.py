"""The OpSpec of torch.ops.specops.prepare_positions_and_seq_lens (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import query_start_loc_of

import specops

from ._corruptions import _seed, _pick, _with_idx_mapping, _decreasing, _extreme
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, PAST_INT32, bad, bad_with, t32, stale


def _positions_valid() -> Call:
    # Request-indexed counts: request 0 reads row 1 (positions 9, 10), request 1 row 0 (4).
    return dict(num_computed_tokens=t32(4, 9), query_start_loc=t32(0, 2, 3), positions=stale(4, dtype=I64),
                seq_lens=stale(3), num_tokens_padded=4, num_reqs_padded=3, idx_mapping=t32(1, 0))


def _positions_metadata() -> list[Bad]:
    shared = torch.zeros(8, dtype=I32)
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("num_computed_tokens shorter than R", ("num_computed_tokens", "query_start_loc"),
            num_computed_tokens=t32(4), idx_mapping=None),
        bad("idx_mapping of another length than R", ("idx_mapping", "query_start_loc"), idx_mapping=t32(1)),
        bad("num_tokens_padded -1", "num_tokens_padded", num_tokens_padded=-1),
        bad("num_tokens_padded past positions", ("num_tokens_padded", "positions"), num_tokens_padded=5),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=1),
        bad("num_reqs_padded past seq_lens", ("num_reqs_padded", "seq_lens"), num_reqs_padded=4),
        bad("outputs sharing memory", ("positions", "seq_lens"), positions=shared[:4], seq_lens=shared[3:6]),
        bad_with("an output sharing an input", ("seq_lens", "num_computed_tokens"),
                 lambda call: call.update(seq_lens=call["num_computed_tokens"], num_reqs_padded=2)),
    ]


def _positions_values() -> list[Bad]:
    return [
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("query_start_loc[R] past num_tokens_padded", ("num_tokens_padded", "query_start_loc"),
            query_start_loc=t32(0, 2, 5)),
        bad("positions shorter than T", ("num_tokens_padded", "positions"), positions=stale(2, dtype=I64),
            num_tokens_padded=None),
        bad("idx_mapping past num_computed_tokens", ("idx_mapping", "num_computed_tokens"), idx_mapping=t32(2, 0)),
    ]


@st.composite
def _positions_draw(draw) -> Call:
    query_lens = draw(st.lists(st.integers(0, 5), max_size=6))
    generator = _seed(draw)
    num_reqs, num_tokens = len(query_lens), sum(query_lens)
    tokens_padded, reqs_padded = num_tokens + draw(st.integers(0, 3)), num_reqs + draw(st.integers(0, 2))
    num_counts = num_reqs + draw(st.integers(0, 2))
    idx_mapping = None
    if num_counts and draw(st.booleans()):  # request-indexed counts
        idx_mapping = torch.randint(-1, num_counts, (num_reqs,), generator=generator).to(draw(st.sampled_from([I32, I64])))
    return dict(num_computed_tokens=torch.randint(0, 1000, (num_counts,), dtype=I32, generator=generator),
                query_start_loc=query_start_loc_of(query_lens),
                positions=stale(tokens_padded + draw(st.integers(0, 2)), dtype=draw(st.sampled_from([I64, I32]))),
                seq_lens=stale(reqs_padded + draw(st.integers(0, 2))), num_tokens_padded=tokens_padded,
                num_reqs_padded=reqs_padded, idx_mapping=idx_mapping)


def _positions_tokens_past_padding(draw, call: Call) -> bool:
    """More tokens than the padded extent: the device kernels write the first num_tokens_padded."""
    qsl = call["query_start_loc"]
    qsl[-1] = max(int(qsl[-1]), call["num_tokens_padded"]) + draw(st.integers(1, 3))
    return True


def _positions_idx_past_counts(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs == 0:
        return False
    rows = call["num_computed_tokens"].numel()
    _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = rows + draw(st.integers(0, 5))
    return True


PREPARE_POSITIONS = OpSpec(
    name="prepare_positions_and_seq_lens",
    wrapper=specops.prepare_positions_and_seq_lens,
    tensors=dict(num_computed_tokens=Arg((I32,), 1), query_start_loc=Arg((I32,), 1), positions=Arg((I64, I32), 1),
                 seq_lens=Arg((I32,), 1), idx_mapping=Arg((I32, I64), 1)),
    outputs=("positions", "seq_lens"),
    valid_call=_positions_valid,
    metadata_errors=_positions_metadata,
    value_errors=_positions_values,
    offsets=("query_start_loc",),
    draw_call=_positions_draw(),
    corruptions=(
        Corruption("query_start_loc[R] past num_tokens_padded", _positions_tokens_past_padding),
        Corruption("counts at int32 extremes", _extreme("num_computed_tokens")),
        Corruption("query_start_loc decreasing", _decreasing("query_start_loc"), device="bounds"),
        Corruption("idx_mapping past num_computed_tokens", _positions_idx_past_counts),
    ),
    allocation_sizes={"num_tokens_padded": PAST_INT32, "num_reqs_padded": PAST_INT32},
)
