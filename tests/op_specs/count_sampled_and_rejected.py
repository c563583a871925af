"""The op table's spec of count_sampled_and_rejected; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _extreme, _pick, _seed
from ._spec import I32, I64, STALE, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t32


def _valid() -> Call:
    return dict(num_sampled=t32(2, 1, 1, 4, STALE), seq_lens=t32(20, 5, 9, 33), cu_num_logits=t32(0, 3, 4, 5, 9),
                idx_mapping=t32(3, 0, 1, 2), prefill_len=t32(8, 9, 30, 8), num_rejected=stale(5), num_reqs_padded=5)


def _metadata() -> list[Bad]:
    return [
        bad("cu_num_logits of R entries", "cu_num_logits", cu_num_logits=t32(0, 3, 4, 5)),
        bad("num_sampled shorter than R", "num_sampled", num_sampled=t32(2, 1, 1), num_reqs_padded=None),
        bad("num_rejected shorter than R", "num_rejected", num_rejected=stale(3)),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=3),
        bad("num_reqs_padded past num_sampled", ("num_reqs_padded", "num_sampled"), num_reqs_padded=6),
        bad_with("num_rejected sharing seq_lens", ("num_rejected", "seq_lens"),
                 lambda call: call.update(num_rejected=call["seq_lens"], num_reqs_padded=None)),
    ]


def _values() -> list[Bad]:
    return [
        bad("a kept count past the logits", "num_sampled", num_sampled=t32(4, 1, 1, 4, 0)),
        bad("a negative kept count", "num_sampled", num_sampled=t32(2, 1, -1, 4, 0)),
        bad("idx_mapping past prefill_len", "idx_mapping", idx_mapping=t32(3, 0, 4, 2)),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_reqs, rows = draw(st.integers(0, 6)), draw(st.integers(1, 6))
    counts = torch.randint(0, 4, (num_reqs,), generator=generator)
    cu = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(I32)
    sampled = (torch.rand(num_reqs, generator=generator) * (counts + 1)).long().to(I32)
    padded = num_reqs + draw(st.integers(0, 2))
    return dict(num_sampled=torch.cat([sampled, stale(padded - num_reqs)]),
                seq_lens=torch.randint(0, 20, (num_reqs,), generator=generator, dtype=I32), cu_num_logits=cu,
                idx_mapping=torch.randint(-1, rows, (num_reqs,), generator=generator).to(draw(st.sampled_from([I32, I64]))),
                prefill_len=torch.randint(0, 20, (rows,), generator=generator, dtype=I32),
                num_rejected=stale(padded + draw(st.integers(0, 1))), num_reqs_padded=padded)


def _idx_past_rows(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    call["idx_mapping"][_pick(draw, num_reqs)] = call["prefill_len"].numel() + draw(st.integers(0, 3))
    return True


def _kept_past_logits(draw, call: Call) -> bool:
    """A kept count past the request's logits: the native op rejects it only for a row that counts."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    r = _pick(draw, num_reqs)
    call["num_sampled"][r] = int(call["cu_num_logits"][r + 1] - call["cu_num_logits"][r]) + draw(st.integers(1, 3))
    row = int(call["idx_mapping"][r])
    return 0 <= row and int(call["seq_lens"][r]) >= int(call["prefill_len"][row])


COUNT_SAMPLED = OpSpec(
    name="count_sampled_and_rejected",
    wrapper=specops.count_sampled_and_rejected,
    tensors=dict(num_sampled=Arg((I32,), 1), seq_lens=Arg((I32,), 1), cu_num_logits=Arg((I32,), 1),
                 idx_mapping=Arg((I32, I64), 1), prefill_len=Arg((I32,), 1), num_rejected=Arg((I32,), 1)),
    outputs=("num_sampled", "num_rejected"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("idx_mapping past prefill_len", _idx_past_rows),
        Corruption("a kept count past the logits", _kept_past_logits),
        Corruption("counts at int32 extremes", _extreme("seq_lens", "prefill_len")),
    ),
    allocation_sizes={"num_reqs_padded": PAST_INT32},
)
