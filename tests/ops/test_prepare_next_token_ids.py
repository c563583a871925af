"""prepare_next_token_ids: the worked examples, random batches against the plain-Python contract
on every backend, the device backup gather, padding, opcheck, compile, host value checks."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import next_tokens
from strategies import assert_rejected_without_writes

import specops

F, T = False, True


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def test_example_padded_path(backend):
    result = specops.prepare_next_token_ids(
        torch.tensor([[5, 6, -1, -1], [20, -1, -1, -1], [7, 8, 9, 10], [11, -1, -1, -1], [30, 31, 100, -1]]), 100,
        discard_request_mask=torch.tensor([F, F, F, T, F]), backup_next_token_ids=t32([90, 91, 92, 93, 94]),
        cu_num_draft_tokens=t32([3, 6, 9, 9, 12]), query_start_loc=t32([0, 4, 8, 12, 13, 17]))
    assert result.next_token_ids.tolist() == [6, 20, 10, 93, 31]
    assert result.valid_sampled_token_count.tolist() == [2, 1, 4, 0, 2]
    assert result.num_rejected_tokens.tolist() == [2, 3, 0, 0, 2]
    assert result.token_indices_to_sample.tolist() == [1, 4, 11, 12, 14]


def test_example_valid_tokens_not_a_prefix(backend):
    result = specops.prepare_next_token_ids(
        torch.tensor([[-1, 7], [4, -1], [-1, -1]], dtype=torch.int32), 50, backup_next_token_ids=t32([60, 61, 62]),
        cu_num_draft_tokens=t32([1, 2, 2]), query_start_loc=t32([0, 2, 4, 5]))
    assert result.next_token_ids.tolist() == [7, 4, 62]
    assert result.valid_sampled_token_count.tolist() == [1, 1, 0]
    assert result.num_rejected_tokens.tolist() == [1, 1, 0]
    assert result.token_indices_to_sample.tolist() == [0, 2, 4]


def test_example_device_backup(backend):
    result = specops.prepare_next_token_ids(
        torch.tensor([[7], [8], [-1]]), 32, discard_request_mask=torch.tensor([F, T, F]),
        token_ids=t32([[1, 2, 3, 0], [4, 5, 6, 0], [7, 8, 9, 0]]), num_tokens_no_spec=t32([3, 2, 1]))
    assert result.next_token_ids.tolist() == [7, 5, 7]
    assert result.valid_sampled_token_count.tolist() == [1, 0, 0]
    assert result.num_rejected_tokens is None and result.token_indices_to_sample is None


def test_negative_tokens_other_than_minus_one_are_invalid(backend):
    result = specops.prepare_next_token_ids(torch.tensor([[-2, -1]]), 10, backup_next_token_ids=t32([4]))
    assert result.next_token_ids.tolist() == [4] and result.valid_sampled_token_count.tolist() == [0]


def test_backup_outside_the_row_is_minus_one_and_padding_is_zero(backend):
    out = t32([55] * 4)
    count = t32([55] * 3)
    specops.prepare_next_token_ids(torch.tensor([[-1], [-1]]), 10, token_ids=t32([[1, 2], [3, 4]]),
                                   num_tokens_no_spec=t32([0, 3]), next_token_ids=out,
                                   valid_sampled_token_count=count)
    assert out.tolist() == [-1, -1, 0, 0]
    assert count.tolist() == [0, 0, 0]


@st.composite
def batches(draw):
    num_reqs = draw(st.integers(0, 6))
    k = draw(st.integers(0, 3))
    vocab = draw(st.integers(1, 40))
    sampled, drafts, qsl = [], [], [0]
    for _ in range(num_reqs):
        d = draw(st.integers(0, k))
        prefix = draw(st.integers(0, k + 1))
        row = [draw(st.integers(0, vocab - 1)) for _ in range(prefix)]
        row += [draw(st.sampled_from([-1, vocab, vocab + 5])) for _ in range(k + 1 - prefix)]
        sampled.append(row)
        drafts.append(d)
        qsl.append(qsl[-1] + d + 1 + draw(st.integers(0, 3)))
    cu, total = [], 0
    for d in drafts:
        total += d
        cu.append(total)
    discard = [draw(st.booleans()) for _ in range(num_reqs)]
    return dict(sampled=sampled, k=k, vocab=vocab, cu=cu, qsl=qsl, discard=discard,
                dtype=draw(st.sampled_from([torch.int32, torch.int64])), extra=draw(st.integers(0, 2)))


@settings(max_examples=examples(25))
@given(batch=batches())
def test_random_batches_match_the_contract(backend, batch):
    num_reqs = len(batch["sampled"])
    sampled = torch.tensor(batch["sampled"], dtype=batch["dtype"]).view(num_reqs, batch["k"] + 1)
    backup = list(range(900, 900 + num_reqs))
    outputs = [t32([55] * (num_reqs + batch["extra"])) for _ in range(4)]
    result = specops.prepare_next_token_ids(
        sampled, batch["vocab"], discard_request_mask=torch.tensor(batch["discard"], dtype=torch.bool),
        backup_next_token_ids=t32(backup), cu_num_draft_tokens=t32(batch["cu"]), query_start_loc=t32(batch["qsl"]),
        next_token_ids=outputs[0], valid_sampled_token_count=outputs[1], num_rejected_tokens=outputs[2],
        token_indices_to_sample=outputs[3])
    expected = next_tokens(batch["sampled"], batch["vocab"], discard=batch["discard"], backup=backup, cu=batch["cu"],
                           qsl=batch["qsl"])
    for actual, want in zip(result, expected):
        assert actual.tolist() == want + [0] * batch["extra"]


def test_device_paths_take_the_highest_valid_column():
    for name in device_backends():
        with specops.backend(name):
            result = specops.prepare_next_token_ids(torch.tensor([[3, -1, 4, 50]]), 10, backup_next_token_ids=t32([1]))
        assert result.next_token_ids.tolist() == [4] and result.valid_sampled_token_count.tolist() == [2], name


def _opcheck_args():
    return (torch.tensor([[5, 6, -1, -1], [20, -1, -1, -1], [7, 8, 9, 10]]), 100, torch.tensor([F, T, F]), None,
            t32([[1, 2, 3], [4, 5, 6], [7, 8, 9]]), t32([3, 2, 1]), t32([3, 6, 9]), t32([0, 4, 8, 12]),
            torch.empty(4, dtype=torch.int32), torch.empty(4, dtype=torch.int32), torch.empty(4, dtype=torch.int32),
            torch.empty(4, dtype=torch.int32), 4)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.prepare_next_token_ids.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(sampled):
        result = specops.prepare_next_token_ids(sampled + 0, 100, discard_request_mask=args[2], token_ids=args[4],
                                                num_tokens_no_spec=args[5], cu_num_draft_tokens=args[6],
                                                query_start_loc=args[7])
        return result.next_token_ids + 1, result.token_indices_to_sample * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(args[0])
    assert all(torch.equal(a, e) for a, e in zip(compiled(args[0]), expected))


def _call(**change):
    call = dict(sampled_token_ids=torch.tensor([[5, 6], [20, -1]]), vocab_size=100, backup_next_token_ids=t32([1, 2]),
                cu_num_draft_tokens=t32([1, 2]), query_start_loc=t32([0, 2, 4]), next_token_ids=t32([55, 55]),
                valid_sampled_token_count=t32([55, 55]), num_rejected_tokens=t32([55, 55]),
                token_indices_to_sample=t32([55, 55]))
    call.update(change)
    return call


WRITTEN = ("next_token_ids", "valid_sampled_token_count", "num_rejected_tokens", "token_indices_to_sample")


@pytest.mark.parametrize("change,argument", [
    (dict(cu_num_draft_tokens=t32([2, 1])), "cu_num_draft_tokens"),
    (dict(cu_num_draft_tokens=t32([2, 2])), "cu_num_draft_tokens"),  # 2 drafts in a 2-token query
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    with specops.backend("native"):
        assert_rejected_without_writes(specops.prepare_next_token_ids, _call(**change), argument=argument,
                                       written=WRITTEN, errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(vocab_size=0), "vocab_size"),
    (dict(token_ids=t32([[1], [2]]), num_tokens_no_spec=t32([1, 1])), "backup_next_token_ids"),
    (dict(query_start_loc=None), "query_start_loc"),
    (dict(next_token_ids=t32([55])), "next_token_ids"),
    (dict(num_reqs_padded=3), "num_reqs_padded"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    assert_rejected_without_writes(specops.prepare_next_token_ids, _call(**change), argument=argument,
                                   written=("valid_sampled_token_count",))
