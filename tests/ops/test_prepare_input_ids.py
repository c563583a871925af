"""prepare_input_ids: the worked examples, random batches against the plain-Python contract on
every backend, padding, opcheck, compile, host value checks."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import input_ids as expected_input_ids
from strategies import assert_rejected_without_writes

import specops

STALE_IDS, STALE_NEXT = 77, 99


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def token_table(rows: int, width: int = 16) -> torch.Tensor:
    return (1000 + 16 * torch.arange(rows).view(-1, 1) + torch.arange(width)).to(torch.int32)


def test_example_decode_prefill_chunk_and_prefill_end(backend):
    input_ids = t32([STALE_IDS] * 10)
    next_prefill = torch.full((2, 4), STALE_NEXT, dtype=torch.int32)
    drafts = torch.zeros(4, 3, dtype=torch.int64)
    drafts[2] = torch.tensor([601, 602, 603])
    result = specops.prepare_input_ids(
        input_ids, t32([2, 0, 1]), t32([0, 3, 7, 10]), t32([4, 3, 10, 0]), t32([12, 6, 8, 0]),
        torch.tensor([0, 0, 501, 0]), drafts, t32([0, 3, 4, 5]), all_token_ids=token_table(4),
        next_prefill_tokens=next_prefill)
    assert input_ids.tolist() == [501, 601, 602, 1004, 1005, 1006, 1007, 1019, 1020, 1021]
    assert next_prefill.tolist() == [[1008, 0, 99, 99], [1009, 0, 99, 99]]
    assert result.logits_indices.tolist() == [0, 1, 2, 6, 9]
    assert result.logits_indices.dtype == torch.int64
    assert result.expanded_idx_mapping.tolist() == [2, 2, 2, 0, 1]
    assert result.expanded_local_pos.tolist() == [0, 1, 2, 0, 0]


def test_example_query_crossing_the_end_of_its_prefill(backend):
    input_ids = t32([STALE_IDS] * 6)
    next_prefill = torch.full((1, 4), STALE_NEXT, dtype=torch.int32)
    result = specops.prepare_input_ids(
        input_ids, t32([1, 3]), t32([0, 4, 6]), t32([0, 8, 0, 20]), t32([0, 10, 0, 5]), torch.tensor([0, 502, 0, 503]),
        torch.tensor([[0, 0], [701, 702], [0, 0], [801, 802]]), t32([0, 3, 5]), all_token_ids=token_table(4),
        next_prefill_tokens=next_prefill)
    assert input_ids.tolist() == [1024, 1025, 701, 702, 503, 801]
    assert next_prefill.tolist() == [[99, 0, 99, 99]]
    assert result.logits_indices.tolist() == [1, 2, 3, 4, 5]
    assert result.expanded_idx_mapping.tolist() == [1, 1, 1, 3, 3]
    assert result.expanded_local_pos.tolist() == [0, 1, 2, 0, 1]


def test_example_no_new_sampled_token(backend):
    input_ids = t32([STALE_IDS] * 4)
    result = specops.prepare_input_ids(
        input_ids, t32([0, 1]), t32([0, 2, 4]), t32([30, 40]), t32([5, 5]), torch.tensor([[8], [9]]),
        torch.tensor([[21, 22], [31, 32]]), t32([0, 2, 4]), num_new_sampled_tokens=0)
    assert input_ids.tolist() == [21, 22, 31, 32]
    assert result.logits_indices.tolist() == [0, 1, 2, 3]


def test_padding(backend):
    input_ids = t32([STALE_IDS] * 6)
    logits = torch.full((5,), STALE_IDS, dtype=torch.int64)
    expanded = torch.full((5,), STALE_IDS, dtype=torch.int64)
    local = t32([STALE_IDS] * 5)
    specops.prepare_input_ids(input_ids, torch.tensor([0, -1]), t32([0, 2, 3]), t32([4]), t32([2]), t32([50]),
                              t32([[60, 61]]), t32([0, 2, 3]), logits_indices=logits, expanded_idx_mapping=expanded,
                              expanded_local_pos=local, num_logits_padded=4, num_tokens_padded=5)
    # r1 has no request row: its logits entries are written, its input id is not.
    assert input_ids.tolist() == [50, 60, STALE_IDS, 0, 0, STALE_IDS]
    assert logits.tolist() == [0, 1, 2, 0, STALE_IDS]
    assert expanded.tolist() == [0, 0, -1, -1, STALE_IDS]
    assert local.tolist() == [0, 1, 0, 0, STALE_IDS]


@st.composite
def steps(draw):
    rows = draw(st.integers(1, 5))
    width = 24
    num_drafts = draw(st.integers(0, 3))
    num_new = draw(st.sampled_from([0, 1]))
    # Distinct request rows: two batch rows prefilling one request row would race on its lookahead tokens.
    idx = draw(st.permutations(list(range(rows)) + [-1, -1]))[:draw(st.integers(0, rows + 2))]
    prefill = [draw(st.integers(0, 16)) for _ in range(rows)]
    computed = [draw(st.integers(0, 16)) for _ in range(rows)]
    qsl, cu = [0], [0]
    for row in idx:
        nc = computed[row] if row >= 0 else 0
        qlen = draw(st.integers(1, max(1, min(6, width - nc))))
        n_log = draw(st.integers(0, min(qlen, num_drafts + num_new)))
        if row >= 0 and nc + qlen > prefill[row] and num_new == 1:
            n_log = max(n_log, 1)
        qsl.append(qsl[-1] + qlen)
        cu.append(cu[-1] + n_log)
    return dict(rows=rows, width=width, num_drafts=num_drafts, num_new=num_new, idx=idx, prefill=prefill,
                computed=computed, qsl=qsl, cu=cu, lookahead=draw(st.integers(0, 2)), prompt=draw(st.booleans()),
                seed=draw(st.integers(0, 1000)), extra=draw(st.integers(0, 2)),
                token_dtype=draw(st.sampled_from([torch.int32, torch.int64])))


@settings(max_examples=examples(25))
@given(step=steps())
def test_random_steps_match_the_contract(backend, step):
    generator = torch.Generator().manual_seed(step["seed"])
    rows, num_tokens, num_logits = step["rows"], step["qsl"][-1], step["cu"][-1]
    tokens = torch.randint(0, 5000, (rows, step["width"]), generator=generator, dtype=torch.int32)
    last = torch.randint(5000, 6000, (rows,), generator=generator).to(step["token_dtype"])
    drafts = torch.randint(6000, 7000, (rows, step["num_drafts"]), generator=generator).to(step["token_dtype"])
    input_ids = t32([STALE_IDS] * (num_tokens + step["extra"]))
    next_prefill = torch.full((step["lookahead"], rows), STALE_NEXT, dtype=torch.int32)
    before = input_ids.tolist()
    prompt = dict(all_token_ids=tokens, next_prefill_tokens=next_prefill) if step["prompt"] else {}
    result = specops.prepare_input_ids(
        input_ids, t32(step["idx"]), t32(step["qsl"]), t32(step["computed"]), t32(step["prefill"]), last, drafts,
        t32(step["cu"]), num_new_sampled_tokens=step["num_new"], num_logits=num_logits + step["extra"],
        num_logits_padded=num_logits + step["extra"],
        num_tokens_padded=num_tokens + step["extra"], **prompt)
    ids, nxt, logits, expanded, local = expected_input_ids(
        step["idx"], step["qsl"], step["computed"], step["prefill"], last.tolist(), drafts.tolist(), step["cu"],
        num_new=step["num_new"], all_token_ids=tokens.tolist() if step["prompt"] else None,
        num_lookahead=step["lookahead"], input_ids_before=before[:num_tokens],
        next_prefill_before=[[STALE_NEXT] * rows for _ in range(step["lookahead"])])
    assert input_ids.tolist() == ids + [0] * step["extra"]
    if step["prompt"]:
        assert next_prefill.tolist() == nxt
    assert result.logits_indices.tolist() == logits + [0] * step["extra"]
    assert result.expanded_idx_mapping.tolist() == expanded + [-1] * step["extra"]
    assert result.expanded_local_pos.tolist() == local + [0] * step["extra"]


def _opcheck_args():
    drafts = torch.zeros(4, 3, dtype=torch.int64)
    drafts[2] = torch.tensor([601, 602, 603])
    return (t32([0] * 12), t32([2, 0, 1]), t32([0, 3, 7, 10]), t32([4, 3, 10, 0]), t32([12, 6, 8, 0]),
            torch.tensor([0, 0, 501, 0]), drafts, t32([0, 3, 4, 5]), 1, token_table(4),
            torch.zeros(2, 4, dtype=torch.int32), torch.zeros(6, dtype=torch.int64), torch.zeros(6, dtype=torch.int32),
            torch.zeros(6, dtype=torch.int32), 6, 12)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.prepare_input_ids.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(input_ids, next_prefill, logits):
        result = specops.prepare_input_ids(input_ids, *args[1:8], all_token_ids=args[9],
                                           next_prefill_tokens=next_prefill, logits_indices=logits,
                                           expanded_idx_mapping=args[12].clone(), expanded_local_pos=args[13].clone())
        return input_ids + 1, result.logits_indices * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(args[0].clone(), args[10].clone(), args[11].clone())
    actual = compiled(args[0].clone(), args[10].clone(), args[11].clone())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def _call(**change):
    call = dict(input_ids=t32([STALE_IDS] * 6), idx_mapping=t32([1, 3]), query_start_loc=t32([0, 4, 6]),
                num_computed_tokens=t32([0, 8, 0, 20]), prefill_len=t32([0, 10, 0, 5]),
                last_sampled_tokens=torch.tensor([0, 502, 0, 503]),
                draft_tokens=torch.tensor([[0, 0], [701, 702], [0, 0], [801, 802]]), cu_num_logits=t32([0, 3, 5]),
                all_token_ids=token_table(4), next_prefill_tokens=torch.full((1, 4), STALE_NEXT, dtype=torch.int32),
                logits_indices=torch.full((5,), STALE_IDS, dtype=torch.int64))
    call.update(change)
    return call


@pytest.mark.parametrize("change,argument", [
    (dict(cu_num_logits=t32([0, 3, 7])), "cu_num_logits"),  # 2 logits... 4 > the 2-token query of r1
    (dict(cu_num_logits=t32([0, 4, 5])), "draft_tokens"),  # 3 drafts, 2 columns
    (dict(cu_num_logits=t32([1, 3, 5])), "cu_num_logits"),
    (dict(query_start_loc=t32([0, 4, 3])), "query_start_loc"),
    (dict(idx_mapping=t32([1, 4])), "idx_mapping"),
    (dict(all_token_ids=token_table(4, 11)), "all_token_ids"),  # row 1 reads up to 12
    (dict(input_ids=t32([STALE_IDS] * 5)), "input_ids"),
    (dict(logits_indices=torch.full((4,), STALE_IDS, dtype=torch.int64)), "logits_indices"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    with specops.backend("native"):
        assert_rejected_without_writes(specops.prepare_input_ids, _call(**change), argument=argument,
                                       written=("input_ids", "next_prefill_tokens", "logits_indices"),
                                       errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(num_new_sampled_tokens=2), "num_new_sampled_tokens"),
    (dict(next_prefill_tokens=None), "next_prefill_tokens"),
    (dict(cu_num_logits=t32([0, 3])), "cu_num_logits"),
    (dict(input_ids=torch.zeros(6, dtype=torch.int64)), "input_ids"),
    (dict(num_tokens_padded=7), "num_tokens_padded"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    assert_rejected_without_writes(specops.prepare_input_ids, _call(**change), argument=argument,
                                   written=("logits_indices",))


def test_output_sharing_an_input_is_rejected(backend):
    call = _call()
    call["next_prefill_tokens"] = call["all_token_ids"][:1]
    assert_rejected_without_writes(specops.prepare_input_ids, call, argument="next_prefill_tokens",
                                   written=("input_ids", "logits_indices"))


@pytest.mark.skipif("triton" not in BACKENDS, reason="the Triton backend is not under test")
def test_the_kernel_takes_a_logits_offset_of_int32_min():
    """cu_num_logits[0] = INT32_MIN (a layout contradicting itself: the reference overflows) starts
    the kernel's logits loop at 2^31; the guard bands' draws found the interpreter typing that start
    int32 and raising. The kernel counts its loop from 0 and runs; test_guard_bands checks that such
    calls write nothing outside their buffers."""
    call = _call(cu_num_logits=t32([-2**31, 3, 5]))
    with specops.backend("triton"):
        specops.prepare_input_ids(**call)
