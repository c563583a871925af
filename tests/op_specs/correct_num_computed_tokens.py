"""The OpSpec of torch.ops.specops.correct_num_computed_tokens (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

from hypothesis import strategies as st
from strategies import make_correction_inputs

import specops

from ._corruptions import _seed, _extreme
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, bad, bad_with, t32


CORRECTION_INPUTS = ("prev_positions", "valid_sampled_token_count", "prev_num_draft_tokens", "cpu_num_computed_tokens")
CORRECTION_TENSORS = dict(num_computed_tokens=Arg((I32,), 1), num_accepted_tokens=Arg((I32,), 1),
                          prev_positions=Arg((I32, I64), 1), valid_sampled_token_count=Arg((I32, I64), 1),
                          prev_num_draft_tokens=Arg((I32,), 1), cpu_num_computed_tokens=Arg((I32, I64), 1))


def _correction_valid() -> Call:
    return dict(num_computed_tokens=t32(10, 20, 30), num_accepted_tokens=t32(0, 0, 0), prev_positions=t32(1, 0),
                valid_sampled_token_count=t32(1, 2), prev_num_draft_tokens=t32(1, 1), cpu_num_computed_tokens=t32(5, 6))


def _correction_metadata() -> list[Bad]:
    return [
        bad("num_computed_tokens shorter than n", ("num_computed_tokens", "prev_positions"),
            num_computed_tokens=t32(10)),
        bad("num_accepted_tokens shorter than n", ("num_accepted_tokens", "prev_positions"),
            num_accepted_tokens=t32(0)),
        bad("cpu_num_computed_tokens shorter than n", ("cpu_num_computed_tokens", "prev_positions"),
            cpu_num_computed_tokens=t32(5)),
        bad_with("outputs sharing memory", ("num_accepted_tokens", "num_computed_tokens"),
                 lambda call: call.update(num_accepted_tokens=call["num_computed_tokens"][1:])),
    ]


@st.composite
def _correction_draw(draw) -> Call:
    inputs = make_correction_inputs(_seed(draw), num_rows=draw(st.integers(0, 8)),
                                    num_prev_rows=draw(st.integers(0, 8)), extra_buffer_rows=draw(st.integers(0, 2)),
                                    length_jitter=2, prev_dtype=draw(st.sampled_from([I32, I64])),
                                    # vllm-ascend's int64 valid counts; an int64 host copy of the counts.
                                    valid_dtype=draw(st.sampled_from([I32, I64])),
                                    host_dtype=draw(st.sampled_from([I32, I64])))
    return dict(zip(CORRECTION_TENSORS, inputs.args()))


CORRECT_COUNTS = OpSpec(
    name="correct_num_computed_tokens",
    wrapper=specops.correct_num_computed_tokens,
    tensors=CORRECTION_TENSORS,
    outputs=("num_computed_tokens", "num_accepted_tokens"),
    valid_call=_correction_valid,
    metadata_errors=_correction_metadata,
    value_errors=lambda: [],  # any row index is valid: out of range, a row takes the host value
    draw_call=_correction_draw(),
    reads_first=CORRECTION_INPUTS,
    corruptions=(
        Corruption("prev_positions at the dtype's extremes", _extreme("prev_positions")),
        Corruption("counts at int32 extremes", _extreme("num_computed_tokens", "valid_sampled_token_count",
                                                         "prev_num_draft_tokens", "cpu_num_computed_tokens")),
    ),
    allocation_sizes={},
)
