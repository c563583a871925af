"""dspark_swa_indices_multi: every DSpark group's indices in one call. Hand-computed rows of two
groups, random groups and CP ranks against the contract written in plain Python, each group
equal to the single-group op, one op call for all groups, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import examples
from host_syncs import OpLog
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_same, cp_batches

import specops

PAD = specops.PAD_SLOT_ID
INT32_MAX = 2**31 - 1


def expected_rows(block_table: list[list[int]], query_start_loc: list[int], seq_lens: list[int], window: int,
                  block_size: int, width: int, num_tokens: int, cp_size: int, cp_rank: int):
    """The contract in plain Python: this rank's rows of the stream padded to a multiple of
    cp_size; a token of request r sees positions start .. seq_lens[r] - 1 with
    start = max(seq_lens[r] - q_len - window, 0), at most `width` of them."""
    per_rank = -(-num_tokens // cp_size)
    rows, lens = [], []
    for token in range(cp_rank * per_rank, (cp_rank + 1) * per_rank):
        request = next((r for r in range(len(seq_lens)) if query_start_loc[r] <= token < query_start_loc[r + 1]), None)
        if request is None:
            rows.append([PAD] * width)
            lens.append(0)
            continue
        query_len = query_start_loc[request + 1] - query_start_loc[request]
        seq_len = seq_lens[request]
        start = max(seq_len - query_len - window, 0)
        visible = min(max(seq_len - start, 0), width)
        row = []
        for j in range(width):
            slot = PAD
            position = start + j
            column = position // block_size
            if j < visible and request < len(block_table) and column < len(block_table[request]):
                block = block_table[request][column]
                if block >= 0 and block * block_size + position % block_size <= INT32_MAX:
                    slot = block * block_size + position % block_size
            row.append(slot)
        rows.append(row)
        lens.append(visible)
    return rows, lens


# Request 0: 2 tokens, seq_len 9; request 1: empty; request 2: 3 tokens, seq_len 4; 2 padding tokens.
QUERY_START_LOC = [0, 2, 2, 5]
SEQ_LENS = [9, 7, 4]
# Group 0: window 3, block size 4: request 0 sees positions 4..8, request 2 positions 0..3.
TABLE_0 = [[10, 11, 12], [30, 31, 32], [20, 21, 22]]
ROW_0_REQ_0 = [44, 45, 46, 47, 48, PAD, PAD, PAD]
ROW_0_REQ_2 = [80, 81, 82, 83, PAD, PAD, PAD, PAD]
# Group 1: window 1, block size 2: request 0 sees positions 6..8 (blocks 4, 4, 5 of its row),
# request 2 positions 0..3 (blocks 13, 13, 14, 14).
TABLE_1 = [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]]
ROW_1_REQ_0 = [8, 9, 10, PAD, PAD]
ROW_1_REQ_2 = [26, 27, 28, 29, PAD]


def _hand_inputs():
    return ([torch.tensor(TABLE_0, dtype=torch.int32), torch.tensor(TABLE_1, dtype=torch.int32)],
            torch.tensor(QUERY_START_LOC, dtype=torch.int32), torch.tensor(SEQ_LENS, dtype=torch.int32))


def test_hand_computed_two_groups(backend):
    tables, query_start_loc, seq_lens = _hand_inputs()
    out, out_lens = specops.dspark_swa_indices_multi(tables, query_start_loc, seq_lens, windows=[3, 1],
                                                     num_speculative_tokens=2, block_sizes=[4, 2], num_tokens=7,
                                                     widths=[8, 5])
    assert [t.shape for t in out] == [(7, 1, 8), (7, 1, 5)]
    assert out[0][:, 0].tolist() == [ROW_0_REQ_0] * 2 + [ROW_0_REQ_2] * 3 + [[PAD] * 8] * 2
    assert out[1][:, 0].tolist() == [ROW_1_REQ_0] * 2 + [ROW_1_REQ_2] * 3 + [[PAD] * 5] * 2
    assert out_lens[0].tolist() == [5, 5, 4, 4, 4, 0, 0]
    assert out_lens[1].tolist() == [3, 3, 4, 4, 4, 0, 0]


def test_hand_computed_rank_slice_and_default_widths(backend):
    # 7 tokens over 3 ranks pad to 9: rank 1 holds tokens 3, 4, 5 (request 2 twice, then padding).
    tables, query_start_loc, seq_lens = _hand_inputs()
    out, out_lens = specops.dspark_swa_indices_multi(tables, query_start_loc, seq_lens, windows=[3, 1],
                                                     num_speculative_tokens=2, block_sizes=[4, 2], num_tokens=7,
                                                     cp_size=3, cp_rank=1)
    assert [t.shape for t in out] == [(3, 1, 128), (3, 1, 128)]  # ceil((window + 2) / 128) * 128
    assert out[0][:, 0, :8].tolist() == [ROW_0_REQ_2, ROW_0_REQ_2, [PAD] * 8]
    assert out[1][:, 0, :5].tolist() == [ROW_1_REQ_2, ROW_1_REQ_2, [PAD] * 5]
    assert (out[0][:, :, 8:] == PAD).all() and (out[1][:, :, 5:] == PAD).all()
    assert [t.tolist() for t in out_lens] == [[4, 4, 0], [4, 4, 0]]


@settings(max_examples=examples(40))  # the Triton interpreter runs each example's programs one by one
@given(batch=cp_batches(max_reqs=5, max_query_len=6, max_context=40, block_size=4), rank_choice=st.integers(0, 7),
       windows=st.lists(st.integers(0, 12), min_size=1, max_size=3), block_size_choices=st.data(),
       num_speculative_tokens=st.integers(0, 4), extra_rows=st.integers(0, 2))
def test_matches_the_contract_and_the_single_group_op(backend, batch, rank_choice, windows, block_size_choices,
                                                      num_speculative_tokens, extra_rows):
    num_groups = len(windows)
    block_sizes = [block_size_choices.draw(st.sampled_from([1, 2, 4])) for _ in windows]
    query_lens = (batch.query_start_loc[1:] - batch.query_start_loc[:-1]).tolist()
    # Every group's own table: batch.block_table covers the batch at block size 4; a smaller block
    # size needs more columns, so each table is drawn again at its size.
    generator = torch.Generator().manual_seed(len(query_lens) + 7 * num_groups)
    max_seq = max(batch.seq_lens.tolist(), default=0)
    tables = []
    for block_size in block_sizes:
        table = torch.randint(0, 1 << 12, (batch.block_table.size(0), max(1, -(-max_seq // block_size))),
                              dtype=torch.int32, generator=generator)
        table[torch.rand(table.shape, generator=generator) < 0.05] = -1
        tables.append(table)
    widths = [max(1, window + max([num_speculative_tokens, *query_lens])) + g for g, window in enumerate(windows)]
    cp_rank = rank_choice % batch.cp_size
    rows = -(-batch.num_input_tokens // batch.cp_size)
    out = [torch.full((rows + extra_rows, 1, width), 4321, dtype=torch.int32) for width in widths]
    out_lens = [torch.full((rows + extra_rows,), 4321, dtype=torch.int32) for _ in widths]
    specops.dspark_swa_indices_multi(tables, batch.query_start_loc, batch.seq_lens, windows=windows,
                                     num_speculative_tokens=num_speculative_tokens, block_sizes=block_sizes,
                                     num_tokens=batch.num_input_tokens, widths=widths, cp_size=batch.cp_size,
                                     cp_rank=cp_rank, out=out, out_lens=out_lens)
    for g in range(num_groups):
        expected, expected_lens = expected_rows(tables[g].tolist(), batch.query_start_loc.tolist(),
                                                batch.seq_lens.tolist(), windows[g], block_sizes[g], widths[g],
                                                batch.num_input_tokens, batch.cp_size, cp_rank)
        assert out[g][:rows, 0].tolist() == expected, f"group {g}"
        assert out_lens[g][:rows].tolist() == expected_lens, f"group {g} lens"
        assert (out[g][rows:] == 4321).all() and (out_lens[g][rows:] == 4321).all()  # nothing past the slice
        with specops.backend("native"):
            single, single_lens = specops.dspark_swa_indices(
                tables[g], batch.query_start_loc, batch.seq_lens, window=windows[g],
                num_speculative_tokens=num_speculative_tokens, block_size=block_sizes[g],
                num_tokens=batch.num_input_tokens, width=widths[g], cp_size=batch.cp_size, cp_rank=cp_rank)
        assert_same(out[g][:rows], single, f"group {g} against dspark_swa_indices")
        assert_same(out_lens[g][:rows], single_lens, f"group {g} lens against dspark_swa_indices")


def test_one_op_call_builds_every_group():
    tables, query_start_loc, seq_lens = _hand_inputs()
    with specops.backend("native"), OpLog() as log:
        out, _ = specops.dspark_swa_indices_multi(tables * 2, query_start_loc, seq_lens, windows=[3, 1, 3, 1],
                                                  num_speculative_tokens=2, block_sizes=[4, 2, 4, 2], num_tokens=7,
                                                  widths=8)
    assert [name for name in log.op_names() if name != "empty"] == ["dspark_swa_indices_multi"]
    assert out[3][0, 0, :5].tolist() == ROW_1_REQ_0


def test_no_groups_checks_the_batch_and_writes_nothing(backend):
    tables, query_start_loc, seq_lens = _hand_inputs()
    assert specops.dspark_swa_indices_multi([], query_start_loc, seq_lens, windows=[], num_speculative_tokens=2,
                                            block_sizes=[], num_tokens=7) == ([], [])
    with pytest.raises(ValueError, match="seq_lens"):
        specops.dspark_swa_indices_multi([], query_start_loc, seq_lens[:2], windows=[], num_speculative_tokens=2,
                                         block_sizes=[], num_tokens=7)


def _opcheck_args(cp_size, cp_rank):
    tables, query_start_loc, seq_lens = _hand_inputs()
    rows = -(-9 // cp_size)
    return (tables, query_start_loc, seq_lens, [3, 1], 2, [4, 2], 9, [8, 5], cp_size, cp_rank,
            [torch.empty(rows + 1, 1, 8, dtype=torch.int32), torch.empty(rows, 1, 5, dtype=torch.int32)],
            [torch.empty(rows + 2, dtype=torch.int32), torch.empty(rows, dtype=torch.int32)])


@pytest.mark.parametrize("cp_size,cp_rank", [(1, 0), (4, 3)])
def test_opcheck(cp_size, cp_rank):
    torch.library.opcheck(torch.ops.specops.dspark_swa_indices_multi.default, _opcheck_args(cp_size, cp_rank))


def test_compiles_without_graph_break():
    tables, query_start_loc, seq_lens, windows, k, block_sizes, num_tokens, widths, *_, out, out_lens = \
        _opcheck_args(2, 1)

    def step(table_0, table_1, query_start_loc, seq_lens, out_0, out_1, lens_0, lens_1):
        specops.dspark_swa_indices_multi([table_0, table_1], query_start_loc, seq_lens + 0, windows=windows,
                                         num_speculative_tokens=k, block_sizes=block_sizes, num_tokens=num_tokens,
                                         widths=widths, cp_size=2, cp_rank=1, out=[out_0, out_1],
                                         out_lens=[lens_0, lens_1])
        return out_0 + 1, out_1 * 2, lens_0 - 1, lens_1

    args = (*tables, query_start_loc, seq_lens, *out, *out_lens)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(*(t.clone() for t in args))
    for actual, wanted in zip(compiled(*args), expected):
        assert_same(actual, wanted)


def _valid_call():
    tables, query_start_loc, seq_lens = _hand_inputs()
    return dict(block_tables=tables, query_start_loc=query_start_loc, seq_lens=seq_lens, windows=[3, 1],
                num_speculative_tokens=2, block_sizes=[4, 2], num_tokens=7, widths=[8, 5], cp_size=1, cp_rank=0,
                out=[torch.full((7, 1, 8), 55, dtype=torch.int32), torch.full((7, 1, 5), 55, dtype=torch.int32)],
                out_lens=[torch.full((7,), 55, dtype=torch.int32), torch.full((7,), 55, dtype=torch.int32)])


def _set(name, index, value):
    return lambda call: call[name].__setitem__(index, value)


def _shared_lens(call):
    shared = torch.full((10,), 55, dtype=torch.int32)
    call["out_lens"] = [shared[:7], shared[3:]]


def _lens_over_seq_lens(call):
    buffer = torch.full((10,), 55, dtype=torch.int32)
    buffer[:3] = torch.tensor(SEQ_LENS, dtype=torch.int32)
    call["seq_lens"] = buffer[:3]
    call["out_lens"][0] = buffer[:7]


BAD_INPUTS = [
    ("windows", lambda call: call.update(windows=[3])),
    ("widths", lambda call: call.update(widths=[8, 5, 5])),
    ("out_lens", lambda call: call.update(out_lens=call["out_lens"][:1])),
    (r"windows\[1\]", lambda call: call.update(windows=[3, -1])),
    (r"block_sizes\[0\]", lambda call: call.update(block_sizes=[0, 2])),
    (r"widths\[1\]", lambda call: call.update(widths=[8, 2])),  # below windows[1] + num_speculative_tokens
    (r"block_tables\[1\]", _set("block_tables", 1, torch.tensor(TABLE_1[:2], dtype=torch.int32))),
    (r"block_tables\[0\]", _set("block_tables", 0, torch.tensor(TABLE_0, dtype=torch.int64))),
    (r"out\[1\]", _set("out", 1, torch.full((7, 1, 6), 55, dtype=torch.int32))),
    (r"out\[0\]", _set("out", 0, torch.full((6, 1, 8), 55, dtype=torch.int32))),
    (r"out_lens\[1\]", _set("out_lens", 1, torch.full((6,), 55, dtype=torch.int32))),
    (r"out_lens\[1\] must not share memory with out_lens\[0\]", _shared_lens),
    (r"out_lens\[0\] must not share memory with seq_lens", _lens_over_seq_lens),
    ("seq_lens", lambda call: call.update(seq_lens=torch.tensor(SEQ_LENS[:2], dtype=torch.int32))),
    ("num_tokens", lambda call: call.update(num_tokens=-1)),
    ("cp_rank", lambda call: call.update(cp_rank=1)),
]

VALUE_ERRORS = [
    ("seq_lens", lambda call: call.update(seq_lens=torch.tensor([9, 7, -1], dtype=torch.int32))),
    (r"seq_lens\[0\] = 9 is beyond block_tables\[1\]",
     _set("block_tables", 1, torch.tensor([row[:4] for row in TABLE_1], dtype=torch.int32))),
    # Request 2 (3 tokens, seq_len 12) sees 3 + 6 positions through window 6.
    (r"widths\[0\] = 8 is too small for request 2",
     lambda call: call.update(windows=[6, 1], seq_lens=torch.tensor([9, 7, 12], dtype=torch.int32))),
    ("num_tokens", lambda call: call.update(num_tokens=4)),
]


def _assert_rejected(call, argument):
    written = [t.clone() for t in call["out"] + call["out_lens"]]
    with pytest.raises(ValueError, match=argument):
        specops.dspark_swa_indices_multi(**call)
    for t, before in zip(call["out"] + call["out_lens"], written):
        assert torch.equal(t, before), "a rejected call wrote an output"


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{i}" for i in range(len(BAD_INPUTS))])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    change(call)
    _assert_rejected(call, argument)


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{i}" for i in range(len(VALUE_ERRORS))])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = _valid_call()
    change(call)
    with specops.backend("native"):
        _assert_rejected(call, argument)


def test_groups_of_different_widths_and_several_tiles(backend):
    """A group two chunks wide (BLOCK_W = 128 entries in the device kernel) next to a narrow one,
    over more token rows than one tile: the narrow group's row ends at its width."""
    generator = torch.Generator().manual_seed(4)
    query_lens = [3, 0, 5, 1, 4, 2, 7, 3, 1, 2]
    query_start_loc = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    seq_lens = torch.tensor([200, 9, 150, 1, 300, 2, 260, 140, 0, 90], dtype=torch.int32)
    tables = [torch.randint(0, 1 << 12, (10, 40), dtype=torch.int32, generator=generator),
              torch.randint(0, 1 << 12, (12, 10), dtype=torch.int32, generator=generator)]
    windows, block_sizes, widths = [190, 20], [8, 32], [200, 27]
    num_tokens = int(query_start_loc[-1]) + 3
    out, out_lens = specops.dspark_swa_indices_multi(tables, query_start_loc, seq_lens, windows=windows,
                                                     num_speculative_tokens=7, block_sizes=block_sizes,
                                                     num_tokens=num_tokens, widths=widths)
    for g in range(2):
        expected, expected_lens = expected_rows(tables[g].tolist(), query_start_loc.tolist(), seq_lens.tolist(),
                                                windows[g], block_sizes[g], widths[g], num_tokens, 1, 0)
        assert out[g][:, 0].tolist() == expected, f"group {g}"
        assert out_lens[g].tolist() == expected_lens, f"group {g} lens"


