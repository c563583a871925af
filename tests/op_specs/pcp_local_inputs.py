"""The op table's spec of pcp_local_inputs (torch.ops.specops.pcp_local_inputs); see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t32, t64


def _pcp_local_valid() -> Call:
    """Rank 0 of a PCP = 2 batch: decodes r0, r3, then the head chunk of the prefill r2."""
    return dict(global_input_ids=500 + torch.arange(12), global_positions=t64(10, 20, 4, 5, 6, 7, 8, 9, 10, 11, 12, 30),
                local_gather_idx=t64(0, 11, 2, 3, 4, 0, 0), local_query_start_loc=t32(0, 1, 2, 5), num_local_tokens=5,
                input_ids=stale(8, dtype=I64), positions=stale(7, dtype=I64), seq_lens=stale(4), num_reqs_padded=4)


def _pcp_local_metadata() -> list[Bad]:
    return [
        bad("input_ids shorter than L", "input_ids", input_ids=stale(6, dtype=I64)),
        bad("positions shorter than L", "positions", positions=stale(6, dtype=I64)),
        bad("input_ids of another dtype than the global ids", ("input_ids", "global_input_ids"), input_ids=stale(8)),
        bad("seq_lens shorter than n", "seq_lens", seq_lens=stale(2), num_reqs_padded=2),
        bad("num_local_tokens past L", "num_local_tokens", num_local_tokens=8),
        bad("num_local_tokens -1", "num_local_tokens", num_local_tokens=-1),
        bad("num_reqs_padded below n", "num_reqs_padded", num_reqs_padded=2),
        bad("num_reqs_padded past seq_lens", "num_reqs_padded", num_reqs_padded=5),
        bad("an empty local_query_start_loc", "local_query_start_loc", local_query_start_loc=torch.empty(0, dtype=I32)),
        bad_with("positions sharing input_ids", ("positions", "input_ids"),
                 lambda call: call.update(positions=call["input_ids"][:7])),
    ]


def _pcp_local_values() -> list[Bad]:
    return [
        bad("a gather index past the global ids", "global_input_ids", local_gather_idx=t64(0, 12, 2, 3, 4, 0, 0)),
        bad("a negative gather index", "local_gather_idx", local_gather_idx=t64(0, -1, 2, 3, 4, 0, 0)),
        bad("a gather index past the global positions", "global_positions", global_positions=torch.arange(11)),
        bad("local_query_start_loc ending before N", "local_query_start_loc", local_query_start_loc=t32(0, 1, 2, 4)),
        bad("local_query_start_loc decreasing", "local_query_start_loc", local_query_start_loc=t32(0, 3, 2, 5)),
        bad("local_query_start_loc not from 0", "local_query_start_loc", local_query_start_loc=t32(1, 1, 2, 5)),
    ]


@st.composite
def _pcp_local_draw(draw) -> Call:
    generator = _seed(draw)
    num_reqs = draw(st.integers(0, 5))
    f = [draw(st.booleans()) for _ in range(num_reqs)]
    q = [draw(st.integers(1, 20)) if p else draw(st.integers(0, 2)) for p in f]
    c = [draw(st.integers(0, 100)) for _ in range(num_reqs)]
    world = draw(st.integers(1, 3))
    layout = specops.pcp_partition(t32(*q), t32(*c), torch.tensor(f, dtype=torch.bool), world,
                                   shard_decode_requests=draw(st.booleans()))
    rank = layout.rank(_pick(draw, world))
    ids_dtype, pos_dtype = draw(st.sampled_from([I64, I32])), draw(st.sampled_from([I64, I32]))
    total = sum(q) + draw(st.integers(0, 2))
    L, n = rank.local_gather_idx.numel(), rank.local_query_start_loc.numel() - 1
    extra = draw(st.integers(0, 2))
    return dict(global_input_ids=torch.randint(0, 1 << 20, (total,), generator=generator).to(ids_dtype),
                global_positions=torch.randint(0, 1 << 20, (total,), generator=generator).to(pos_dtype),
                local_gather_idx=rank.local_gather_idx.clone(), local_query_start_loc=rank.local_query_start_loc.clone(),
                num_local_tokens=rank.num_tokens, input_ids=stale(L + draw(st.integers(0, 2)), dtype=ids_dtype),
                positions=stale(L + draw(st.integers(0, 2)), dtype=pos_dtype), seq_lens=stale(n + extra),
                num_reqs_padded=n + draw(st.integers(0, extra)))


def _real_token(draw, call: Call) -> int | None:
    return _pick(draw, call["num_local_tokens"]) if call["num_local_tokens"] else None


def _gather_outside(draw, call: Call) -> bool:
    """A real token's gather index outside a global tensor: the host op rejects it, the device
    paths read 0."""
    o = _real_token(draw, call)
    if o is None:
        return False
    size = min(call["global_input_ids"].numel(), call["global_positions"].numel())
    call["local_gather_idx"][o] = draw(st.sampled_from([-1, -(2**40), size, size + 7, 2**62]))
    return True


def _padding_garbage(draw, call: Call) -> bool:
    """Garbage in the gather index past N (padding entries): never read, every path agrees."""
    n, L = call["num_local_tokens"], call["local_gather_idx"].numel()
    if L > n:
        call["local_gather_idx"][n + _pick(draw, L - n)] = draw(st.sampled_from([-5, 2**40, 2**63 - 1]))
    return False


def _layout_past_n(draw, call: Call) -> bool:
    """local_query_start_loc whose last entry is not N: a layout that contradicts itself."""
    lqsl = call["local_query_start_loc"]
    lqsl[-1] = int(lqsl[-1]) + draw(st.integers(1, 3))
    return True


PCP_LOCAL = OpSpec(
    name="pcp_local_inputs",
    wrapper=specops.pcp_local_inputs,
    tensors=dict(global_input_ids=Arg((I32, I64), 1), global_positions=Arg((I64, I32), 1),
                 local_gather_idx=Arg((I64,), 1), local_query_start_loc=Arg((I32,), 1), input_ids=Arg((I32, I64), 1),
                 positions=Arg((I64, I32), 1), seq_lens=Arg((I32,), 1)),
    outputs=("input_ids", "positions", "seq_lens"),
    valid_call=_pcp_local_valid,
    metadata_errors=_pcp_local_metadata,
    value_errors=_pcp_local_values,
    draw_call=_pcp_local_draw(),
    offsets=("local_query_start_loc",),
    corruptions=(
        Corruption("a gather index outside the global tensors", _gather_outside),
        Corruption("garbage in the padding of the gather index", _padding_garbage),
        Corruption("local_query_start_loc past N", _layout_past_n, device="bounds"),
    ),
    allocation_sizes={"num_reqs_padded": PAST_INT32},
)
