"""The op table's spec of prepare_draft_prefill_inputs; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _decreasing, _extreme, _pick, _query_start_loc_past, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, bad, bad_with, stale, t32, t64

_TOKEN_BUFFERS = ("target_input_ids", "target_positions", "input_ids", "positions")


def _valid() -> Call:
    # The worked example of docs/step_bookkeeping.md.
    return dict(target_input_ids=t32(11, 12, 13, 21), target_positions=t64(5, 6, 7, 9), idx_mapping=t32(2, 0),
                query_start_loc=t32(0, 3, 4), seq_lens=t32(8, 10), num_sampled=t32(2, 0), num_rejected=t32(1, 0),
                last_sampled_tokens=t64(100, 101, 102, 103), next_prefill_tokens=t32(200, 201, 202, 203).view(1, 4),
                input_ids=stale(6), positions=stale(6, dtype=I64), out_query_start_loc=stale(5),
                out_seq_lens=stale(4), last_token_indices=stale(4, dtype=I64), current_draft_step=stale(dtype=I64),
                request_idx_mapping=stale(4, dtype=I64))


def _metadata() -> list[Bad]:
    return [
        bad("query_start_loc shorter than R + 1", "query_start_loc", query_start_loc=t32(0, 3)),
        bad("seq_lens shorter than R", "seq_lens", seq_lens=t32(8)),
        bad("num_sampled shorter than R", "num_sampled", num_sampled=t32(2)),
        bad("num_rejected shorter than R", "num_rejected", num_rejected=t32(1)),
        bad("last_sampled_tokens [M, 2]", "last_sampled_tokens", last_sampled_tokens=torch.zeros(4, 2, dtype=I64)),
        bad("next_prefill_tokens of no row", "next_prefill_tokens", next_prefill_tokens=torch.zeros(0, 4, dtype=I32)),
        bad("out_query_start_loc shorter than R + 1", "out_query_start_loc", out_query_start_loc=stale(2)),
        bad("out_seq_lens shorter than R", "out_seq_lens", out_seq_lens=stale(1)),
        bad("last_token_indices shorter than R", "last_token_indices", last_token_indices=stale(1, dtype=I64)),
        bad("request_idx_mapping shorter than R", "request_idx_mapping", request_idx_mapping=stale(1, dtype=I64)),
        bad("current_draft_step of two entries", "current_draft_step", current_draft_step=stale(2, dtype=I64)),
        bad("current_draft_step [1, 1]", "current_draft_step", current_draft_step=stale(1, 1, dtype=I64)),
        bad_with("out_seq_lens sharing seq_lens", ("out_seq_lens", "seq_lens"),
                 lambda call: call.update(out_seq_lens=call["seq_lens"])),
        bad_with("request_idx_mapping sharing idx_mapping", ("request_idx_mapping", "idx_mapping"),
                 lambda call: call.update(request_idx_mapping=call["idx_mapping"])),
    ]


# The post-update part (post_update_after_sampling's request state, before the prefill).
UPDATE_TENSORS = {"num_computed_tokens": Arg((I32,), 1), "sampled_tokens": Arg((I32, I64), 2, row_stride=True),
                  "all_token_ids": Arg((I32,), 2, row_stride=True), "total_len": Arg((I32,), 1),
                  "output_bin_counts": Arg((I32,), 2, row_stride=True)}


def _with_update(call: Call) -> Call:
    """The valid call with its post-update: request 0 (row 2) keeps 41, 42; request 1 (row 0) a
    chunked prefill samples nothing."""
    call.update(num_computed_tokens=t32(3, 0, 5, 0), sampled_tokens=t64(41, 42, -1, 51, -1, -1).view(2, 3),
                all_token_ids=torch.zeros(4, 10, dtype=I32), total_len=t32(3, 0, 6, 0),
                output_bin_counts=torch.zeros(4, 64, dtype=I32))
    return call


def _in_update(label: str, names: str | tuple[str, ...], **replace) -> Bad:
    return bad_with(label, names, lambda call: _with_update(call).update(replace))


def _update_metadata() -> list[Bad]:
    return [
        _in_update("num_computed_tokens int64", "num_computed_tokens", num_computed_tokens=t64(3, 0, 5, 0)),
        _in_update("sampled_tokens 1-D", "sampled_tokens", sampled_tokens=t64(41, 42)),
        _in_update("sampled_tokens of one row", "sampled_tokens", sampled_tokens=t64(41, 42, -1).view(1, 3)),
        _in_update("all_token_ids 1-D", "all_token_ids", all_token_ids=torch.zeros(10, dtype=I32)),
        _in_update("total_len int64", "total_len", total_len=t64(3, 0, 6, 0)),
        _in_update("output_bin_counts 1-D", "output_bin_counts", output_bin_counts=torch.zeros(64, dtype=I32)),
        _in_update("the state without sampled_tokens", ("num_computed_tokens", "sampled_tokens"), sampled_tokens=None),
        _in_update("sampled_tokens without total_len", ("total_len", "sampled_tokens"), total_len=None),
        bad_with("total_len sharing the prefill's input_ids", ("total_len", "input_ids"),
                 lambda call: _with_update(call).update(total_len=call["input_ids"][:4])),
        bad_with("all_token_ids sharing target_input_ids", ("all_token_ids", "target_input_ids"),
                 lambda call: _with_update(call).update(target_input_ids=call["all_token_ids"][0, :4])),
        bad_with("last_sampled_tokens sharing next_prefill_tokens", ("last_sampled_tokens", "next_prefill_tokens"),
                 lambda call: call.update(last_sampled_tokens=call["next_prefill_tokens"].view(-1))),
    ]


def _update_values() -> list[Bad]:
    return [
        _in_update("a repeated request row", "idx_mapping", idx_mapping=t32(2, 2)),
        _in_update("num_sampled past the sampled columns", "num_sampled", num_sampled=t32(4, 0)),
        _in_update("tokens appended past all_token_ids", ("total_len", "all_token_ids"), total_len=t32(3, 0, 9, 0)),
        _in_update("a kept token outside the vocabulary", ("sampled_tokens", "output_bin_counts"),
                   sampled_tokens=t64(41, 70, -1, 51, -1, -1).view(2, 3)),
    ]


def _values() -> list[Bad]:
    return [
        bad("a request rejecting its whole query", "num_rejected", num_rejected=t32(3, 0)),
        bad("a negative rejected count", "num_rejected", num_rejected=t32(1, -1)),
        bad("idx_mapping past the request rows", "idx_mapping", idx_mapping=t32(2, 4)),
        bad("a negative request row", "idx_mapping", idx_mapping=t32(-1, 0)),
        bad("query_start_loc not from 0", "query_start_loc", query_start_loc=t32(1, 3, 4)),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2)),
        bad("T past target_input_ids", ("query_start_loc", "target_input_ids"), query_start_loc=t32(0, 3, 5)),
        bad("T past target_positions", ("query_start_loc", "target_positions"), target_positions=t64(5, 6, 7)),
        bad("T past input_ids", ("query_start_loc", "input_ids"), input_ids=stale(3)),
        bad("T past positions", ("query_start_loc", "positions"), positions=stale(3, dtype=I64)),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_reqs, rows = draw(st.integers(0, 5)), draw(st.integers(1, 6))
    query_lens = torch.randint(1, 6, (num_reqs,), generator=generator)
    qsl = torch.cat([torch.zeros(1, dtype=torch.int64), query_lens.cumsum(0)]).to(I32)
    num_tokens = int(qsl[-1])
    # At least one kept token per request; num_sampled 0 is a chunked prefill (the prompt's next token).
    rejected = (torch.rand(num_reqs, generator=generator) * query_lens).long().to(I32)
    pad = draw(st.integers(0, 2))
    id_dtype, position_dtype = draw(st.sampled_from([I32, I64])), draw(st.sampled_from([I64, I32]))
    last_sampled = torch.randint(0, 9000, (rows,), generator=generator).to(draw(st.sampled_from([I32, I64])))
    lookahead = draw(st.integers(0, 2))  # 0: a 1-D [M]
    next_prefill = torch.randint(0, 9000, (max(lookahead, 1), rows), generator=generator, dtype=I32)
    return dict(
        target_input_ids=torch.randint(0, 9000, (num_tokens + draw(st.integers(0, 2)),), generator=generator,
                                       dtype=I64).to(id_dtype),
        target_positions=torch.randint(0, 4000, (num_tokens + draw(st.integers(0, 2)),), generator=generator,
                                       dtype=I64).to(position_dtype),
        idx_mapping=torch.randint(0, rows, (num_reqs,), generator=generator).to(draw(st.sampled_from([I32, I64]))),
        query_start_loc=qsl, seq_lens=torch.randint(1, 5000, (num_reqs,), generator=generator, dtype=I32),
        num_sampled=torch.randint(0, 3, (num_reqs,), generator=generator, dtype=I32), num_rejected=rejected,
        last_sampled_tokens=last_sampled.view(rows, 1) if draw(st.booleans()) else last_sampled,
        next_prefill_tokens=next_prefill if lookahead else next_prefill[0].clone(),
        input_ids=stale(num_tokens + draw(st.integers(0, 3)), dtype=draw(st.sampled_from([I32, I64]))),
        positions=stale(num_tokens + draw(st.integers(0, 3)), dtype=draw(st.sampled_from([I64, I32]))),
        out_query_start_loc=stale(num_reqs + 1 + pad), out_seq_lens=stale(num_reqs + pad),
        last_token_indices=stale(num_reqs + pad, dtype=draw(st.sampled_from([I64, I32]))),
        current_draft_step=stale(*draw(st.sampled_from([(), (1,)])), dtype=draw(st.sampled_from([I64, I32])))
        if draw(st.booleans()) else None,
        request_idx_mapping=stale(num_reqs + draw(st.integers(0, 2)), dtype=draw(st.sampled_from([I64, I32])))
        if draw(st.booleans()) else None,
    )


def _rejecting_the_whole_query(draw, call: Call) -> bool:
    """A request keeping no token: the device paths clamp the kept count to 0 and write no token of it."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    r = _pick(draw, num_reqs)
    qsl = call["query_start_loc"]
    call["num_rejected"][r] = int(qsl[r + 1] - qsl[r]) + draw(st.integers(0, 3))
    return True


