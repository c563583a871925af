"""The op table's spec of prepare_input_ids; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _decreasing, _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t32, t64


def _tokens(rows: int, width: int) -> torch.Tensor:
    return (1000 + 16 * torch.arange(rows).view(-1, 1) + torch.arange(width)).to(I32)


def _valid() -> Call:
    return dict(input_ids=stale(7), idx_mapping=t32(1, 3), query_start_loc=t32(0, 4, 6),
                num_computed_tokens=t32(0, 8, 0, 20), prefill_len=t32(0, 10, 0, 5),
                last_sampled_tokens=t64(0, 502, 0, 503), draft_tokens=t64(0, 0, 701, 702, 0, 0, 801, 802).view(4, 2),
                cu_num_logits=t32(0, 3, 5), num_new_sampled_tokens=1, all_token_ids=_tokens(4, 16),
                next_prefill_tokens=stale(1, 4), logits_indices=stale(6, dtype=I64),
                expanded_idx_mapping=stale(6), expanded_local_pos=stale(6), num_logits_padded=6, num_tokens_padded=7)


def _metadata() -> list[Bad]:
    return [
        bad("num_new_sampled_tokens 2", "num_new_sampled_tokens", num_new_sampled_tokens=2),
        bad("cu_num_logits of R entries", "cu_num_logits", cu_num_logits=t32(0, 3)),
        bad("query_start_loc shorter than R + 1", "query_start_loc", query_start_loc=t32(0, 4)),
        bad("only one prompt tensor", ("all_token_ids", "next_prefill_tokens"), next_prefill_tokens=None),
        bad("expanded_idx_mapping of another dtype than idx_mapping", "expanded_idx_mapping",
            expanded_idx_mapping=stale(6, dtype=I64)),
        bad("last_sampled_tokens [M, 2]", "last_sampled_tokens", last_sampled_tokens=torch.zeros(4, 2, dtype=I64)),
        bad("num_tokens_padded past input_ids", "num_tokens_padded", num_tokens_padded=8),
        bad("num_logits_padded past logits_indices", ("num_logits_padded", "logits_indices"), num_logits_padded=7),
        bad_with("input_ids sharing all_token_ids", ("input_ids", "all_token_ids"),
                 lambda call: call.update(input_ids=call["all_token_ids"][0, :7])),
    ]


def _values() -> list[Bad]:
    return [
        bad("more logits than the query", ("cu_num_logits",), cu_num_logits=t32(0, 3, 6)),
        bad("more drafts than draft_tokens has columns", ("cu_num_logits", "draft_tokens"), cu_num_logits=t32(0, 4, 5)),
        bad("cu_num_logits[0] != 0", "cu_num_logits", cu_num_logits=t32(1, 3, 5)),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("idx_mapping past the request rows", "idx_mapping", idx_mapping=t32(1, 4)),
        bad("a prompt read past all_token_ids", "all_token_ids", all_token_ids=_tokens(4, 11)),
        bad("input_ids shorter than T", "input_ids", input_ids=stale(5), num_tokens_padded=None),
        bad("num_tokens_padded below T", "num_tokens_padded", num_tokens_padded=5),
        bad("logits_indices shorter than cu[R]", "logits_indices", logits_indices=stale(4, dtype=I64),
            num_logits_padded=None),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    rows, width, num_drafts = draw(st.integers(1, 5)), 24, draw(st.integers(0, 3))
    num_new = draw(st.sampled_from([0, 1]))
    idx = draw(st.permutations(list(range(rows)) + [-1, -1]))[:draw(st.integers(0, rows + 2))]
    prefill = torch.randint(0, 17, (rows,), generator=generator, dtype=I32)
    computed = torch.randint(0, 17, (rows,), generator=generator, dtype=I32)
    qsl, cu = [0], [0]
    for row in idx:
        nc = int(computed[row]) if row >= 0 else 0
        qlen = draw(st.integers(1, 6))
        n_log = draw(st.integers(0, min(qlen, num_drafts + num_new)))
        if row >= 0 and nc + qlen > int(prefill[row]) and num_new == 1:
            n_log = max(n_log, 1)
        qsl.append(qsl[-1] + qlen)
        cu.append(cu[-1] + n_log)
    token_dtype = draw(st.sampled_from([I32, I64]))
    prompt = draw(st.booleans())
    lookahead = draw(st.integers(0, 2))
    tokens_padded, logits_padded = qsl[-1] + draw(st.integers(0, 2)), cu[-1] + draw(st.integers(0, 2))
    return dict(input_ids=stale(tokens_padded + draw(st.integers(0, 1))),
                idx_mapping=torch.tensor(idx, dtype=draw(st.sampled_from([I32, I64]))), query_start_loc=t32(*qsl),
                num_computed_tokens=computed, prefill_len=prefill,
                last_sampled_tokens=torch.randint(0, 9000, (rows,), generator=generator).to(token_dtype),
                draft_tokens=torch.randint(0, 9000, (rows, num_drafts), generator=generator).to(token_dtype),
                cu_num_logits=t32(*cu), num_new_sampled_tokens=num_new,
                all_token_ids=torch.randint(0, 9000, (rows, width), generator=generator, dtype=I32) if prompt else None,
                next_prefill_tokens=stale(lookahead, rows) if prompt else None,
                logits_indices=stale(logits_padded + 1, dtype=I64), expanded_idx_mapping=None,
                expanded_local_pos=stale(logits_padded), num_logits_padded=logits_padded,
                num_tokens_padded=tokens_padded)


def _with_expanded(call: Call) -> Call:
    if call["expanded_idx_mapping"] is None:
        call["expanded_idx_mapping"] = stale(call["expanded_local_pos"].numel(), dtype=call["idx_mapping"].dtype)
    return call


def _idx_past_rows(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    call["idx_mapping"][_pick(draw, num_reqs)] = call["num_computed_tokens"].numel() + draw(st.integers(0, 3))
    return True


def _drafts_past_width(draw, call: Call) -> bool:
    """A request whose logits give more drafts than draft_tokens has columns (the query holds them):
    device paths write the drafts they have."""
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    qsl = call["query_start_loc"]
    r = _pick(draw, num_reqs)
    qlen = int(qsl[r + 1] - qsl[r])
    extra = qlen - int(call["cu_num_logits"][r + 1] - call["cu_num_logits"][r])
    if extra <= 0:
        return False
    call["cu_num_logits"][r + 1:] += extra
    n_draft = qlen - call["num_new_sampled_tokens"]
    call["logits_indices"] = stale(int(call["cu_num_logits"][-1]) + 1, dtype=I64)
    call["expanded_local_pos"] = stale(int(call["cu_num_logits"][-1]))
    call["expanded_idx_mapping"] = stale(int(call["cu_num_logits"][-1]), dtype=call["idx_mapping"].dtype)
    call["num_logits_padded"] = int(call["cu_num_logits"][-1])
    return n_draft > call["draft_tokens"].size(1)


PREPARE_INPUT_IDS = OpSpec(
    name="prepare_input_ids",
    wrapper=specops.prepare_input_ids,
    tensors=dict(input_ids=Arg((I32,), 1), idx_mapping=Arg((I32, I64), 1), query_start_loc=Arg((I32,), 1),
                 num_computed_tokens=Arg((I32,), 1), prefill_len=Arg((I32,), 1),
                 last_sampled_tokens=Arg((I32, I64), 1), draft_tokens=Arg((I32, I64), 2, row_stride=True),
                 cu_num_logits=Arg((I32,), 1), all_token_ids=Arg((I32,), 2, row_stride=True),
                 next_prefill_tokens=Arg((I32,), 2, row_stride=True), logits_indices=Arg((I64,), 1),
                 expanded_idx_mapping=Arg((I32,), 1), expanded_local_pos=Arg((I32,), 1)),
    outputs=("input_ids", "next_prefill_tokens", "logits_indices", "expanded_idx_mapping", "expanded_local_pos"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    offsets=("query_start_loc", "cu_num_logits"),
    draw_call=_draw().map(_with_expanded),
    corruptions=(
        Corruption("idx_mapping past the request rows", _idx_past_rows),
        Corruption("more drafts than columns", _drafts_past_width),
        Corruption("query_start_loc decreasing", _decreasing("query_start_loc"), device="bounds"),
    ),
    allocation_sizes={"num_logits": PAST_INT32},
)
