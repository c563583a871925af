"""prepare_draft_prefill_inputs: the worked example, vLLM's buffer forms, random batches against the
plain-Python contract on every backend (untouched entries included), the device paths' answer to
values the host op rejects, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from step_expectations import draft_prefill_inputs, int32
from strategies import assert_rejected_without_writes

import specops

STALE = 99
OUTPUTS = ("input_ids", "positions", "out_query_start_loc", "out_seq_lens", "last_token_indices",
           "current_draft_step", "request_idx_mapping")


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def worked_example() -> dict:
    """R = 2, M = 4, the drafter's buffers of max_num_reqs = 4 (and 6 tokens) filled with 99."""
    return dict(target_input_ids=t32([11, 12, 13, 21]), target_positions=torch.tensor([5, 6, 7, 9]),
                idx_mapping=t32([2, 0]), query_start_loc=t32([0, 3, 4]), seq_lens=t32([8, 10]),
                num_sampled=t32([2, 0]), num_rejected=t32([1, 0]),
                last_sampled_tokens=torch.tensor([[100], [101], [102], [103]]),
                next_prefill_tokens=t32([[200, 201, 202, 203]]),
                input_ids=torch.full((6,), STALE, dtype=torch.int32), positions=torch.full((6,), STALE),
                out_query_start_loc=torch.full((5,), STALE, dtype=torch.int32),
                out_seq_lens=torch.full((4,), STALE, dtype=torch.int32), last_token_indices=torch.full((4,), STALE),
                current_draft_step=torch.tensor(STALE), request_idx_mapping=torch.full((4,), STALE))


def test_worked_example(backend):
    call = worked_example()
    assert specops.prepare_draft_prefill_inputs(**call) is None
    # Request 0 keeps 2 of its 3 tokens (one rejected) and sampled: ids 12, then last_sampled[2] = 102.
    # Request 1 is a chunked prefill (nothing sampled): its one token becomes next_prefill_tokens[0, 0].
    assert call["input_ids"].tolist() == [12, 102, STALE, 200, STALE, STALE]
    assert call["positions"].tolist() == [5, 6, STALE, 9, STALE, STALE]
    assert call["last_token_indices"].tolist() == [1, 3, 0, 0]
    assert call["out_query_start_loc"].tolist() == [0, 3, 4, 4, 4]
    assert call["out_seq_lens"].tolist() == [8, 10, 0, 0]
    assert call["current_draft_step"].item() == 0
    assert call["request_idx_mapping"].tolist() == [2, 0, -1, -1]


def test_optional_outputs_and_the_other_forms(backend):
    """[M] sources, int32 step of shape [1], int32 mapping and indices, int64 ids; without the
    optional outputs nothing else changes."""
    call = worked_example()
    call.update(last_sampled_tokens=t32([100, 101, 102, 103]), next_prefill_tokens=t32([200, 201, 202, 203]),
                input_ids=torch.full((6,), STALE), last_token_indices=torch.full((4,), STALE, dtype=torch.int32),
                current_draft_step=t32([7]), request_idx_mapping=torch.full((3,), STALE, dtype=torch.int32))
    specops.prepare_draft_prefill_inputs(**call)
    assert call["input_ids"].tolist() == [12, 102, STALE, 200, STALE, STALE]
    assert call["last_token_indices"].tolist() == [1, 3, 0, 0]
    assert call["current_draft_step"].tolist() == [0] and call["request_idx_mapping"].tolist() == [2, 0, -1]
    call = worked_example()
    call.update(current_draft_step=None, request_idx_mapping=None)
    specops.prepare_draft_prefill_inputs(**call)
    assert call["input_ids"].tolist() == [12, 102, STALE, 200, STALE, STALE]


@st.composite
def batches(draw):
    num_reqs, rows = draw(st.integers(0, 6)), draw(st.integers(1, 6))
    query_lens = [draw(st.integers(1, 7)) for _ in range(num_reqs)]
    qsl = [0]
    for query_len in query_lens:
        qsl.append(qsl[-1] + query_len)
    num_tokens = qsl[-1]
    return dict(
        target_ids=[draw(st.integers(0, 2**31 - 1)) for _ in range(num_tokens + draw(st.integers(0, 2)))],
        target_positions=[draw(st.integers(0, 2**40)) for _ in range(num_tokens + draw(st.integers(0, 2)))],
        idx_mapping=[draw(st.integers(0, rows - 1)) for _ in range(num_reqs)], qsl=qsl,
        seq_lens=[draw(st.integers(1, 10**6)) for _ in range(num_reqs)],
        num_sampled=[draw(st.integers(0, 3)) for _ in range(num_reqs)],
        num_rejected=[draw(st.integers(0, query_len - 1)) for query_len in query_lens],
        # int64 sampled tokens past int32 show the cast.
        last_sampled=[draw(st.integers(-2**40, 2**40)) for _ in range(rows)],
        next_prefill=[[draw(st.integers(0, 10**5)) for _ in range(rows)] for _ in range(draw(st.integers(1, 3)))],
        token_room=num_tokens + draw(st.integers(0, 3)), pad=draw(st.integers(0, 3)),
        id_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
        position_dtype=draw(st.sampled_from([torch.int64, torch.int32])),
        idx_dtype=draw(st.sampled_from([torch.int32, torch.int64])), mapping=draw(st.booleans()))