def test_more_groups_than_one_launch_takes(backend):
    # The Triton kernel takes MAX_GROUPS groups per launch: the next launches build the rest.
    from specops.triton_kernels._groups import MAX_GROUPS

    num_groups = MAX_GROUPS + 2
    generator = torch.Generator().manual_seed(6)
    query_start_loc = torch.tensor([0, 2, 2, 5, 6], dtype=torch.int32)
    seq_lens = torch.tensor([30, 4, 70, 9], dtype=torch.int32)
    tables = [torch.randint(0, 1 << 12, (4, 20), dtype=torch.int32, generator=generator) for _ in range(num_groups)]
    windows = [5, 64, 1, 30, 8, 17][:num_groups]
    block_sizes = [8, 4, 16, 8, 32, 4][:num_groups]
    widths = [9, 67, 4, 34, 11, 21][:num_groups]  # at least window + num_speculative_tokens
    out, out_lens = specops.dspark_swa_indices_multi(tables, query_start_loc, seq_lens, windows=windows,
                                                     num_speculative_tokens=3, block_sizes=block_sizes,
                                                     num_tokens=7, widths=widths)
    for g in range(num_groups):
        expected, expected_lens = expected_rows(tables[g].tolist(), query_start_loc.tolist(), seq_lens.tolist(),
                                                windows[g], block_sizes[g], widths[g], 7, 1, 0)
        assert out[g][:, 0].tolist() == expected, f"group {g}"
        assert out_lens[g].tolist() == expected_lens, f"group {g} lens"
