"""compressor_metadata and compressor_metadata_multi at the int32 limits of their inputs: a query
length is cu_seqlens[r + 1] - cu_seqlens[r] in int64, as the docs' formula says
(docs/dsa_metadata_family.md), on every backend. Once, Triton and the reference subtracted in
int32: for cu_seqlens [0, -2^31, 16] request 1's length 2^31 + 16 wrapped to a negative one and
they wrote fill rows where native wrote its rows. The issue's case, then random calls whose
cu_seqlens and start_pos come from the int32 extremes (in any order), against the plain-Python
restatement (tests/ops/test_compressor_metadata.py's, in ints that never wrap)."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compressor_metadata import BLOCK, FLAT, PAIRS, restated

import specops

I32 = torch.int32
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
EDGES = [INT32_MIN, INT32_MIN + 1, -129, -1, 0, 1, 3, 4, 16, 127, 128, INT32_MAX - 128, INT32_MAX - 1, INT32_MAX]


def _rope(rows: int, dim: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    values = torch.arange(rows * dim, dtype=torch.float32).reshape(rows, dim)
    return values, values * 0.25


def _expected(cos, sin, cu, starts, table, ratio, num_rows, fmt):
    return restated(cos.tolist(), sin.tolist(), cu, starts, table, ratio, num_rows, fmt)


@pytest.mark.parametrize("fmt", [FLAT, PAIRS])
@pytest.mark.parametrize("cu", [[0, INT32_MIN, 16], [0, INT32_MAX, INT32_MIN], [INT32_MIN, INT32_MAX, INT32_MAX]],
                         ids=["the issue's", "top to bottom", "bottom to top"])
def test_query_lengths_past_int32_give_the_formulas_rows(backend, cu, fmt):
    """[0, -2^31, 16]: request 0's length is -2^31 (no row), request 1's 2^31 + 16 (from start 3,
    with ratio 4, (3 + 2^31 + 16) // 4 - 0 rows: the first 8 fill the output, compressed
    positions 0..7 of table row 1)."""
    cos, sin = _rope(64)
    table = [[1, 2], [5, 6]]
    out = specops.compressor_metadata(cos, sin, torch.tensor(cu, dtype=I32), torch.tensor([0, 3], dtype=I32),
                                      torch.tensor(table, dtype=I32), BLOCK, fmt, 4, 8, 2)
    want_cos, want_sin, want_slots = _expected(cos, sin, cu, [0, 3], table, 4, 8, fmt)
    assert out.slot_mapping.tolist() == want_slots
    assert out.compress_cos.reshape(8, 4).tolist() == want_cos
    assert out.compress_sin.reshape(8, 4).tolist() == want_sin
    if cu == [0, INT32_MIN, 16]:
        assert want_slots == ([5 * BLOCK + p for p in range(8)] if fmt == FLAT else [[5, p] for p in range(8)])


@st.composite
def limit_calls(draw):
    """cu_seqlens and start_pos from the int32 extremes and small values, in any order."""
    reqs = draw(st.integers(1, 4))
    value = st.one_of(st.sampled_from(EDGES), st.integers(-5, 300))
    cu = [draw(value) for _ in range(reqs + 1)]
    starts = [draw(value) for _ in range(reqs)]
    width = draw(st.integers(1, 4))
    table = [[draw(st.integers(-1, 40)) for _ in range(width)] for _ in range(reqs)]
    return (draw(st.sampled_from([4, 128])), cu, starts, table, draw(st.integers(1, 600)), draw(st.integers(0, 24)),
            draw(st.sampled_from([FLAT, PAIRS])))


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=examples(40))
@given(call=limit_calls())
def test_random_limits_against_the_restatement(name, call):
    ratio, cu, starts, table, rope_rows, num_rows, fmt = call
    cos, sin = _rope(rope_rows)
    with specops.backend(name):
        out = specops.compressor_metadata(cos, sin, torch.tensor(cu, dtype=I32), torch.tensor(starts, dtype=I32),
                                          torch.tensor(table, dtype=I32), BLOCK, fmt, ratio, num_rows, len(starts))
    want_cos, want_sin, want_slots = _expected(cos, sin, cu, starts, table, ratio, num_rows, fmt)
    assert out.slot_mapping.tolist() == want_slots
    assert out.compress_cos.reshape(num_rows, 4).tolist() == want_cos
    assert out.compress_sin.reshape(num_rows, 4).tolist() == want_sin


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=examples(25))
@given(steps=st.lists(limit_calls(), min_size=1, max_size=3), groups=st.integers(1, 5))
def test_multi_at_the_limits_against_the_restatement(name, steps, groups):
    """Every step s (row s of cu_seqlens / start_pos, one request count) and group g (its ratio,
    table, format and rows; 5 groups take two launches) against the restatement."""
    num_reqs = min(len(call[2]) for call in steps)
    cu = torch.tensor([call[1][:num_reqs + 1] for call in steps], dtype=I32)
    starts = torch.tensor([call[2][:num_reqs] for call in steps], dtype=I32)
    per_group = [steps[g % len(steps)] for g in range(groups)]
    ropes = [_rope(call[4]) for call in per_group]
    tables = [torch.tensor(call[3][:num_reqs], dtype=I32) for call in per_group]
    outputs = [(torch.zeros(len(steps), call[5], 1, 1, 4), torch.zeros(len(steps), call[5], 1, 1, 4),
                torch.zeros((len(steps), call[5]) if call[6] == FLAT else (len(steps), call[5], 2), dtype=I32))
               for call in per_group]
    with specops.backend(name):
        specops.compressor_metadata_multi(
            [r[0] for r in ropes], [r[1] for r in ropes], cu, starts, tables, [BLOCK] * groups,
            [call[6] for call in per_group], [call[0] for call in per_group], num_reqs,
            compress_cos=[o[0] for o in outputs], compress_sin=[o[1] for o in outputs],
            slot_mappings=[o[2] for o in outputs])
    for g, call in enumerate(per_group):
        ratio, rows, fmt = call[0], call[5], call[6]
        for s in range(len(steps)):
            want = _expected(ropes[g][0], ropes[g][1], cu[s].tolist(), starts[s].tolist(), tables[g].tolist(), ratio,
                             rows, fmt)
            assert outputs[g][2][s].tolist() == want[2], (g, s)
            assert outputs[g][0][s].reshape(rows, 4).tolist() == want[0], (g, s)
            assert outputs[g][1][s].reshape(rows, 4).tolist() == want[1], (g, s)