@settings(max_examples=examples(30))
@given(batch=batches())
def test_random_batches_match_the_contract(backend, batch):
    num_reqs, pad, room = len(batch["idx_mapping"]), batch["pad"], batch["token_room"]
    before = dict(ids_before=[STALE] * room, positions_before=[STALE] * room,
                  qsl_before=[STALE] * (num_reqs + 1 + pad), seq_lens_before=[STALE] * (num_reqs + pad),
                  last_index_before=[STALE] * (num_reqs + pad),
                  mapping_before=[STALE] * (num_reqs + pad) if batch["mapping"] else None)
    outputs = dict(input_ids=torch.tensor(before["ids_before"], dtype=batch["id_dtype"]),
                   positions=torch.tensor(before["positions_before"], dtype=batch["position_dtype"]),
                   out_query_start_loc=t32(before["qsl_before"]), out_seq_lens=t32(before["seq_lens_before"]),
                   last_token_indices=torch.tensor(before["last_index_before"], dtype=torch.int64),
                   current_draft_step=torch.tensor(STALE),
                   request_idx_mapping=torch.tensor(before["mapping_before"], dtype=torch.int64) if batch["mapping"] else None)
    specops.prepare_draft_prefill_inputs(
        torch.tensor(batch["target_ids"], dtype=torch.int64).to(batch["id_dtype"]),
        torch.tensor(batch["target_positions"], dtype=torch.int64).to(batch["position_dtype"]),
        torch.tensor(batch["idx_mapping"], dtype=batch["idx_dtype"]), t32(batch["qsl"]), t32(batch["seq_lens"]),
        t32(batch["num_sampled"]), t32(batch["num_rejected"]), torch.tensor(batch["last_sampled"], dtype=torch.int64).view(-1, 1),
        t32(batch["next_prefill"]), **outputs)
    expected = draft_prefill_inputs(
        batch["target_ids"], batch["target_positions"], batch["idx_mapping"], batch["qsl"], batch["seq_lens"],
        batch["num_sampled"], batch["num_rejected"], batch["last_sampled"], batch["next_prefill"][0], **before,
        id_bits=32 if batch["id_dtype"] == torch.int32 else 64,
        position_bits=32 if batch["position_dtype"] == torch.int32 else 64)
    names = ("input_ids", "positions", "out_query_start_loc", "out_seq_lens", "last_token_indices",
             "request_idx_mapping")
    for name, values in zip(names, expected):
        if values is not None:
            assert outputs[name].tolist() == values, name
    assert outputs["current_draft_step"].item() == 0


def test_device_paths_clamp_what_the_host_rejects():
    """Values the host op rejects: a row outside the sources gives the next token -1, a request
    rejecting its whole query (or more) keeps no token and writes none (its last index s - 1),
    a negative rejected count keeps the whole query; nothing outside a buffer is touched."""
    for name in device_backends():
        call = worked_example()
        call.update(idx_mapping=t32([7, 0]), num_rejected=t32([-2, 1]))
        with specops.backend(name):
            specops.prepare_draft_prefill_inputs(**call)
        assert call["input_ids"].tolist() == [12, 13, -1, STALE, STALE, STALE], name
        assert call["positions"].tolist() == [5, 6, 7, STALE, STALE, STALE], name
        assert call["last_token_indices"].tolist() == [2, 2, 0, 0], name
        assert call["request_idx_mapping"].tolist() == [7, 0, -1, -1], name
        # query_start_loc[R] past every token buffer: request 1 (s = 3, 6 tokens) writes what lies
        # inside them only: no id at 3 (it would read target id 4), no next token at 8, position 3.
        call = worked_example()
        call.update(query_start_loc=t32([0, 3, 9]), num_rejected=t32([0, 0]))
        with specops.backend(name):
            specops.prepare_draft_prefill_inputs(**call)
        assert call["input_ids"].tolist() == [12, 13, 102, STALE, STALE, STALE], name
        assert call["positions"].tolist() == [5, 6, 7, 9, STALE, STALE], name
        assert call["out_query_start_loc"].tolist() == [0, 3, 9, 9, 9], name