def _negative_rejected(draw, call: Call) -> bool:
    """A negative rejected count: the device paths keep the whole query."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    call["num_rejected"][_pick(draw, num_reqs)] = -draw(st.integers(1, 5))
    return True


def _row_outside(draw, call: Call) -> bool:
    """A request row outside last_sampled_tokens / next_prefill_tokens: its next token is -1."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    rows = call["last_sampled_tokens"].size(0)
    call["idx_mapping"][_pick(draw, num_reqs)] = draw(st.sampled_from([-1, -7, rows, rows + 3]))
    return True


def _tokens_room(call: Call) -> int:
    return min(call[name].numel() for name in _TOKEN_BUFFERS)


PREPARE_DRAFT_PREFILL_INPUTS = OpSpec(
    name="prepare_draft_prefill_inputs",
    wrapper=specops.prepare_draft_prefill_inputs,
    tensors=dict(target_input_ids=Arg((I32, I64), 1), target_positions=Arg((I64, I32), 1),
                 idx_mapping=Arg((I32, I64), 1), query_start_loc=Arg((I32,), 1), seq_lens=Arg((I32,), 1),
                 num_sampled=Arg((I32,), 1), num_rejected=Arg((I32,), 1), last_sampled_tokens=Arg((I32, I64), 1),
                 next_prefill_tokens=Arg((I32,), 2, other_dims=(1,)), input_ids=Arg((I32, I64), 1),
                 positions=Arg((I64, I32), 1), out_query_start_loc=Arg((I32,), 1), out_seq_lens=Arg((I32,), 1),
                 last_token_indices=Arg((I64, I32), 1), current_draft_step=Arg((I64, I32), 0, other_dims=(1,)),
                 request_idx_mapping=Arg((I64, I32), 1), **UPDATE_TENSORS),
    # last_sampled_tokens is written by the post-update part, and marked written on every call.
    outputs=("input_ids", "positions", "out_query_start_loc", "out_seq_lens", "last_token_indices",
             "current_draft_step", "request_idx_mapping", "last_sampled_tokens"),
    valid_call=_valid,
    metadata_errors=lambda: _metadata() + _update_metadata(),
    value_errors=lambda: _values() + _update_values(),
    # The post-update part's tensors: its calls are mode_calls and _update_metadata's.
    exclusive=tuple(UPDATE_TENSORS),
    mode_calls=lambda: [("post-update", _with_update(_valid())),
                        ("post-update without bins", _with_update(_valid()) | {"output_bin_counts": None})],
    draw_call=_draw(),
    corruptions=(
        Corruption("a request rejecting its whole query", _rejecting_the_whole_query),
        Corruption("a negative rejected count", _negative_rejected),
        Corruption("a request row outside the next-token sources", _row_outside),
        Corruption("query_start_loc decreasing", _decreasing("query_start_loc"), device="bounds"),
        Corruption("query_start_loc past the token buffers", _query_start_loc_past(_tokens_room), device="bounds"),
        Corruption("values at int32 extremes", _extreme("seq_lens", "num_sampled", "last_sampled_tokens")),
    ),
    offsets=("query_start_loc",),
    allocation_sizes={},
)
