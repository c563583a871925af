"""post_update_after_sampling: the worked examples, random steps against the plain-Python
contract on every backend, opcheck, compile, host value checks."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import post_update
from strategies import assert_rejected_without_writes

import specops


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def _example_state():
    return dict(num_computed_tokens=t32([4, 6]), last_sampled_tokens=torch.tensor([50, 51]), total_len=t32([5, 7]),
                all_token_ids=torch.zeros(2, 12, dtype=torch.int32), output_bin_counts=torch.zeros(2, 8, dtype=torch.int32),
                draft_tokens_out=torch.zeros(2, 2, dtype=torch.int64))


def test_example_spec_decode(backend):
    state = _example_state()
    specops.post_update_after_sampling(
        t32([1, -1, 0]), state["num_computed_tokens"], query_start_loc=t32([0, 3, 4, 7]),
        sampled_tokens=torch.tensor([[3, 5, -1], [7, -1, -1], [2, 2, 6]]), num_sampled=t32([2, 1, 3]),
        num_rejected=t32([1, 0, 0]), last_sampled_tokens=state["last_sampled_tokens"],
        all_token_ids=state["all_token_ids"], total_len=state["total_len"],
        output_bin_counts=state["output_bin_counts"], draft_tokens=torch.tensor([[9, 8], [1, 1], [4, 3]]),
        draft_tokens_out=state["draft_tokens_out"])
    assert state["num_computed_tokens"].tolist() == [7, 8]
    assert state["last_sampled_tokens"].tolist() == [6, 5]
    assert state["total_len"].tolist() == [8, 9]
    assert state["all_token_ids"].tolist() == [[0, 0, 0, 0, 0, 2, 2, 6, 0, 0, 0, 0],
                                               [0, 0, 0, 0, 0, 0, 0, 3, 5, 0, 0, 0]]
    assert state["output_bin_counts"].tolist() == [[0, 0, 2, 0, 0, 0, 1, 0], [0, 0, 0, 1, 0, 1, 0, 0]]
    assert state["draft_tokens_out"].tolist() == [[4, 3], [9, 8]]


def test_draft_tokens_out_without_draft_tokens_stores_nothing(backend):
    """vLLM's post_update is handed its draft buffer on every call, the drafts only on a non-last
    pipeline rank: the pair without drafts is the call without both, the buffer untouched."""
    results = []
    for with_buffer in (False, True):
        state = _example_state()
        state["draft_tokens_out"].fill_(7)
        specops.post_update_after_sampling(
            t32([1, -1, 0]), state["num_computed_tokens"], query_start_loc=t32([0, 3, 4, 7]),
            sampled_tokens=torch.tensor([[3, 5, -1], [7, -1, -1], [2, 2, 6]]), num_sampled=t32([2, 1, 3]),
            num_rejected=t32([1, 0, 0]), last_sampled_tokens=state["last_sampled_tokens"],
            all_token_ids=state["all_token_ids"], total_len=state["total_len"],
            output_bin_counts=state["output_bin_counts"],
            draft_tokens_out=state["draft_tokens_out"] if with_buffer else None)
        results.append({name: value.tolist() for name, value in state.items()})
    assert results[0] == results[1]
    assert results[1]["draft_tokens_out"] == [[7, 7], [7, 7]]
    assert results[1]["num_computed_tokens"] == [7, 8]


def test_draft_tokens_need_draft_tokens_out(backend):
    state = _example_state()
    with pytest.raises(ValueError, match="draft_tokens_out"):
        specops.post_update_after_sampling(
            t32([1, -1, 0]), state["num_computed_tokens"], query_start_loc=t32([0, 3, 4, 7]),
            sampled_tokens=torch.tensor([[3, 5, -1], [7, -1, -1], [2, 2, 6]]), num_sampled=t32([2, 1, 3]),
            num_rejected=t32([1, 0, 0]), last_sampled_tokens=state["last_sampled_tokens"],
            all_token_ids=state["all_token_ids"], total_len=state["total_len"],
            draft_tokens=torch.tensor([[9, 8], [1, 1], [4, 3]]))
    assert state["num_computed_tokens"].tolist() == [4, 6]


def test_example_without_query_start_loc(backend):
    counts, last, total = t32([10, 20]), t32([0, 0]), t32([3, 4])
    tokens = torch.zeros(2, 8, dtype=torch.int32)
    specops.post_update_after_sampling(t32([0, 1]), counts, sampled_tokens=torch.tensor([[4, 9], [5, -1]]),
                                       num_sampled=t32([2, 0]), num_rejected=t32([0, 1]), last_sampled_tokens=last,
                                       all_token_ids=tokens, total_len=total)
    assert counts.tolist() == [10, 19]
    assert last.tolist() == [9, 0]
    assert total.tolist() == [5, 4]
    assert tokens[0, 3:5].tolist() == [4, 9] and int(tokens.sum()) == 13


def test_example_pooling(backend):
    counts = t32([5, 6, 7])
    specops.post_update_after_sampling(t32([2, 0]), counts, query_start_loc=t32([0, 4, 9]))
    assert counts.tolist() == [10, 6, 11]


def test_pooling_skips_unmapped_rows(backend):
    counts = t32([5, 6])
    specops.post_update_after_sampling(torch.tensor([-1, 1]), counts, query_start_loc=t32([0, 4, 9]))
    assert counts.tolist() == [5, 11]


@st.composite
def steps(draw):
    rows = draw(st.integers(1, 5))
    width, vocab, cols = 16, 10, draw(st.integers(1, 4))
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:draw(st.integers(0, rows + 1))]
    total = [draw(st.integers(0, width - cols)) for _ in range(rows)]
    qsl = [0]
    for _ in idx:
        qsl.append(qsl[-1] + draw(st.integers(1, 5)))
    num_sampled = [draw(st.integers(0, cols)) for _ in idx]
    sampled = [[draw(st.integers(0, vocab - 1)) for _ in range(cols)] for _ in idx]
    rejected = [draw(st.integers(0, 3)) for _ in idx]
    return dict(rows=rows, width=width, vocab=vocab, idx=idx, total=total, qsl=qsl, num_sampled=num_sampled,
                sampled=sampled, rejected=rejected, computed=[draw(st.integers(0, 50)) for _ in range(rows)],
                with_qsl=draw(st.booleans()), with_bins=draw(st.booleans()), with_drafts=draw(st.booleans()),
                token_dtype=draw(st.sampled_from([torch.int32, torch.int64])), cols=cols)


@settings(max_examples=examples(25))
@given(step=steps())
def test_random_steps_match_the_contract(backend, step):
    rows, num_reqs = step["rows"], len(step["idx"])
    sampled = torch.tensor(step["sampled"], dtype=step["token_dtype"]).view(num_reqs, step["cols"])
    counts = t32(step["computed"])
    last = torch.arange(100, 100 + rows, dtype=step["token_dtype"]).view(rows, 1)
    tokens = torch.arange(rows * step["width"], dtype=torch.int32).view(rows, step["width"])
    total = t32(step["total"])
    bins = torch.zeros(rows, step["vocab"], dtype=torch.int32) if step["with_bins"] else None
    drafts = torch.arange(num_reqs * 2).view(num_reqs, 2) if step["with_drafts"] else None
    drafts_out = torch.full((rows, 2), -7, dtype=torch.int64) if step["with_drafts"] else None
    qsl = t32(step["qsl"]) if step["with_qsl"] else None
    expected_counts, state = post_update(
        step["idx"], step["computed"], qsl=step["qsl"] if step["with_qsl"] else None, sampled=step["sampled"],
        num_sampled=step["num_sampled"], num_rejected=step["rejected"], last_sampled=last.view(-1).tolist(),
        all_token_ids=tokens.tolist(), total_len=step["total"], bins=bins.tolist() if bins is not None else None,
        drafts=drafts.tolist() if drafts is not None else None,
        drafts_out=drafts_out.tolist() if drafts_out is not None else None)
    specops.post_update_after_sampling(
        t32(step["idx"]), counts, query_start_loc=qsl, sampled_tokens=sampled, num_sampled=t32(step["num_sampled"]),
        num_rejected=t32(step["rejected"]), last_sampled_tokens=last, all_token_ids=tokens, total_len=total,
        output_bin_counts=bins, draft_tokens=drafts, draft_tokens_out=drafts_out)
    assert counts.tolist() == expected_counts
    assert last.view(-1).tolist() == state["last_sampled"]
    assert tokens.tolist() == state["all_token_ids"]
    assert total.tolist() == state["total_len"]
    if bins is not None:
        assert bins.tolist() == state["bins"]
    if drafts_out is not None:
        assert drafts_out.tolist() == state["drafts_out"]


def test_device_paths_clamp_counts_and_drop_tokens_past_the_table():
    for name in device_backends():
        tokens = torch.zeros(1, 4, dtype=torch.int32)
        total, last, bins = t32([3]), t32([0]), torch.zeros(1, 4, dtype=torch.int32)
        with specops.backend(name):
            specops.post_update_after_sampling(t32([0]), t32([0]), sampled_tokens=torch.tensor([[1, 9, 2]]),
                                               num_sampled=t32([7]), num_rejected=t32([0]), last_sampled_tokens=last,
                                               all_token_ids=tokens, total_len=total, output_bin_counts=bins)
        # 7 kept clamps to 3; only column 3 fits; token 9 is past the 4 bins.
        assert tokens.tolist() == [[0, 0, 0, 1]], name
        assert total.tolist() == [6] and last.tolist() == [2], name
        assert bins.tolist() == [[0, 1, 1, 0]], name


def _opcheck_args():
    state = _example_state()
    return (t32([1, -1, 0]), state["num_computed_tokens"], t32([0, 3, 4, 7]),
            torch.tensor([[3, 5, -1], [7, -1, -1], [2, 2, 6]]), t32([2, 1, 3]), t32([1, 0, 0]),
            state["last_sampled_tokens"], state["all_token_ids"], state["total_len"], state["output_bin_counts"],
            torch.tensor([[9, 8], [1, 1], [4, 3]]), state["draft_tokens_out"])


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.post_update_after_sampling.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(counts, tokens):
        specops.post_update_after_sampling(args[0], counts, query_start_loc=args[2], sampled_tokens=args[3],
                                           num_sampled=args[4], num_rejected=args[5],
                                           last_sampled_tokens=args[6].clone(), all_token_ids=tokens,
                                           total_len=args[8].clone())
        return counts * 2, tokens + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(args[1].clone(), args[7].clone())
    actual = compiled(args[1].clone(), args[7].clone())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def _call(**change):
    state = _example_state()
    call = dict(idx_mapping=t32([1, -1, 0]), num_computed_tokens=state["num_computed_tokens"],
                query_start_loc=t32([0, 3, 4, 7]), sampled_tokens=torch.tensor([[3, 5, -1], [7, -1, -1], [2, 2, 6]]),
                num_sampled=t32([2, 1, 3]), num_rejected=t32([1, 0, 0]),
                last_sampled_tokens=state["last_sampled_tokens"], all_token_ids=state["all_token_ids"],
                total_len=state["total_len"], output_bin_counts=state["output_bin_counts"])
    call.update(change)
    return call


WRITTEN = ("num_computed_tokens", "last_sampled_tokens", "all_token_ids", "total_len", "output_bin_counts")


@pytest.mark.parametrize("change,argument", [
    (dict(idx_mapping=t32([1, 1, 0])), "idx_mapping"),
    (dict(idx_mapping=t32([1, 2, 0])), "idx_mapping"),
    (dict(num_sampled=t32([2, 1, 4])), "num_sampled"),
    (dict(total_len=t32([10, 7])), "all_token_ids"),
    (dict(sampled_tokens=torch.tensor([[3, 8, -1], [7, -1, -1], [2, 2, 6]])), "output_bin_counts"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    with specops.backend("native"):
        assert_rejected_without_writes(specops.post_update_after_sampling, _call(**change), argument=argument,
                                       written=WRITTEN, errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(total_len=None), "total_len"),
    (dict(sampled_tokens=None, num_sampled=None, num_rejected=None, last_sampled_tokens=None, all_token_ids=None,
          total_len=None, query_start_loc=None, output_bin_counts=None), "query_start_loc"),
    (dict(draft_tokens=torch.zeros(3, 2, dtype=torch.int64), draft_tokens_out=torch.zeros(2, 3, dtype=torch.int64)),
     "draft_tokens_out"),
    (dict(num_sampled=t32([1, 1])), "num_sampled"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    call = _call(**change)
    assert_rejected_without_writes(specops.post_update_after_sampling, call, argument=argument,
                                   written=("num_computed_tokens",))