def _inside_buffers(target_ids, target_positions, idx_mapping, qsl, num_sampled, num_rejected, last_sampled,
                    next_prefill, ids, positions):
    """(input_ids, positions, last_token_indices) as the device paths leave them for a layout
    whose first start may be negative (non-decreasing after it): each request's kept tokens, only
    those inside the buffers (docs/hardening.md: a token outside a buffer is neither read nor
    written). Plain ints: j runs only over the tokens at 0 <= s + j < the largest buffer."""
    ids, positions, last_index = list(ids), list(positions), []
    bound = max(len(target_ids), len(target_positions), len(ids), len(positions))
    for r, row in enumerate(idx_mapping):
        start = qsl[r]
        query_len = max(qsl[r + 1] - start, 0)
        kept = min(max(query_len - num_rejected[r], 0), query_len)
        next_token = int32(last_sampled[row]) if num_sampled[r] > 0 else next_prefill[row]
        for j in range(max(-start, 0), min(kept, bound - start)):
            o = start + j
            if j == kept - 1 and o < len(ids):
                ids[o] = next_token
            elif j < kept - 1 and o + 1 < len(target_ids) and o < len(ids):
                ids[o] = target_ids[o + 1]
            if o < min(len(target_positions), len(positions)):
                positions[o] = target_positions[o]
        last_index.append(start + kept - 1)
    return ids, positions, last_index


@st.composite
def negative_starts(draw):
    """query_start_loc[0] < 0 (down to -2^31), non-decreasing after it; buffers of 1 to 12 tokens."""
    first = draw(st.sampled_from([-1, -2, -3, -6, -(2**31) + 1, -(2**31)]))
    num_reqs = draw(st.integers(1, 4))
    qsl = [first, draw(st.integers(max(first, -4), 8))]
    for _ in range(num_reqs - 1):
        qsl.append(qsl[-1] + draw(st.integers(0, 5)))
    sizes = [draw(st.integers(1, 12)) for _ in range(4)]
    return dict(qsl=qsl, target_ids=[draw(st.integers(1, 999)) for _ in range(sizes[0])],
                target_positions=[draw(st.integers(0, 2**40)) for _ in range(sizes[1])], ids_room=sizes[2],
                positions_room=sizes[3], num_sampled=[draw(st.integers(0, 2)) for _ in range(num_reqs)],
                num_rejected=[draw(st.integers(0, 3)) for _ in range(num_reqs)],
                idx_mapping=[draw(st.integers(0, 3)) for _ in range(num_reqs)])


@settings(max_examples=examples(30))
@given(case=negative_starts())
@example(case=dict(qsl=[-1, 3, 4], target_ids=[11, 12, 13, 21], target_positions=[5, 6, 7, 9], ids_room=6,
                   positions_room=6, num_sampled=[2, 0], num_rejected=[0, 0], idx_mapping=[2, 0]))
def test_a_negative_first_start_writes_inside_the_buffers_only(case):
    """Once: the reference shifted target id 0 to input_ids[-1], the last entry (the C++ body
    checks t - 1 >= 0): with query_start_loc [-1, 3, 4], input_ids[5] got 11. Every device path
    writes only the tokens inside the buffers; the native op rejects the layout, writing nothing."""
    num_reqs = len(case["idx_mapping"])

    def call():
        return dict(target_input_ids=t32(case["target_ids"]), target_positions=torch.tensor(case["target_positions"]),
                    idx_mapping=t32(case["idx_mapping"]), query_start_loc=t32(case["qsl"]),
                    seq_lens=t32([8] * num_reqs), num_sampled=t32(case["num_sampled"]),
                    num_rejected=t32(case["num_rejected"]),
                    last_sampled_tokens=torch.tensor([[100], [101], [102], [103]]),
                    next_prefill_tokens=t32([[200, 201, 202, 203]]),
                    input_ids=torch.full((case["ids_room"],), STALE, dtype=torch.int32),
                    positions=torch.full((case["positions_room"],), STALE),
                    out_query_start_loc=torch.full((num_reqs + 1,), STALE, dtype=torch.int32),
                    out_seq_lens=torch.full((num_reqs,), STALE, dtype=torch.int32),
                    last_token_indices=torch.full((num_reqs,), STALE), current_draft_step=None,
                    request_idx_mapping=None)

    with specops.backend("native"):
        assert_rejected_without_writes(specops.prepare_draft_prefill_inputs, call(), argument="query_start_loc",
                                       written=OUTPUTS[:5], errors=ValueError)
    want = _inside_buffers(case["target_ids"], case["target_positions"], case["idx_mapping"], case["qsl"],
                           case["num_sampled"], case["num_rejected"], [100, 101, 102, 103], [200, 201, 202, 203],
                           [STALE] * case["ids_room"], [STALE] * case["positions_room"])
    for name in device_backends():
        given_call = call()
        with specops.backend(name):
            specops.prepare_draft_prefill_inputs(**given_call)
        assert given_call["input_ids"].tolist() == want[0], name
        assert given_call["positions"].tolist() == want[1], name
        assert given_call["last_token_indices"].tolist() == want[2], name


