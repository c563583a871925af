"""apply_staged_writes: every backend against the independent expectation (tests/expectations.py),
opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from conftest import device_backends
from expectations import staged_table
from strategies import assert_rejected_without_writes, assert_same, make_staged_writes

import specops


def i32(values):
    return torch.tensor(values, dtype=torch.int32)


def test_hand_computed(backend):
    table = torch.zeros(3, 5, dtype=torch.int32)
    # write 0: row 2, columns 1..2 <- 7, 8; write 1: empty; write 2: row 2, column 4 <- 9;
    # write 3: row 0, columns 0..2 <- 1, 2, 3
    result = specops.apply_staged_writes(table, torch.tensor([2, 0, 2, 0]), i32([1, 0, 4, 0]), i32([0, 2, 2, 3, 6]),
                                         i32([7, 8, 9, 1, 2, 3]))
    assert result is table
    assert table.tolist() == [[1, 2, 3, 0, 0], [0, 0, 0, 0, 0], [0, 7, 8, 0, 9]]


def test_no_writes_is_a_no_op(backend):
    table = torch.arange(6, dtype=torch.int32).view(2, 3)
    specops.apply_staged_writes(table, torch.zeros(0, dtype=torch.int32), i32([]), i32([0]), i32([5, 6]))
    assert table.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_values_past_cu_lens_end_are_ignored(backend):
    table = torch.zeros(1, 4, dtype=torch.int32)
    specops.apply_staged_writes(table, i32([0]), i32([1]), i32([0, 2]), i32([5, 6, 7, 8]))
    assert table.tolist() == [[0, 5, 6, 0]]


@given(
    table_rows=st.integers(1, 10),
    table_cols=st.integers(1, 40),
    rows_dtype=st.sampled_from([torch.int32, torch.int64]),
    strided_table=st.booleans(),
    extra_values=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_matches_expectation_on_random_writes(backend, table_rows, table_cols, rows_dtype, strided_table,
                                              extra_values, seed):
    generator = torch.Generator().manual_seed(seed)
    rows, starts, cu_lens, values = make_staged_writes(generator, table_rows, table_cols)
    rows = rows.to(rows_dtype)
    values = torch.cat([values, torch.full((extra_values,), -5, dtype=torch.int32)])
    storage = torch.randint(0, 100, (table_rows, table_cols + 3 * strided_table), dtype=torch.int32,
                            generator=generator)
    table = storage[:, :table_cols] if strided_table else storage
    expected = staged_table(table, rows, starts, cu_lens, values)
    specops.apply_staged_writes(table, rows, starts, cu_lens, values)
    assert_same(table, expected, backend)


def test_many_tiles_fixed_seed(backend):
    generator = torch.Generator().manual_seed(4)
    rows, starts, cu_lens, values = make_staged_writes(generator, 64, 100, row_fraction=0.9)
    assert values.numel() > 2 * 1024  # several Triton tiles
    table = torch.zeros(64, 100, dtype=torch.int32)
    expected = staged_table(table, rows, starts, cu_lens, values)
    specops.apply_staged_writes(table, rows, starts, cu_lens, values)
    assert_same(table, expected, backend)


def test_writes_touch_only_their_ranges(backend):
    table = torch.full((4, 6), -3, dtype=torch.int32)
    address = table.data_ptr()
    specops.apply_staged_writes(table, i32([1, 3]), i32([2, 0]), i32([0, 3, 4]), i32([1, 2, 3, 4]))
    assert table.data_ptr() == address
    written = torch.zeros(4, 6, dtype=torch.bool)
    written[1, 2:5] = True
    written[3, 0] = True
    assert (table[~written] == -3).all()
    assert table[written].tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("name", ["native", "reference"])
def test_sequential_backends_apply_overlapping_writes_in_order(name):
    table = torch.zeros(1, 4, dtype=torch.int32)
    with specops.backend(name):
        specops.apply_staged_writes(table, i32([0, 0]), i32([0, 1]), i32([0, 3, 5]), i32([1, 2, 3, 8, 9]))
    assert table.tolist() == [[1, 8, 9, 0]]


def _opcheck_args(rows_dtype):
    generator = torch.Generator().manual_seed(8)
    rows, starts, cu_lens, values = make_staged_writes(generator, 5, 7, row_fraction=1.0)
    return (torch.zeros(5, 7, dtype=torch.int32), rows.to(rows_dtype), starts, cu_lens, values)


@pytest.mark.parametrize("rows_dtype", [torch.int32, torch.int64])
def test_opcheck(rows_dtype):
    torch.library.opcheck(torch.ops.specops.apply_staged_writes.default, _opcheck_args(rows_dtype))


def test_compiles_without_graph_break():
    table, rows, starts, cu_lens, values = _opcheck_args(torch.int32)

    def step(table, rows, starts, cu_lens, values):
        specops.apply_staged_writes(table, rows, starts, cu_lens, values + 1)
        return table.sum(dim=1)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    eager_table = table.clone()
    expected = step(eager_table, rows, starts, cu_lens, values)
    actual = compiled(table, rows, starts, cu_lens, values)
    assert_same(actual, expected)
    assert_same(table, eager_table)


def _valid_call():
    return dict(table=torch.full((2, 3), 4, dtype=torch.int32), rows=i32([1, 0]), starts=i32([0, 1]),
                cu_lens=i32([0, 2, 3]), values=i32([7, 8, 9]))


BAD_INPUTS = [
    ("table", dict(table=torch.full((2, 3), 4, dtype=torch.int64))),
    ("table", dict(table=torch.full((6,), 4, dtype=torch.int32))),
    ("table", dict(table=torch.full((3, 2), 4, dtype=torch.int32).t())),
    ("rows", dict(rows=torch.tensor([1.0, 0.0]))),
    ("rows", dict(rows=i32([[1, 0]]))),
    ("starts", dict(starts=torch.tensor([0, 1]))),
    ("starts", dict(starts=i32([0]))),
    ("cu_lens", dict(cu_lens=torch.tensor([0, 2, 3]))),
    ("cu_lens", dict(cu_lens=i32([0, 2]))),
    ("values", dict(values=torch.tensor([7, 8, 9]))),
    ("values", dict(values=i32([[7, 8, 9]]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = {**_valid_call(), **change}
    assert_rejected_without_writes(specops.apply_staged_writes, call, argument=argument, written=("table",))


VALUE_ERRORS = [
    ("rows", dict(rows=i32([2, 0]))),  # past the table
    ("rows", dict(rows=torch.tensor([1, -1]))),
    ("starts", dict(starts=i32([2, 1]))),  # 2 values from column 2 run past 3 columns
    ("starts", dict(starts=i32([0, -1]))),
    ("cu_lens", dict(cu_lens=i32([1, 2, 3]))),  # must start at 0
    ("cu_lens", dict(cu_lens=i32([0, 2, 1]))),  # decreasing
    ("cu_lens", dict(cu_lens=i32([0, 2, 4]))),  # past the end of values
]


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VALUE_ERRORS)])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = {**_valid_call(), **change}
    assert_rejected_without_writes(specops.apply_staged_writes, call, argument=argument, written=("table",),
                                   errors=ValueError)


@pytest.mark.parametrize(
    "change,expected",
    [
        # The write that does not fit is dropped whole; the other one still lands.
        (VALUE_ERRORS[0][1], [[4, 9, 4], [4, 4, 4]]),
        (VALUE_ERRORS[1][1], [[4, 4, 4], [7, 8, 4]]),
        (VALUE_ERRORS[2][1], [[4, 9, 4], [4, 4, 4]]),
        (VALUE_ERRORS[3][1], [[4, 4, 4], [7, 8, 4]]),
        (VALUE_ERRORS[6][1], [[4, 4, 4], [7, 8, 4]]),
    ],
)
def test_device_paths_drop_writes_that_do_not_fit(change, expected):
    for name in device_backends():
        with specops.backend(name):
            table = specops.apply_staged_writes(**{**_valid_call(), **change})
        assert table.tolist() == expected, name
