"""count_sampled_and_rejected: the worked examples, random batches against the plain-Python
contract on every backend, padding, -1 rows, opcheck, compile, host value checks."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import sampled_and_rejected
from strategies import assert_rejected_without_writes

import specops

STALE = 77


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def test_example_rejection_sampler(backend):
    num_sampled = t32([2, 1, 1, 4])
    result = specops.count_sampled_and_rejected(num_sampled, t32([20, 5, 9, 33]), t32([0, 3, 4, 5, 9]),
                                                t32([3, 0, 1, 2]), t32([8, 9, 30, 8]))
    assert result.num_sampled is num_sampled
    assert num_sampled.tolist() == [2, 0, 1, 4]
    assert result.num_rejected.tolist() == [1, 0, 0, 0]


def test_example_plain_sampler(backend):
    result = specops.count_sampled_and_rejected(t32([1, 1, 1]), t32([7, 12, 3]), t32([0, 1, 2, 3]), t32([0, 1, 2]),
                                                t32([10, 4, 3]))
    assert result.num_sampled.tolist() == [0, 1, 1]
    assert result.num_rejected.tolist() == [0, 0, 0]


def test_padding_and_unmapped_rows(backend):
    num_sampled = t32([2, 1, STALE, STALE])
    num_rejected = t32([STALE] * 5)
    specops.count_sampled_and_rejected(num_sampled, t32([9, 9]), t32([0, 3, 5]), torch.tensor([-1, 0]), t32([4]),
                                       num_rejected=num_rejected, num_reqs_padded=4)
    assert num_sampled.tolist() == [0, 1, 0, 0]
    # num_reqs_padded stops the padding at 4: the fifth entry is left as it was.
    assert num_rejected.tolist() == [0, 1, 0, 0, STALE]
    default = specops.count_sampled_and_rejected(t32([1, STALE]), t32([5, 0]), t32([0, 2]), t32([0]), t32([1]))
    assert default.num_sampled.tolist() == [1, 0] and default.num_rejected.tolist() == [1]


@st.composite
def batches(draw):
    num_reqs = draw(st.integers(0, 7))
    rows = draw(st.integers(1, 6))
    idx = [draw(st.integers(-1, rows - 1)) for _ in range(num_reqs)]
    counts = [draw(st.integers(0, 4)) for _ in range(num_reqs)]
    cu = [0]
    for count in counts:
        cu.append(cu[-1] + count)
    prefill = [draw(st.integers(0, 30)) for _ in range(rows)]
    seq_lens = [draw(st.integers(0, 30)) for _ in range(num_reqs)]
    sampled = [draw(st.integers(0, count)) for count in counts]
    return idx, sampled, seq_lens, cu, prefill, draw(st.sampled_from([torch.int32, torch.int64])), draw(st.integers(0, 3))


@settings(max_examples=examples(25))
@given(batch=batches())
def test_random_batches_match_the_contract(backend, batch):
    idx, sampled, seq_lens, cu, prefill, dtype, extra = batch
    num_sampled = t32(sampled + [STALE] * extra)
    num_rejected = t32([STALE] * (len(idx) + extra))
    specops.count_sampled_and_rejected(num_sampled, t32(seq_lens), t32(cu), torch.tensor(idx, dtype=dtype),
                                       t32(prefill), num_rejected=num_rejected)
    expected_sampled, expected_rejected = sampled_and_rejected(sampled, seq_lens, cu, idx, prefill)
    assert num_sampled.tolist() == expected_sampled + [0] * extra
    assert num_rejected.tolist() == expected_rejected + [0] * extra


def test_rows_past_prefill_len_count_as_chunked_on_the_device_paths():
    for name in device_backends():
        with specops.backend(name):
            result = specops.count_sampled_and_rejected(t32([1, 2]), t32([9, 9]), t32([0, 2, 4]), t32([5, 0]),
                                                        t32([3]))
        assert result.num_sampled.tolist() == [0, 2] and result.num_rejected.tolist() == [0, 0], name


def _opcheck_args():
    return (t32([2, 1, 1, 4, 9]), t32([20, 5, 9, 33]), t32([0, 3, 4, 5, 9]), t32([3, 0, 1, 2]), t32([8, 9, 30, 8]),
            torch.empty(6, dtype=torch.int32), 5)


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.count_sampled_and_rejected.default, _opcheck_args())


def test_compiles_without_graph_break():
    num_sampled, seq_lens, cu, idx, prefill, num_rejected, _ = _opcheck_args()

    def step(num_sampled, seq_lens, num_rejected):
        counts = specops.count_sampled_and_rejected(num_sampled, seq_lens + 0, cu, idx, prefill,
                                                    num_rejected=num_rejected, num_reqs_padded=5)
        return counts.num_rejected * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(num_sampled.clone(), seq_lens, num_rejected.clone())
    assert torch.equal(compiled(num_sampled, seq_lens, num_rejected), expected)


def test_native_rejects_a_kept_count_past_the_logits_and_writes_nothing():
    call = dict(num_sampled=t32([4, 1]), seq_lens=t32([9, 9]), cu_num_logits=t32([0, 3, 4]), idx_mapping=t32([0, 1]),
                prefill_len=t32([1, 1]), num_rejected=t32([STALE, STALE]))
    with specops.backend("native"):
        assert_rejected_without_writes(specops.count_sampled_and_rejected, call, argument="num_sampled",
                                       written=("num_sampled", "num_rejected"), errors=ValueError)
        call.update(num_sampled=t32([1, 1]), idx_mapping=t32([0, 2]))
        assert_rejected_without_writes(specops.count_sampled_and_rejected, call, argument="idx_mapping",
                                       written=("num_sampled", "num_rejected"), errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(cu_num_logits=t32([0, 3])), "cu_num_logits"),
    (dict(num_rejected=t32([STALE])), "num_rejected"),
    (dict(seq_lens=torch.tensor([9, 9])), "seq_lens"),
    (dict(num_reqs_padded=5), "num_reqs_padded"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    call = dict(num_sampled=t32([1, 1]), seq_lens=t32([9, 9]), cu_num_logits=t32([0, 3, 4]), idx_mapping=t32([0, 1]),
                prefill_len=t32([1, 1]), num_rejected=t32([STALE, STALE]))
    call.update(change)
    assert_rejected_without_writes(specops.count_sampled_and_rejected, call, argument=argument,
                                   written=("num_sampled",))