def _opcheck_args():
    call = worked_example()
    return tuple(call[name] for name in (
        "target_input_ids", "target_positions", "idx_mapping", "query_start_loc", "seq_lens", "num_sampled",
        "num_rejected", "last_sampled_tokens", "next_prefill_tokens", *OUTPUTS))


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.prepare_draft_prefill_inputs.default, _opcheck_args())


def test_compiles_without_graph_break():
    call = worked_example()

    def step(target_input_ids, input_ids, positions, last_token_indices):
        specops.prepare_draft_prefill_inputs(
            target_input_ids + 0, call["target_positions"], call["idx_mapping"], call["query_start_loc"],
            call["seq_lens"], call["num_sampled"], call["num_rejected"], call["last_sampled_tokens"],
            call["next_prefill_tokens"], input_ids=input_ids, positions=positions,
            out_query_start_loc=call["out_query_start_loc"], out_seq_lens=call["out_seq_lens"],
            last_token_indices=last_token_indices, current_draft_step=call["current_draft_step"],
            request_idx_mapping=call["request_idx_mapping"])
        return positions[last_token_indices[:2]] * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    fresh = worked_example()
    expected = step(fresh["target_input_ids"], fresh["input_ids"], fresh["positions"], fresh["last_token_indices"])
    again = worked_example()
    assert torch.equal(compiled(again["target_input_ids"], again["input_ids"], again["positions"],
                                again["last_token_indices"]), expected)
    assert torch.equal(again["input_ids"], fresh["input_ids"])


@pytest.mark.parametrize("change,argument", [
    (dict(num_rejected=t32([3, 0])), "num_rejected"),
    (dict(num_rejected=t32([-1, 0])), "num_rejected"),
    (dict(idx_mapping=t32([4, 0])), "idx_mapping"),
    (dict(idx_mapping=t32([2, -1])), "idx_mapping"),
    (dict(query_start_loc=t32([0, 3, 2])), "query_start_loc"),
    (dict(query_start_loc=t32([1, 3, 4])), "query_start_loc"),
    (dict(input_ids=torch.full((3,), STALE, dtype=torch.int32)), "input_ids"),
    (dict(target_positions=torch.tensor([5, 6, 7])), "target_positions"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    call = worked_example()
    call.update(change)
    with specops.backend("native"):
        assert_rejected_without_writes(specops.prepare_draft_prefill_inputs, call, argument=argument,
                                       written=OUTPUTS, errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(query_start_loc=t32([0, 3])), "query_start_loc"),
    (dict(num_sampled=t32([2])), "num_sampled"),
    (dict(out_query_start_loc=torch.full((2,), STALE, dtype=torch.int32)), "out_query_start_loc"),
    (dict(out_seq_lens=torch.full((1,), STALE, dtype=torch.int32)), "out_seq_lens"),
    (dict(last_token_indices=torch.full((1,), STALE)), "last_token_indices"),
    (dict(request_idx_mapping=torch.full((1,), STALE)), "request_idx_mapping"),
    (dict(current_draft_step=torch.tensor([0, 0])), "current_draft_step"),
    (dict(next_prefill_tokens=torch.tensor([200, 201, 202, 203])), "next_prefill_tokens"),
    (dict(seq_lens=torch.tensor([8, 10])), "seq_lens"),
    (dict(positions=torch.full((6,), 0.0)), "positions"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    call = worked_example()
    call.update(change)
    assert_rejected_without_writes(specops.prepare_draft_prefill_inputs, call, argument=argument,
                                   written=tuple(name for name in OUTPUTS if name not in change), errors=ValueError)


def test_outputs_sharing_memory_are_rejected(backend):
    call = worked_example()
    buffer = torch.full((8,), STALE, dtype=torch.int32)
    call.update(out_query_start_loc=buffer[:5], out_seq_lens=buffer[4:8])
    assert_rejected_without_writes(specops.prepare_draft_prefill_inputs, call, argument="out_seq_lens",
                                   written=("input_ids", "positions", "out_query_start_loc"), errors=ValueError)
    call = worked_example()
    call.update(input_ids=call["target_input_ids"])
    assert_rejected_without_writes(specops.prepare_draft_prefill_inputs, call, argument="target_input_ids",
                                   written=("input_ids", "positions"), errors=ValueError)
