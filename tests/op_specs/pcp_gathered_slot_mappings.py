"""The op table's spec of pcp_gathered_slot_mappings (torch.ops.specops.pcp_gathered_slot_mappings);
see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t64


def _pcp_slots_valid() -> Call:
    """A decode replicated on two ranks (rank 0 writes) and a prefill of 7 in chunks of 2."""
    return dict(slot_mappings=[100 + torch.arange(8), (200 + torch.arange(8)).to(I32)],
                padded_gather_idx=t64(0, 1, 2, 7, 0, 0, 3, 4, 5, 6),
                gathered_kv_write_mask=torch.tensor([1, 1, 1, 1, 0, 0, 1, 1, 1, 1], dtype=torch.bool),
                out=[stale(12, dtype=I64), stale(10)], num_tokens_padded=10)


def _pcp_slots_metadata() -> list[Bad]:
    def outputs_sharing(call: Call) -> None:
        shared = stale(24, dtype=I64)
        call.update(out=[shared[:12], shared.view(I32)[10:20]])

    def out_sharing_an_input(call: Call) -> None:
        shared = stale(16, dtype=I64)
        inside = shared.view(I32)[:8]
        inside.copy_(call["slot_mappings"][1])
        call.update(slot_mappings=[call["slot_mappings"][0], inside], out=[shared[:12], call["out"][1]])

    return [
        bad("one output for two slot mappings", ("out", "slot_mappings"), out=[stale(12, dtype=I64)]),
        bad("out[1] shorter than P L", "out[1]", out=[stale(12, dtype=I64), stale(9)], num_tokens_padded=None),
        bad("out[0] of another dtype than its slot mapping", ("out[0]", "slot_mappings[0]"), out=[stale(12), stale(10)]),
        bad("a mask shorter than the index", ("gathered_kv_write_mask", "padded_gather_idx"),
            gathered_kv_write_mask=torch.ones(9, dtype=torch.bool)),
        bad("num_tokens_padded below P L", "num_tokens_padded", num_tokens_padded=9),
        bad("num_tokens_padded past out[1]", ("num_tokens_padded", "out[1]"), num_tokens_padded=11),
        bad("num_tokens_padded -2", "num_tokens_padded", num_tokens_padded=-2),
        bad_with("outputs sharing memory", ("out[1]", "out[0]"), outputs_sharing),
        bad_with("out[0] sharing slot_mappings[1]", ("out[0]", "slot_mappings[1]"), out_sharing_an_input),
    ]


def _pcp_slots_values() -> list[Bad]:
    return [
        bad("a masked-in index past the slot mappings", "padded_gather_idx",
            padded_gather_idx=t64(0, 1, 2, 8, 0, 0, 3, 4, 5, 6)),
        bad("a masked-in negative index", "padded_gather_idx", padded_gather_idx=t64(0, -1, 2, 7, 0, 0, 3, 4, 5, 6)),
    ]


@st.composite
def _pcp_slots_draw(draw) -> Call:
    generator = _seed(draw)
    num_reqs = draw(st.integers(0, 5))
    f = [draw(st.booleans()) for _ in range(num_reqs)]
    q = [draw(st.integers(1, 20)) if p else draw(st.integers(0, 2)) for p in f]
    world, dcp = draw(st.integers(1, 3)), draw(st.sampled_from([1, 2]))
    layout = specops.pcp_partition(torch.tensor(q, dtype=I32), torch.zeros(num_reqs, dtype=I32),
                                   torch.tensor(f, dtype=torch.bool), world, dcp_world_size=dcp,
                                   shard_decode_requests=dcp == 1 and draw(st.booleans()))
    J = layout.padded_gather_idx.numel()
    slot_mappings, out = [], []
    for _ in range(draw(st.integers(1, 3))):
        dtype = draw(st.sampled_from([I64, I32]))
        slots = torch.randint(-1, 1 << 30, (sum(q) + draw(st.integers(0, 2)),), generator=generator).to(dtype)
        slot_mappings.append(slots)
        out.append(stale(J + draw(st.integers(0, 3)), dtype=dtype))
    padded = draw(st.one_of(st.none(), st.integers(J, min(t.numel() for t in out))))
    return dict(slot_mappings=slot_mappings, padded_gather_idx=layout.padded_gather_idx.clone(),
                gathered_kv_write_mask=layout.gathered_kv_write_mask.clone(), out=out, num_tokens_padded=padded)


def _index_outside(draw, call: Call) -> bool:
    """A masked-in index outside a slot mapping: the host op rejects it, the device paths write PAD."""
    mask = call["gathered_kv_write_mask"]
    written = mask.nonzero().flatten().tolist()
    if not written:
        return False
    size = min(t.numel() for t in call["slot_mappings"])
    call["padded_gather_idx"][written[_pick(draw, len(written))]] = draw(st.sampled_from([-1, -(2**40), size,
                                                                                          2**62]))
    return True


def _masked_out_garbage(draw, call: Call) -> bool:
    """Garbage behind a cleared mask bit: never read, every path agrees."""
    mask, index = call["gathered_kv_write_mask"], call["padded_gather_idx"]
    if index.numel():
        j = _pick(draw, index.numel())
        mask[j] = False
        index[j] = draw(st.sampled_from([-3, 2**40, 2**63 - 1]))
    return False


PCP_SLOTS = OpSpec(
    name="pcp_gathered_slot_mappings",
    wrapper=specops.pcp_gathered_slot_mappings,
    tensors={"slot_mappings[0]": Arg((I64, I32), 1), "slot_mappings[1]": Arg((I64, I32), 1),
             "padded_gather_idx": Arg((I64,), 1), "gathered_kv_write_mask": Arg((torch.bool,), 1),
             "out[0]": Arg((I64, I32), 1), "out[1]": Arg((I64, I32), 1)},
    outputs=("out[0]", "out[1]"),
    valid_call=_pcp_slots_valid,
    metadata_errors=_pcp_slots_metadata,
    value_errors=_pcp_slots_values,
    draw_call=_pcp_slots_draw(),
    corruptions=(
        Corruption("a masked-in index outside a slot mapping", _index_outside),
        Corruption("garbage behind a cleared mask bit", _masked_out_garbage),
    ),
    scalars=("num_tokens_padded",),
    allocation_sizes={"num_tokens_padded": PAST_INT32},
)
