"""The OpSpec of torch.ops.specops.format_slot_mapping_blocks (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _seed, _pick
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, bad, t64, stale


def _format_valid() -> Call:
    return dict(slot_mapping=t64(0, 17, -1, 40), block_size=16, out=stale(6, 2, dtype=I64))


def _format_metadata() -> list[Bad]:
    return [
        bad("out with fewer rows than slots", "out", out=stale(3, 2, dtype=I64)),
        bad("out with 3 columns", "out", out=stale(6, 3, dtype=I64)),
        bad("block_size 0", "block_size", block_size=0),
    ]


@st.composite
def _format_draw(draw) -> Call:
    generator = _seed(draw)
    num_slots = draw(st.integers(0, 20))
    slots = torch.randint(0, 1 << 20, (num_slots,), generator=generator)
    slots[torch.rand(num_slots, generator=generator) < 0.2] = specops.PAD_SLOT_ID
    slot_dtype = draw(st.sampled_from([I64, I32]))
    return dict(slot_mapping=slots.to(slot_dtype), block_size=draw(st.sampled_from([1, 3, 4, 16, 100])),
                out=stale(num_slots + draw(st.integers(0, 3)), 2, dtype=draw(st.sampled_from([I64, I32]))))


def _format_extreme_slots(draw, call: Call) -> bool:
    slots = call["slot_mapping"]
    if slots.numel():
        info = torch.iinfo(slots.dtype)
        slots[_pick(draw, slots.numel())] = draw(st.sampled_from([info.min, info.max, -2, -info.max // 3]))
    return False


FORMAT = OpSpec(
    name="format_slot_mapping_blocks",
    wrapper=specops.format_slot_mapping_blocks,
    tensors=dict(slot_mapping=Arg((I64, I32), 1), out=Arg((I64, I32), 2, row_stride=True)),
    outputs=("out",),
    valid_call=_format_valid,
    metadata_errors=_format_metadata,
    value_errors=lambda: [],  # every int is a slot: negative ones floor-divide like PAD
    draw_call=_format_draw(),
    corruptions=(Corruption("slots at the dtype's extremes", _format_extreme_slots),),
    allocation_sizes={},
)
