"""The OpSpec of torch.ops.specops.cp_local_metadata (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import cp_batches

import specops

from ._corruptions import _pick, _one_entry, _tokens_below_real, _negative
from ._spec import I32, I64, INT32_MAX, Call, Arg, Bad, Corruption, OpSpec, bad, t32, stale


def _cp_valid() -> Call:
    return dict(query_start_loc=t32(0, 2, 3, 7), seq_lens=t32(5, 3, 10), num_input_tokens=8, cp_size=2, cp_rank=1,
                causal=True, local_query_start_loc=stale(5), local_seq_lens=stale(4), start_pos=stale(4),
                query_start_loc_cpu=t32(0, 2, 3, 7), seq_lens_cpu=t32(5, 3, 10))


def _cp_metadata() -> list[Bad]:
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("seq_lens shorter than R", ("seq_lens", "query_start_loc"), seq_lens=t32(5, 3)),
        bad("local_query_start_loc shorter than R + 1", "local_query_start_loc", local_query_start_loc=stale(3)),
        bad("local_seq_lens shorter than R", "local_seq_lens", local_seq_lens=stale(2)),
        bad("start_pos shorter than R", "start_pos", start_pos=stale(2)),
        bad("query_start_loc_cpu of another length", "query_start_loc_cpu", query_start_loc_cpu=t32(0, 2, 3)),
        bad("seq_lens_cpu of another length", "seq_lens_cpu", seq_lens_cpu=t32(5, 3)),
        bad("num_input_tokens -1", "num_input_tokens", num_input_tokens=-1),
        bad("num_input_tokens past int32", "num_input_tokens", num_input_tokens=INT32_MAX),
        bad("cp_size 0", "cp_size", cp_size=0),
        bad("cp_rank = cp_size", ("cp_rank", "cp_size"), cp_rank=2),
        bad("cp_rank -1", "cp_rank", cp_rank=-1),
    ]


def _cp_values() -> list[Bad]:
    return [
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2, 7)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3, 7)),
        bad("negative seq_len", "seq_lens", seq_lens=t32(5, -1, 10)),
        bad("num_input_tokens below query_start_loc[R]", ("num_input_tokens", "query_start_loc"), num_input_tokens=6),
    ]


@st.composite
def _cp_draw(draw) -> Call:
    batch = draw(cp_batches(max_reqs=6, max_query_len=8, max_context=40))
    num_reqs = batch.num_reqs
    return dict(query_start_loc=batch.query_start_loc, seq_lens=batch.seq_lens,
                num_input_tokens=batch.num_input_tokens, cp_size=batch.cp_size, cp_rank=_pick(draw, batch.cp_size),
                causal=draw(st.booleans()),
                local_query_start_loc=stale(num_reqs + 1 + draw(st.integers(0, 2))),
                local_seq_lens=stale(num_reqs + draw(st.integers(0, 2))),
                start_pos=stale(num_reqs + draw(st.integers(0, 2))))


def _cp_query_start_loc_out_of_order(draw, call: Call) -> bool:
    qsl = call["query_start_loc"]
    k = _pick(draw, qsl.numel())
    qsl[k] = qsl[k] + draw(st.sampled_from([-3, -1, 1, 5]))
    # Not decreasing anywhere, still starting at 0 and within num_input_tokens: the values are
    # valid after all.
    return bool(qsl[0] != 0 or (qsl[1:] < qsl[:-1]).any() or qsl[-1] > call["num_input_tokens"])


CP_LOCAL = OpSpec(
    name="cp_local_metadata",
    wrapper=specops.cp_local_metadata,
    tensors=dict(query_start_loc=Arg((I32,), 1), seq_lens=Arg((I32,), 1), local_query_start_loc=Arg((I32,), 1),
                 local_seq_lens=Arg((I32,), 1), start_pos=Arg((I32,), 1), query_start_loc_cpu=Arg((I32,), 1),
                 seq_lens_cpu=Arg((I32, I64), 1)),
    outputs=("local_query_start_loc", "local_seq_lens", "start_pos"),
    valid_call=_cp_valid,
    metadata_errors=_cp_metadata,
    value_errors=_cp_values,
    draw_call=_cp_draw(),
    host_tensors=("query_start_loc_cpu", "seq_lens_cpu"),
    reads_first=("query_start_loc_cpu", "seq_lens_cpu"),  # the host maxima are computed before the op
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True)),
        Corruption("query_start_loc out of order", _cp_query_start_loc_out_of_order),
        Corruption("num_input_tokens below query_start_loc[R]", _tokens_below_real("num_input_tokens")),
    ),
    allocation_sizes={},
)
