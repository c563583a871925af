"""The op table's spec of post_update_after_sampling; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _extreme, _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, bad, bad_with, t32, t64


def _valid() -> Call:
    return dict(idx_mapping=t32(1, -1, 0), num_computed_tokens=t32(4, 6), query_start_loc=t32(0, 3, 4, 7),
                sampled_tokens=t64(3, 5, -1, 7, -1, -1, 2, 2, 6).view(3, 3), num_sampled=t32(2, 1, 3),
                num_rejected=t32(1, 0, 0), last_sampled_tokens=t64(50, 51), all_token_ids=torch.zeros(2, 12, dtype=I32),
                total_len=t32(5, 7), output_bin_counts=torch.zeros(2, 8, dtype=I32),
                draft_tokens=t64(9, 8, 1, 1, 4, 3).view(3, 2), draft_tokens_out=torch.zeros(2, 2, dtype=I64))


def _metadata() -> list[Bad]:
    return [
        bad("half a sampling group", "total_len", total_len=None),
        bad("pooling without query_start_loc", "query_start_loc", query_start_loc=None, sampled_tokens=None,
            num_sampled=None, num_rejected=None, last_sampled_tokens=None, all_token_ids=None, total_len=None,
            output_bin_counts=None, draft_tokens=None, draft_tokens_out=None),
        bad("draft_tokens_out of another width", "draft_tokens_out", draft_tokens_out=torch.zeros(2, 3, dtype=I64)),
        bad("sampled_tokens with fewer than R rows", "sampled_tokens", sampled_tokens=t64(3, 5, -1).view(1, 3)),
        bad("num_sampled shorter than R", "num_sampled", num_sampled=t32(2, 1)),
        bad("query_start_loc shorter than R + 1", "query_start_loc", query_start_loc=t32(0, 3, 4)),
        bad_with("total_len sharing num_computed_tokens", ("total_len", "num_computed_tokens"),
                 lambda call: call.update(total_len=call["num_computed_tokens"])),
    ]


def _values() -> list[Bad]:
    return [
        bad("a repeated request row", "idx_mapping", idx_mapping=t32(1, 1, 0)),
        bad("idx_mapping past the request rows", "idx_mapping", idx_mapping=t32(1, 2, 0)),
        bad("a kept count past S", "num_sampled", num_sampled=t32(2, 1, 4)),
        bad("tokens past all_token_ids", "all_token_ids", total_len=t32(10, 7)),
        bad("a kept token past the bins", ("sampled_tokens", "output_bin_counts"),
            sampled_tokens=t64(3, 8, -1, 7, -1, -1, 2, 2, 6).view(3, 3)),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    rows, width, vocab, cols = draw(st.integers(1, 5)), 16, 10, draw(st.integers(1, 4))
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:draw(st.integers(0, rows + 1))]
    num_reqs = len(idx)
    token_dtype = draw(st.sampled_from([I32, I64]))
    sampling, bins, drafts = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    query_lens = torch.randint(1, 6, (num_reqs,), generator=generator)
    qsl = torch.cat([torch.zeros(1, dtype=torch.int64), query_lens.cumsum(0)]).to(I32)
    call = dict(idx_mapping=torch.tensor(idx, dtype=draw(st.sampled_from([I32, I64]))),
                num_computed_tokens=torch.randint(0, 50, (rows,), generator=generator, dtype=I32),
                query_start_loc=qsl if (draw(st.booleans()) or not sampling) else None,
                sampled_tokens=None, num_sampled=None, num_rejected=None, last_sampled_tokens=None,
                all_token_ids=None, total_len=None, output_bin_counts=None, draft_tokens=None, draft_tokens_out=None)
    if sampling:
        call.update(sampled_tokens=torch.randint(0, vocab, (num_reqs, cols), generator=generator).to(token_dtype),
                    num_sampled=torch.randint(0, cols + 1, (num_reqs,), generator=generator, dtype=I32),
                    num_rejected=torch.randint(0, 3, (num_reqs,), generator=generator, dtype=I32),
                    last_sampled_tokens=torch.arange(rows).to(token_dtype),
                    all_token_ids=torch.randint(0, 99, (rows, width), generator=generator, dtype=I32),
                    total_len=torch.randint(0, width - cols + 1, (rows,), generator=generator, dtype=I32))
        if bins:
            call["output_bin_counts"] = torch.randint(0, 5, (rows, vocab), generator=generator, dtype=I32)
        if drafts:
            call["draft_tokens"] = torch.randint(0, 99, (num_reqs, 2), generator=generator, dtype=I64)
            call["draft_tokens_out"] = torch.zeros(rows, 2, dtype=I64)
    return call


def _repeated_row(draw, call: Call) -> bool:
    """Two batch rows on one request row: the device paths leave one request's values (which one
    is unspecified); only the bounds are checked."""
    idx = call["idx_mapping"]
    mapped = (idx >= 0).nonzero().flatten().tolist()
    if len(mapped) < 2:
        return False
    idx[mapped[1]] = idx[mapped[0]]
    return True


def _idx_past_rows(draw, call: Call) -> bool:
    num_reqs = call["idx_mapping"].numel()
    if num_reqs == 0:
        return False
    call["idx_mapping"][_pick(draw, num_reqs)] = call["num_computed_tokens"].numel() + draw(st.integers(0, 3))
    return True


def _tokens_past_the_table(draw, call: Call) -> bool:
    if call["total_len"] is None or call["idx_mapping"].numel() == 0:
        return False
    call["total_len"].fill_(call["all_token_ids"].size(1) - 1)
    return bool(((call["idx_mapping"] >= 0) & (call["num_sampled"] > 1)).any())


def _extreme_rejected(draw, call: Call) -> bool:
    if call["num_rejected"] is not None:
        _extreme("num_rejected")(draw, call)
    return False


POST_UPDATE = OpSpec(
    name="post_update_after_sampling",
    wrapper=specops.post_update_after_sampling,
    tensors=dict(idx_mapping=Arg((I32, I64), 1), num_computed_tokens=Arg((I32,), 1), query_start_loc=Arg((I32,), 1),
                 sampled_tokens=Arg((I32, I64), 2, row_stride=True), num_sampled=Arg((I32,), 1),
                 num_rejected=Arg((I32,), 1), last_sampled_tokens=Arg((I32, I64), 1),
                 all_token_ids=Arg((I32,), 2, row_stride=True), total_len=Arg((I32,), 1),
                 output_bin_counts=Arg((I32,), 2, row_stride=True), draft_tokens=Arg((I32, I64), 2, row_stride=True),
                 draft_tokens_out=Arg((I64,), 2, row_stride=True)),
    outputs=("num_computed_tokens", "last_sampled_tokens", "all_token_ids", "total_len", "output_bin_counts",
             "draft_tokens_out"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("a repeated request row", _repeated_row, device="bounds"),
        Corruption("idx_mapping past the request rows", _idx_past_rows),
        Corruption("tokens past all_token_ids", _tokens_past_the_table),
        Corruption("rejected counts at int32 extremes", _extreme_rejected),
    ),
    allocation_sizes={},
)
