"""The OpSpec of torch.ops.specops.format_slot_mapping_blocks_multi (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _seed
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, PAST_INT32, bad, t32, t64, stale
from .format_slot_mapping_blocks import _format_extreme_slots


def _format_multi_valid() -> Call:
    return dict(slot_mappings=[t64(0, 17, -1, 40, 99), t32(5, 19, -1, -11)], block_sizes=[16, 10], num_slots=4,
                out=[stale(5, 2, dtype=I64), stale(4, 2)])


def _format_multi_metadata() -> list[Bad]:
    shared = stale(8, 2, dtype=I64)
    return [
        bad("one block size for two slot mappings", ("block_sizes", "slot_mappings"), block_sizes=[16]),
        bad("three outputs for two slot mappings", ("out", "slot_mappings"),
            out=[stale(5, 2, dtype=I64), stale(4, 2), stale(4, 2)]),
        bad("block_sizes[1] 0", "block_sizes[1]", block_sizes=[16, 0]),
        bad("num_slots -1", "num_slots", num_slots=-1),
        bad("num_slots past slot_mappings[1]", ("slot_mappings[1]", "num_slots"), num_slots=5),
        bad("out[1] with fewer rows than num_slots", ("out[1]", "num_slots"), out=[stale(5, 2, dtype=I64), stale(3, 2)]),
        bad("out[0] with 3 columns", "out[0]", out=[stale(5, 3, dtype=I64), stale(4, 2)]),
        bad("outputs sharing memory", ("out[1]", "out[0]"), out=[shared[:5], shared[3:7]]),
    ]


@st.composite
def _format_multi_draw(draw) -> Call:
    generator = _seed(draw)
    num_groups = draw(st.integers(1, 3))
    num_slots = draw(st.integers(0, 20))
    slot_mappings, out = [], []
    for _ in range(num_groups):
        slots = torch.randint(0, 1 << 20, (num_slots + draw(st.integers(0, 2)),), generator=generator)
        slots[torch.rand(slots.numel(), generator=generator) < 0.2] = specops.PAD_SLOT_ID
        slot_mappings.append(slots.to(draw(st.sampled_from([I64, I32]))))
        out.append(stale(num_slots + draw(st.integers(0, 3)), 2, dtype=draw(st.sampled_from([I64, I32]))))
    return dict(slot_mappings=slot_mappings, block_sizes=[draw(st.sampled_from([1, 3, 4, 16, 100])) for _ in out],
                num_slots=num_slots, out=out)


def _format_multi_extreme_slots(draw, call: Call) -> bool:
    for slots in call["slot_mappings"]:
        _format_extreme_slots(draw, dict(slot_mapping=slots))
    return False


FORMAT_MULTI = OpSpec(
    name="format_slot_mapping_blocks_multi",
    wrapper=specops.format_slot_mapping_blocks_multi,
    tensors={"slot_mappings[0]": Arg((I64, I32), 1), "slot_mappings[1]": Arg((I64, I32), 1),
             "out[0]": Arg((I64, I32), 2, row_stride=True), "out[1]": Arg((I64, I32), 2, row_stride=True)},
    outputs=("out[0]", "out[1]"),
    valid_call=_format_multi_valid,
    metadata_errors=_format_multi_metadata,
    value_errors=lambda: [],  # every int is a slot: negative ones floor-divide like PAD
    draw_call=_format_multi_draw(),
    corruptions=(Corruption("slots at the dtype's extremes", _format_multi_extreme_slots),),
    scalars=("num_slots", "block_sizes"),
    allocation_sizes={"num_slots": (2**30, *PAST_INT32)},  # [num_slots, 2] outputs
)
