"""The OpSpec of torch.ops.specops.correct_optimistic_seq_lens (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

from hypothesis import strategies as st

import specops

from ._corruptions import _extreme
from ._spec import I32, I64, Call, Arg, Corruption, OpSpec, bad, t32
from .correct_num_computed_tokens import _correction_draw


def _seq_lens_valid() -> Call:
    return dict(seq_lens_cpu=t32(5, 6), prev_positions=t32(1, 0), valid_sampled_token_count=t32(1, 1),
                prev_num_draft_tokens=t32(1, 1))


@st.composite
def _seq_lens_draw(draw) -> Call:
    call = draw(_correction_draw())
    # int32, or a runner's int64 host copy.
    seq_lens = call["cpu_num_computed_tokens"].to(draw(st.sampled_from([I32, I64])))
    return dict(seq_lens_cpu=seq_lens, prev_positions=call["prev_positions"],
                valid_sampled_token_count=call["valid_sampled_token_count"],
                prev_num_draft_tokens=call["prev_num_draft_tokens"])


CORRECT_SEQ_LENS = OpSpec(
    name="correct_optimistic_seq_lens",
    wrapper=specops.correct_optimistic_seq_lens,
    tensors=dict(seq_lens_cpu=Arg((I32, I64), 1), prev_positions=Arg((I32, I64), 1),
                 valid_sampled_token_count=Arg((I32, I64), 1), prev_num_draft_tokens=Arg((I32,), 1)),
    outputs=("seq_lens_cpu",),
    valid_call=_seq_lens_valid,
    metadata_errors=lambda: [bad("seq_lens_cpu shorter than n", ("seq_lens_cpu", "prev_positions"),
                                 seq_lens_cpu=t32(5))],
    value_errors=lambda: [],
    draw_call=_seq_lens_draw(),
    reads_first=("prev_positions", "valid_sampled_token_count", "prev_num_draft_tokens"),
    corruptions=(
        Corruption("prev_positions at the dtype's extremes", _extreme("prev_positions")),
        Corruption("counts at int32 extremes", _extreme("seq_lens_cpu", "valid_sampled_token_count",
                                                         "prev_num_draft_tokens")),
    ),
    allocation_sizes={},
)
