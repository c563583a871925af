"""gather_block_tables: every backend against the independent expectation (tests/expectations.py),
opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from expectations import gathered_block_tables
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes, assert_same, make_block_source

import specops

NULL = specops.NULL_BLOCK_ID
STALE = 777


def test_hand_computed(backend):
    src = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]], dtype=torch.int32)
    num_blocks = torch.tensor([2, 4, 0], dtype=torch.int32)
    idx_mapping = torch.tensor([1, -1, 0, 2], dtype=torch.int32)
    out = torch.full((6, 4), STALE, dtype=torch.int32)
    result = specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded=5)
    assert result is out
    assert out.tolist() == [
        [5, 6, 7, 8],  # row 1, all 4 blocks
        [0, 0, 0, 0],  # idx -1
        [1, 2, 0, 0],  # row 0: 2 blocks, the stale 3, 4 are not copied
        [0, 0, 0, 0],  # row 2: no blocks yet
        [0, 0, 0, 0],  # padding row
        [STALE] * 4,  # past num_reqs_padded: not part of this step's extent
    ]


def test_out_wider_than_source(backend):
    src = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    num_blocks = torch.tensor([1, 2], dtype=torch.int32)
    out = torch.full((2, 5), STALE, dtype=torch.int32)
    specops.gather_block_tables(src, num_blocks, torch.tensor([1, 0]), out)
    assert out.tolist() == [[3, 4, 0, 0, 0], [1, 0, 0, 0, 0]]


def test_default_padding_is_the_whole_output(backend):
    src, num_blocks = torch.tensor([[4, 5]], dtype=torch.int32), torch.tensor([2], dtype=torch.int32)
    out = torch.full((3, 2), STALE, dtype=torch.int32)
    specops.gather_block_tables(src, num_blocks, torch.zeros(0, dtype=torch.int32), out)
    assert out.tolist() == [[NULL, NULL]] * 3


def test_sliding_window_hand_computed(backend):
    # block_size 4, reach 6: a request whose first scheduled position is p still reads the
    # tokens from p - 6 on, so its entries j < max(p - 6, 0) // 4 become NULL.
    src = torch.tensor([[1, 2, 3, 4, 5], [6, 7, 8, 9, 10], [11, 12, 13, 14, 15]], dtype=torch.int32)
    num_blocks = torch.tensor([5, 3, 5], dtype=torch.int32)
    num_computed_tokens = torch.tensor([13, 30, 9], dtype=torch.int32)
    out = torch.full((5, 5), STALE, dtype=torch.int32)
    specops.gather_block_tables(src, num_blocks, torch.tensor([0, 1, -1, 2]), out, num_reqs_padded=5,
                                num_computed_tokens=num_computed_tokens, sliding_window_reach=6, block_size=4)
    assert out.tolist() == [
        [0, 2, 3, 4, 5],  # p = 13: the window starts at 7; block 0 (tokens 0..3) lies below it, block 1 holds 7
        [0, 0, 0, 0, 0],  # p = 30: 24 // 4 = 6 entries masked, more than the row's 3 blocks
        [0, 0, 0, 0, 0],  # no row
        [11, 12, 13, 14, 15],  # p = 9: 3 // 4 = 0 entries masked
        [0, 0, 0, 0, 0],  # padding
    ]


def test_sliding_window_needs_counts_and_a_reach(backend):
    src = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    num_blocks = torch.tensor([3], dtype=torch.int32)
    idx_mapping = torch.tensor([0])
    counts = torch.tensor([100], dtype=torch.int32)
    out = torch.full((1, 3), STALE, dtype=torch.int32)
    # No counts (the reach alone masks nothing), then a reach of 0 (the group has no window).
    specops.gather_block_tables(src, num_blocks, idx_mapping, out, sliding_window_reach=4, block_size=1)
    assert out.tolist() == [[1, 2, 3]]
    specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_computed_tokens=counts)
    assert out.tolist() == [[1, 2, 3]]
    specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_computed_tokens=counts, sliding_window_reach=98,
                                block_size=1)
    assert out.tolist() == [[0, 0, 3]]


def expected_masked(src, num_blocks, idx_mapping, num_computed_tokens, reach, block_size, rows, cols):
    """Independent expectation, straight from the contract, as nested lists."""
    table = []
    for r in range(rows):
        row = int(idx_mapping[r]) if r < idx_mapping.numel() else -1
        entries = [NULL] * cols
        if row >= 0:
            count = int(num_blocks[row])
            first = max(int(num_computed_tokens[row]) - reach, 0) // block_size if reach > 0 else 0
            for j in range(first, count):
                entries[j] = int(src[row, j])
        table.append(entries)
    return table


@settings(max_examples=examples(40))
@given(
    src_rows=st.integers(1, 8),
    cols=st.integers(1, 40),
    num_reqs=st.integers(0, 8),
    reach=st.sampled_from([0, 1, 7, 64, 1000]),
    block_size=st.sampled_from([1, 4, 16]),
    idx_dtype=st.sampled_from([torch.int32, torch.int64]),
    seed=st.integers(0, 2**16),
)
def test_sliding_window_matches_the_contract_on_random_tables(backend, src_rows, cols, num_reqs, reach, block_size,
                                                              idx_dtype, seed):
    generator = torch.Generator().manual_seed(seed)
    src, num_blocks = make_block_source(generator, src_rows, cols)
    # First positions anywhere in (and past) what the rows cover.
    num_computed_tokens = torch.randint(0, cols * block_size + 2 * reach + 2, (src_rows,), dtype=torch.int32,
                                        generator=generator)
    idx_mapping = torch.randint(-1, src_rows, (num_reqs,), generator=generator).to(idx_dtype)
    padded = num_reqs + 1
    out = torch.full((padded + 1, cols), STALE, dtype=torch.int32)
    specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded=padded,
                                num_computed_tokens=num_computed_tokens, sliding_window_reach=reach,
                                block_size=block_size)
    assert out[:padded].tolist() == expected_masked(src, num_blocks, idx_mapping, num_computed_tokens, reach,
                                                    block_size, padded, cols)
    assert (out[padded] == STALE).all()


@given(
    src_rows=st.integers(1, 12),
    cols=st.integers(1, 300),
    num_reqs=st.integers(0, 12),
    extra_out_rows=st.integers(0, 10),
    extra_out_cols=st.sampled_from([0, 0, 3]),
    strided_out=st.booleans(),
    idx_dtype=st.sampled_from([torch.int32, torch.int64]),
    unmapped_fraction=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 2**16),
)
def test_matches_expectation_on_random_tables(backend, src_rows, cols, num_reqs, extra_out_rows, extra_out_cols,
                                              strided_out, idx_dtype, unmapped_fraction, seed):
    generator = torch.Generator().manual_seed(seed)
    src, num_blocks = make_block_source(generator, src_rows, cols)
    idx_mapping = torch.randint(0, src_rows, (num_reqs,), generator=generator)
    idx_mapping[torch.rand(num_reqs, generator=generator) < unmapped_fraction] = -1
    idx_mapping = idx_mapping.to(idx_dtype)
    out_rows = num_reqs + extra_out_rows
    storage = torch.randint(1, 1 << 20, (out_rows, cols + extra_out_cols + 2 * strided_out), dtype=torch.int32,
                            generator=generator)
    out = storage[:, : cols + extra_out_cols] if strided_out else storage
    num_reqs_padded = num_reqs + int(torch.randint(0, extra_out_rows + 1, (1,), generator=generator))
    expected = gathered_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded)
    specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded=num_reqs_padded)
    assert_same(out, expected, backend)


def test_many_tiles_fixed_seed(backend):
    generator = torch.Generator().manual_seed(5)
    src, num_blocks = make_block_source(generator, 64, 200)
    idx_mapping = torch.randperm(64, generator=generator)[:40].to(torch.int32)
    idx_mapping[::7] = -1
    out = torch.full((48, 200), STALE, dtype=torch.int32)
    expected = gathered_block_tables(src, num_blocks, idx_mapping, out, 45)
    specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded=45)
    assert_same(out, expected, backend)


def test_no_stale_value_survives_in_the_padded_extent(backend):
    generator = torch.Generator().manual_seed(9)
    src, num_blocks = make_block_source(generator, 8, 16)
    out = torch.full((10, 16), STALE, dtype=torch.int32)
    address = out.data_ptr()
    for num_reqs, padded in [(8, 10), (3, 4), (6, 8), (0, 2)]:
        idx_mapping = torch.randperm(8, generator=generator)[:num_reqs].to(torch.int32)
        specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded=padded)
        assert out.data_ptr() == address
        for r in range(padded):
            row = int(idx_mapping[r]) if r < num_reqs else -1
            count = int(num_blocks[row]) if row >= 0 else 0
            assert out[r, :count].tolist() == src[row, :count].tolist()
            assert (out[r, count:] == NULL).all(), f"stale ids in row {r} past its {count} blocks"


def _opcheck_args(idx_dtype, masked=False):
    generator = torch.Generator().manual_seed(2)
    src, num_blocks = make_block_source(generator, 6, 9)
    idx_mapping = torch.tensor([4, -1, 0, 5], dtype=idx_dtype)
    out = torch.zeros(6, 9, dtype=torch.int32)
    num_computed_tokens = torch.tensor([0, 9, 30, 2, 70, 17], dtype=torch.int32) if masked else None
    return (src, num_blocks, idx_mapping, out, 5, num_computed_tokens, 16 if masked else 0, 8 if masked else 0)


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_opcheck(idx_dtype, masked):
    torch.library.opcheck(torch.ops.specops.gather_block_tables.default, _opcheck_args(idx_dtype, masked))


def test_compiles_without_graph_break():
    src, num_blocks, idx_mapping, out, padded, num_computed_tokens, reach, block_size = _opcheck_args(torch.int32, True)

    def step(src, num_blocks, idx_mapping, out, num_computed_tokens):
        specops.gather_block_tables(src, num_blocks + 0, idx_mapping, out, num_reqs_padded=padded,
                                    num_computed_tokens=num_computed_tokens + 1, sliding_window_reach=reach,
                                    block_size=block_size)
        return out * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(src, num_blocks, idx_mapping, out.clone(), num_computed_tokens)
    actual = compiled(src, num_blocks, idx_mapping, out, num_computed_tokens)
    assert_same(actual, expected)
    assert_same(out * 2, expected)


def _valid_call():
    return dict(
        src_block_table=torch.tensor([[1, 2], [3, 4]], dtype=torch.int32),
        num_blocks=torch.tensor([1, 2], dtype=torch.int32),
        idx_mapping=torch.tensor([1, 0], dtype=torch.int32),
        out=torch.full((3, 2), STALE, dtype=torch.int32),
        num_reqs_padded=3,
    )


BAD_INPUTS = [
    ("src_block_table", dict(src_block_table=torch.tensor([[1, 2], [3, 4]], dtype=torch.int64))),
    ("src_block_table", dict(src_block_table=torch.tensor([1, 2, 3, 4], dtype=torch.int32))),
    ("src_block_table", dict(src_block_table=torch.tensor([[1, 2], [3, 4]], dtype=torch.int32).t())),
    ("num_blocks", dict(num_blocks=torch.tensor([1, 2], dtype=torch.int64))),
    ("num_blocks", dict(num_blocks=torch.tensor([1, 2, 0], dtype=torch.int32))),
    ("num_blocks", dict(num_blocks=torch.tensor([[1, 2]], dtype=torch.int32))),
    ("idx_mapping", dict(idx_mapping=torch.tensor([1.0, 0.0]))),
    ("idx_mapping", dict(idx_mapping=torch.tensor([[1, 0]], dtype=torch.int32))),
    ("out", dict(out=torch.full((3, 2), STALE, dtype=torch.int64))),
    ("out", dict(out=torch.full((6,), STALE, dtype=torch.int32))),
    ("num_reqs_padded", dict(num_reqs_padded=4)),
    ("num_reqs_padded", dict(num_reqs_padded=1)),
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([3, 4]))),
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([3], dtype=torch.int32))),
    ("sliding_window_reach", dict(sliding_window_reach=-1)),
    ("block_size", dict(sliding_window_reach=4)),  # a reach needs the block size
    ("block_size", dict(sliding_window_reach=4, block_size=0)),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = {**_valid_call(), **change}
    assert_rejected_without_writes(specops.gather_block_tables, call, argument=argument, written=("out",))


VALUE_ERRORS = [
    ("idx_mapping", dict(idx_mapping=torch.tensor([2, 0], dtype=torch.int32))),  # past the source table
    ("num_blocks", dict(num_blocks=torch.tensor([1, 3], dtype=torch.int32))),  # more than the columns
    ("num_blocks", dict(num_blocks=torch.tensor([-1, 2], dtype=torch.int32))),
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([5, -1], dtype=torch.int32), sliding_window_reach=2,
                                 block_size=1)),
]


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VALUE_ERRORS)])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = {**_valid_call(), **change}
    assert_rejected_without_writes(specops.gather_block_tables, call, argument=argument, written=("out",),
                                   errors=ValueError)


@pytest.mark.parametrize(
    "change,expected",
    [
        (VALUE_ERRORS[0][1], [[0, 0], [1, 0], [0, 0]]),  # a row past the table reads nothing
        (VALUE_ERRORS[1][1], [[3, 4], [1, 0], [0, 0]]),  # a count past the columns is clamped
        (VALUE_ERRORS[2][1], [[3, 4], [0, 0], [0, 0]]),  # a negative count copies nothing
        (VALUE_ERRORS[3][1], [[3, 4], [0, 0], [0, 0]]),  # a negative first position masks nothing
    ],
)
def test_device_paths_write_null_for_invalid_values(change, expected):
    for name in device_backends():
        with specops.backend(name):
            out = specops.gather_block_tables(**{**_valid_call(), **change})
        assert out.tolist() == expected, name
