"""The op table's spec of prepare_next_token_ids; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t32, t64


def _valid() -> Call:
    return dict(sampled_token_ids=t64(5, 6, -1, -1, 20, -1, -1, -1, 7, 8, 9, 10).view(3, 4), vocab_size=100,
                discard_request_mask=torch.tensor([False, True, False]), backup_next_token_ids=None,
                token_ids=t32(1, 2, 3, 4, 5, 6, 7, 8, 9).view(3, 3), num_tokens_no_spec=t32(3, 2, 1),
                cu_num_draft_tokens=t32(3, 6, 9), query_start_loc=t32(0, 4, 8, 12), next_token_ids=stale(4),
                valid_sampled_token_count=stale(4), num_rejected_tokens=stale(4), token_indices_to_sample=stale(5),
                num_reqs_padded=4)


def _metadata() -> list[Bad]:
    return [
        bad("vocab_size 0", "vocab_size", vocab_size=0),
        bad("both backup sources", "backup_next_token_ids", backup_next_token_ids=t32(1, 2, 3)),
        bad("backup_next_token_ids int64", "backup_next_token_ids", backup_next_token_ids=t64(1, 2, 3), token_ids=None,
            num_tokens_no_spec=None),
        bad("backup_next_token_ids shorter than R", "backup_next_token_ids", backup_next_token_ids=t32(1, 2),
            token_ids=None, num_tokens_no_spec=None),
        bad("token_ids without num_tokens_no_spec", ("token_ids", "num_tokens_no_spec"), num_tokens_no_spec=None),
        bad("cu_num_draft_tokens without query_start_loc", ("cu_num_draft_tokens", "query_start_loc"),
            query_start_loc=None),
        bad("cu_num_draft_tokens of R + 1 entries", "cu_num_draft_tokens", cu_num_draft_tokens=t32(3, 6, 9, 9)),
        bad("discard_request_mask shorter than R", "discard_request_mask", discard_request_mask=torch.tensor([False])),
        bad("next_token_ids shorter than R", "next_token_ids", next_token_ids=stale(2)),
        bad("num_reqs_padded past next_token_ids", ("num_reqs_padded", "next_token_ids"), num_reqs_padded=5),
        bad_with("an output sharing num_tokens_no_spec", ("next_token_ids", "num_tokens_no_spec"),
                 lambda call: call.update(next_token_ids=call["num_tokens_no_spec"], num_reqs_padded=3)),
    ]


def _values() -> list[Bad]:
    return [
        bad("cu_num_draft_tokens decreasing", "cu_num_draft_tokens", cu_num_draft_tokens=t32(3, 2, 9)),
        bad("drafts filling the whole query", ("cu_num_draft_tokens", "query_start_loc"),
            cu_num_draft_tokens=t32(4, 6, 9)),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_reqs, k, vocab = draw(st.integers(0, 6)), draw(st.integers(0, 3)), draw(st.integers(1, 40))
    sampled = torch.randint(-1, vocab + 2, (num_reqs, k + 1), generator=generator).to(draw(st.sampled_from([I32, I64])))
    drafts = torch.randint(0, k + 1, (num_reqs,), generator=generator)
    query_lens = drafts + 1 + torch.randint(0, 3, (num_reqs,), generator=generator)
    padded = num_reqs + draw(st.integers(0, 2))
    device_backup = draw(st.booleans())
    width = draw(st.integers(0, 5))
    call = dict(sampled_token_ids=sampled, vocab_size=vocab,
                discard_request_mask=torch.rand(num_reqs, generator=generator) < 0.3 if draw(st.booleans()) else None,
                backup_next_token_ids=None if device_backup else torch.randint(0, 99, (num_reqs,), generator=generator,
                                                                                dtype=I32),
                token_ids=torch.randint(0, 99, (num_reqs, width), generator=generator, dtype=I32) if device_backup else None,
                num_tokens_no_spec=torch.randint(0, width + 2, (num_reqs,), generator=generator, dtype=I32)
                if device_backup else None,
                cu_num_draft_tokens=None, query_start_loc=None, next_token_ids=stale(padded),
                valid_sampled_token_count=stale(padded + draw(st.integers(0, 1))), num_rejected_tokens=None,
                token_indices_to_sample=None, num_reqs_padded=padded)
    if draw(st.booleans()):
        call.update(cu_num_draft_tokens=drafts.cumsum(0).to(I32),
                    query_start_loc=torch.cat([torch.zeros(1, dtype=torch.int64), query_lens.cumsum(0)]).to(I32),
                    num_rejected_tokens=stale(padded), token_indices_to_sample=stale(padded))
    return call


def _too_many_drafts(draw, call: Call) -> bool:
    if call["cu_num_draft_tokens"] is None or call["sampled_token_ids"].size(0) == 0:
        return False
    qsl = call["query_start_loc"]
    r = _pick(draw, call["sampled_token_ids"].size(0))
    call["cu_num_draft_tokens"][r:] += int(qsl[r + 1] - qsl[r])
    return True


def _backup_outside(draw, call: Call) -> bool:
    if call["num_tokens_no_spec"] is None or call["num_tokens_no_spec"].numel() == 0:
        return False
    call["num_tokens_no_spec"][_pick(draw, call["num_tokens_no_spec"].numel())] = draw(st.sampled_from([-3, 0, 99]))
    return False


NEXT_TOKENS = OpSpec(
    name="prepare_next_token_ids",
    wrapper=specops.prepare_next_token_ids,
    tensors=dict(sampled_token_ids=Arg((I32, I64), 2, row_stride=True), discard_request_mask=Arg((torch.bool,), 1),
                 backup_next_token_ids=Arg((I32,), 1), token_ids=Arg((I32,), 2, row_stride=True),
                 num_tokens_no_spec=Arg((I32,), 1), cu_num_draft_tokens=Arg((I32,), 1), query_start_loc=Arg((I32,), 1),
                 next_token_ids=Arg((I32,), 1), valid_sampled_token_count=Arg((I32,), 1),
                 num_rejected_tokens=Arg((I32,), 1), token_indices_to_sample=Arg((I32,), 1)),
    outputs=("next_token_ids", "valid_sampled_token_count", "num_rejected_tokens", "token_indices_to_sample"),
    exclusive=("backup_next_token_ids",),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("more drafts than the query holds", _too_many_drafts),
        Corruption("a backup index outside the row", _backup_outside),
    ),
    allocation_sizes={"num_reqs_padded": PAST_INT32},
)
