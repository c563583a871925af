"""The OpSpec of torch.ops.specops.dcp_local_seq_lens (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _pick, _one_entry, _negative
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, bad, bad_with, t32, stale


def _dcp_valid() -> Call:
    return dict(seq_lens=t32(1, 4, 5, 9), cp_world_size=2, cp_rank=1, cp_interleave=4, out=stale(6))


def _dcp_metadata() -> list[Bad]:
    return [
        bad("out shorter than R", "out", out=stale(3)),
        bad("out of another dtype than seq_lens", ("out", "seq_lens"), out=stale(6, dtype=I64)),
        bad_with("out sharing seq_lens", ("out", "seq_lens"), lambda call: call.update(out=call["seq_lens"])),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_rank = cp_world_size", ("cp_rank", "cp_world_size"), cp_rank=2),
        bad("cp_rank -1", "cp_rank", cp_rank=-1),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("a round past int32", ("cp_world_size", "cp_interleave"), cp_interleave=2**30),
    ]


@st.composite
def _dcp_draw(draw) -> Call:
    dtype = draw(st.sampled_from([I32, I64]))
    seq_lens = torch.tensor(draw(st.lists(st.integers(0, 300), max_size=8)), dtype=dtype)
    world = draw(st.integers(1, 4))
    return dict(seq_lens=seq_lens, cp_world_size=world, cp_rank=_pick(draw, world),
                cp_interleave=draw(st.sampled_from([1, 2, 16])),
                out=stale(seq_lens.numel() + draw(st.integers(0, 2)), dtype=dtype))


def _dcp_huge_lengths(draw, call: Call) -> bool:
    """Lengths at the top of the dtype: valid, every path computes them alike."""
    seq_lens = call["seq_lens"]
    if seq_lens.numel():
        info = torch.iinfo(seq_lens.dtype)
        seq_lens[_pick(draw, seq_lens.numel())] = draw(st.sampled_from([info.max, info.max - 1, info.max // 3]))
    return False


DCP_LOCAL = OpSpec(
    name="dcp_local_seq_lens",
    wrapper=specops.dcp_local_seq_lens,
    tensors=dict(seq_lens=Arg((I32, I64), 1), out=Arg((I32, I64), 1)),
    outputs=("out",),
    valid_call=_dcp_valid,
    metadata_errors=_dcp_metadata,
    value_errors=lambda: [bad("negative seq_len", "seq_lens", seq_lens=t32(1, -4, 5, 9))],
    draw_call=_dcp_draw(),
    corruptions=(
        Corruption("negative seq_len", _one_entry("seq_lens", _negative, native_raises=True)),
        Corruption("lengths at the top of the dtype", _dcp_huge_lengths),
    ),
    allocation_sizes={},
)
