"""dspark_swa_indices: hand-computed rows, every backend against the independent expectation
(tests/expectations.py), rank
slices that concatenate to the full padded table without materializing it, opcheck, compile,
bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, device_backends
from expectations import dspark_swa_indices as expected_indices
from host_syncs import OpLog
from hypothesis import given
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes, assert_same, cp_batches

import specops

PAD = specops.PAD_SLOT_ID


def expectation(block_table, query_start_loc, seq_lens, *, window, num_speculative_tokens, block_size, num_tokens,
                width, cp_size=1, cp_rank=0, extra_rows=0):
    """The independent expectation for outputs with `extra_rows` rows past the slice (stale 4321)."""
    rows = -(-num_tokens // cp_size) + extra_rows
    out = torch.full((rows, 1, width), 4321, dtype=torch.int32)
    out_lens = torch.full((rows,), 4321, dtype=torch.int32)
    return expected_indices(block_table, query_start_loc, seq_lens, window=window, block_size=block_size,
                            num_tokens=num_tokens, width=width, cp_size=cp_size, cp_rank=cp_rank, out=out,
                            out_lens=out_lens)


# Request 0: 2 draft tokens, seq_len 9 -> start = 9 - 2 - 3 = 4, visible 5: positions 4..8.
# Request 1: empty.
# Request 2: 3 draft tokens, seq_len 4 -> start = max(4 - 3 - 3, 0) = 0, visible 4: positions 0..3.
# block_size 4; block rows [10, 11, 12] and [20, 21, 22]; window 3, 2 speculative tokens.
QUERY_START_LOC = [0, 2, 2, 5]
SEQ_LENS = [9, 7, 4]
BLOCK_TABLE = [[10, 11, 12], [30, 31, 32], [20, 21, 22]]
ROW_0 = [44, 45, 46, 47, 48, PAD, PAD, PAD]  # positions 4..7 in block 11, 8 in block 12
ROW_2 = [80, 81, 82, 83, PAD, PAD, PAD, PAD]


def _hand_inputs():
    return (torch.tensor(BLOCK_TABLE, dtype=torch.int32), torch.tensor(QUERY_START_LOC, dtype=torch.int32),
            torch.tensor(SEQ_LENS, dtype=torch.int32))


def test_hand_computed_single_rank(backend):
    indices, lens = specops.dspark_swa_indices(*_hand_inputs(), window=3, num_speculative_tokens=2, block_size=4,
                                               num_tokens=7, width=8)
    assert indices.shape == (7, 1, 8) and indices.dtype == lens.dtype == torch.int32
    assert indices[:, 0].tolist() == [ROW_0, ROW_0, ROW_2, ROW_2, ROW_2, [PAD] * 8, [PAD] * 8]
    assert lens.tolist() == [5, 5, 4, 4, 4, 0, 0]


def test_peer_build_dspark_swa_indices_hand_worked(backend):
    """vllm-ascend attention/dsa_v1.py, build_dspark_swa_indices and _aligned_dspark_index_width,
    worked by hand: window 4, 2 speculative tokens, block_size 4. Request 0 drafts 3 tokens with
    seq_len 10: prefix 7, start = 7 - 4 = 3, visible = 10 - 3 = 7 (positions 3..9 in blocks
    10, 11, 12). Request 1 drafts 1 token with seq_len 2: start 0, visible 2 (block 20). The
    peer's default width aligns window + num_speculative_tokens = 6 up to 128."""
    block_table = torch.tensor([[10, 11, 12], [20, 21, 22]], dtype=torch.int32)
    indices, lens = specops.dspark_swa_indices(block_table, torch.tensor([0, 3, 4], dtype=torch.int32),
                                               torch.tensor([10, 2], dtype=torch.int32), window=4,
                                               num_speculative_tokens=2, block_size=4)
    assert indices.shape == (4, 1, 128)
    row_0 = [43, 44, 45, 46, 47, 48, 49] + [PAD] * 121
    row_1 = [80, 81] + [PAD] * 126
    assert indices[:, 0].tolist() == [row_0, row_0, row_0, row_1]
    assert lens.tolist() == [7, 7, 7, 2]


@pytest.mark.parametrize("window,num_speculative_tokens,width", [(128, 1, 256), (127, 1, 128), (4, 2, 128),
                                                                   (200, 57, 384)])
def test_peer_default_width_alignment(window, num_speculative_tokens, width):
    """vllm-ascend _aligned_dspark_index_width: ceil((window + num_speculative_tokens) / 128) * 128."""
    block_table = torch.zeros(1, 128, dtype=torch.int32)
    indices, _ = specops.dspark_swa_indices(block_table, torch.tensor([0, 1], dtype=torch.int32),
                                            torch.tensor([1], dtype=torch.int32), window=window,
                                            num_speculative_tokens=num_speculative_tokens, block_size=4)
    assert indices.size(2) == width


@pytest.mark.parametrize("cp_rank,rows,lens", [
    (0, [ROW_0, ROW_0, ROW_2], [5, 5, 4]),
    (1, [ROW_2, ROW_2, [PAD] * 8], [4, 4, 0]),
    (2, [[PAD] * 8] * 3, [0, 0, 0]),
])
def test_hand_computed_rank_slices(backend, cp_rank, rows, lens):
    # 7 tokens over 3 ranks pad to 9: rank slices [0, 3), [3, 6), [6, 9).
    indices, out_lens = specops.dspark_swa_indices(*_hand_inputs(), window=3, num_speculative_tokens=2,
                                                   block_size=4, num_tokens=7, width=8, cp_size=3, cp_rank=cp_rank)
    assert indices[:, 0].tolist() == rows
    assert out_lens.tolist() == lens


def test_defaults_width_and_num_tokens(backend):
    indices, lens = specops.dspark_swa_indices(*_hand_inputs(), window=3, num_speculative_tokens=2, block_size=4)
    assert indices.shape == (5, 1, 128)  # num_tokens = T, width = ceil(5 / 128) * 128
    assert indices[0, 0, :8].tolist() == ROW_0 and (indices[:, :, 8:] == PAD).all()
    assert specops.dspark_swa_indices(*_hand_inputs(), window=200, num_speculative_tokens=7,
                                      block_size=4)[0].shape == (5, 1, 256)


def test_seq_len_zero_and_negative_block_ids(backend):
    block_table = torch.tensor([[5, -1, 7], [9, 9, 9]], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 3, 4], dtype=torch.int32)
    seq_lens = torch.tensor([10, 0], dtype=torch.int32)
    indices, lens = specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, window=6,
                                               num_speculative_tokens=3, block_size=4, width=9)
    # Request 0 sees positions 1..9; block 1 (positions 4..7) is -1; request 1 sees nothing.
    assert indices[0, 0].tolist() == [21, 22, 23, PAD, PAD, PAD, PAD, 28, 29]
    assert lens.tolist() == [9, 9, 9, 0]
    assert indices[3, 0].tolist() == [PAD] * 9


@given(batch=cp_batches(block_size=4), rank_choice=st.integers(0, 7), window=st.integers(0, 20),
       num_speculative_tokens=st.integers(0, 4), extra_width=st.integers(0, 3), extra_rows=st.integers(0, 2))
def test_matches_expectation_on_random_batches(backend, batch, rank_choice, window, num_speculative_tokens,
                                               extra_width, extra_rows):
    query_lens = (batch.query_start_loc[1:] - batch.query_start_loc[:-1]).tolist()
    width = max(1, window + max([num_speculative_tokens, *query_lens])) + extra_width  # every row fits
    kwargs = dict(window=window, num_speculative_tokens=num_speculative_tokens, block_size=4,
                  num_tokens=batch.num_input_tokens, width=width, cp_size=batch.cp_size,
                  cp_rank=rank_choice % batch.cp_size)
    expected, expected_lens = expectation(batch.block_table, batch.query_start_loc, batch.seq_lens, **kwargs,
                                        extra_rows=extra_rows)
    out, out_lens = torch.full_like(expected, 4321), torch.full_like(expected_lens, 4321)
    specops.dspark_swa_indices(batch.block_table, batch.query_start_loc, batch.seq_lens, **kwargs, out=out,
                               out_lens=out_lens)
    assert_same(out, expected, f"{backend} indices")
    assert_same(out_lens, expected_lens, f"{backend} lens")
    rows = -(-batch.num_input_tokens // batch.cp_size)
    assert (out[rows:] == 4321).all() and (out_lens[rows:] == 4321).all()  # nothing past the slice


@pytest.mark.parametrize("cp_size", [1, 2, 3, 4, 8])
def test_rank_slices_concatenate_to_the_full_padded_table(backend, cp_size):
    generator = torch.Generator().manual_seed(cp_size)
    query_lens = [3, 0, 4, 1, 9, 4]
    query_start_loc = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    seq_lens = torch.tensor([3, 50, 70, 0, 200, 130], dtype=torch.int32)
    block_table = torch.randint(0, 1000, (6, 13), dtype=torch.int32, generator=generator)
    num_tokens = int(query_start_loc[-1]) + 2
    kwargs = dict(window=64, num_speculative_tokens=4, block_size=16)
    slices = [specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, **kwargs, num_tokens=num_tokens,
                                         cp_size=cp_size, cp_rank=rank) for rank in range(cp_size)]
    padded = -(-num_tokens // cp_size) * cp_size
    full, full_lens = specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, **kwargs,
                                                 num_tokens=padded)
    assert_same(torch.cat([s[0] for s in slices]), full, "indices")
    assert_same(torch.cat([s[1] for s in slices]), full_lens, "lens")


@pytest.mark.parametrize("impl", [name for name in BACKENDS if name != "triton"])
def test_a_rank_never_materializes_the_full_table(impl):
    """Under cp_size > 1 no tensor with the padded stream's row count is created: the slice is
    written directly. The log sees every aten op of the reference and the native op's one call."""
    block_table, query_start_loc, seq_lens = _hand_inputs()
    num_tokens, cp_size = 29, 5  # padded to 30 rows, 6 per rank; R = 3, width 8
    with specops.backend(impl), OpLog() as log:
        indices, _ = specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, window=3,
                                                num_speculative_tokens=2, block_size=4, num_tokens=num_tokens,
                                                width=8, cp_size=cp_size, cp_rank=4)
    assert indices.shape == (6, 1, 8)
    assert log.result_shapes and all(29 not in shape and 30 not in shape for shape in log.result_shapes)
    if impl == "native":
        assert [name for name in log.op_names() if name != "empty"] == ["dspark_swa_indices"]


def test_writes_in_place_and_clears_stale_rows(backend):
    out = torch.full((7, 1, 8), 66, dtype=torch.int32)
    out_lens = torch.full((7,), 66, dtype=torch.int32)
    addresses = out.data_ptr(), out_lens.data_ptr()
    indices, lens = specops.dspark_swa_indices(*_hand_inputs(), window=3, num_speculative_tokens=2, block_size=4,
                                               num_tokens=7, width=8, out=out, out_lens=out_lens)
    assert (indices.data_ptr(), lens.data_ptr()) == addresses
    assert (out[5:] == PAD).all() and out_lens[5:].tolist() == [0, 0]


def test_device_paths_stay_in_bounds_on_values_the_native_op_rejects():
    # seq_lens past the table, a window wider than the row, a negative seq_len: kernels clamp.
    # Request 0 (tokens 0, 1): seq_len -4 leaves nothing visible. Request 1 (tokens 2..5):
    # start = 40 - 4 - 30 = 6, visible 34 clamped to the row width 31; positions 6, 7 are in
    # block 4 (slots 18, 19), later ones are past the table's two columns.
    block_table = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    query_start_loc = torch.tensor([0, 2, 6], dtype=torch.int32)
    seq_lens = torch.tensor([-4, 40], dtype=torch.int32)
    request_1_row = [18, 19] + [PAD] * 29
    for name in device_backends():
        with specops.backend(name):
            indices, lens = specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, window=30,
                                                       num_speculative_tokens=1, block_size=4, width=31)
        assert lens.tolist() == [0, 0, 31, 31, 31, 31], name
        assert indices[:, 0].tolist() == [[PAD] * 31] * 2 + [request_1_row] * 4, name


def _opcheck_args(cp_size, cp_rank):
    block_table, query_start_loc, seq_lens = _hand_inputs()
    rows = -(-9 // cp_size)
    return (block_table, query_start_loc, seq_lens, 3, 2, 4, 9, 8, cp_size, cp_rank,
            torch.empty(rows + 1, 1, 8, dtype=torch.int32), torch.empty(rows + 2, dtype=torch.int32))


@pytest.mark.parametrize("cp_size,cp_rank", [(1, 0), (4, 3)])
def test_opcheck(cp_size, cp_rank):
    torch.library.opcheck(torch.ops.specops.dspark_swa_indices.default, _opcheck_args(cp_size, cp_rank))


def test_compiles_without_graph_break():
    block_table, query_start_loc, seq_lens, *_, out, out_lens = _opcheck_args(2, 1)

    def step(block_table, query_start_loc, seq_lens, out, out_lens):
        indices, lens = specops.dspark_swa_indices(block_table, query_start_loc, seq_lens + 0, window=3,
                                                   num_speculative_tokens=2, block_size=4, num_tokens=9, width=8,
                                                   cp_size=2, cp_rank=1, out=out, out_lens=out_lens)
        return indices + 1, lens * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(block_table, query_start_loc, seq_lens, out.clone(), out_lens.clone())
    actual = compiled(block_table, query_start_loc, seq_lens, out, out_lens)
    for a, e in zip(actual, expected):
        assert_same(a, e)


def _valid_call():
    block_table, query_start_loc, seq_lens = _hand_inputs()
    return dict(block_table=block_table, query_start_loc=query_start_loc, seq_lens=seq_lens, window=3,
                num_speculative_tokens=2, block_size=4, num_tokens=7, width=8, cp_size=2, cp_rank=1,
                out=torch.full((4, 1, 8), 55, dtype=torch.int32), out_lens=torch.full((4,), 55, dtype=torch.int32))


OUTPUTS = ("out", "out_lens")
BAD_INPUTS = [
    ("block_table", dict(block_table=torch.tensor(BLOCK_TABLE, dtype=torch.int64))),
    ("block_table", dict(block_table=torch.tensor(BLOCK_TABLE[:2], dtype=torch.int32))),
    ("query_start_loc", dict(query_start_loc=torch.tensor(QUERY_START_LOC, dtype=torch.int64))),
    ("seq_lens", dict(seq_lens=torch.tensor(SEQ_LENS[:2], dtype=torch.int32))),
    ("seq_lens", dict(seq_lens=torch.tensor(SEQ_LENS, dtype=torch.float32))),
    ("window", dict(window=-1)),
    ("num_speculative_tokens", dict(num_speculative_tokens=-2)),
    ("block_size", dict(block_size=0)),
    ("width", dict(width=4)),  # smaller than window + num_speculative_tokens
    ("num_tokens", dict(num_tokens=-1)),
    ("cp_size", dict(cp_size=0)),
    ("cp_rank", dict(cp_rank=2)),
    ("out", dict(out=torch.full((4, 1, 9), 55, dtype=torch.int32))),
    ("out", dict(out=torch.full((3, 1, 8), 55, dtype=torch.int32))),  # 7 tokens over 2 ranks need 4 rows
    ("out", dict(out=torch.full((4, 8), 55, dtype=torch.int32))),
    ("out", dict(out=torch.full((4, 1, 8), 55, dtype=torch.int64))),
    ("out_lens", dict(out_lens=torch.full((3,), 55, dtype=torch.int32))),
    ("out_lens", dict(out_lens=torch.full((4,), 55, dtype=torch.int64))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    assert_rejected_without_writes(specops.dspark_swa_indices, call, argument=argument, written=OUTPUTS)


VALUE_ERRORS = [
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 2, 1, 5], dtype=torch.int32))),
    ("seq_lens", dict(seq_lens=torch.tensor([9, 7, -1], dtype=torch.int32))),
    ("seq_lens", dict(seq_lens=torch.tensor([13, 7, 4], dtype=torch.int32))),  # past 3 blocks of 4
    ("width", dict(seq_lens=torch.tensor([12, 7, 4], dtype=torch.int32), window=7, width=9)),  # sees 7 + 2
    ("num_tokens", dict(num_tokens=4)),  # fewer than the 5 tokens of the batch
]


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VALUE_ERRORS)])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = _valid_call()
    call.update(change)
    assert_rejected_without_writes(specops.dspark_swa_indices, call, argument=argument, written=OUTPUTS,
                                   errors=ValueError)


def test_outputs_sharing_memory_are_rejected_before_any_write(backend):
    """Once accepted, with garbage in both: out_lens inside the last row of out."""
    call = _valid_call()
    call["out_lens"] = call["out"][3, 0, 4:]
    before = call["out"].clone()
    with pytest.raises(ValueError, match="out_lens must not share memory with out"):
        specops.dspark_swa_indices(**call)
    assert torch.equal(call["out"], before)


def test_a_slot_past_int32_is_pad_on_device_paths_and_an_error_on_the_host():
    """A block id whose slots do not fit the int32 rows: PAD there on device paths (never a
    wrapped slot); the host op rejects the request."""
    block_table = torch.tensor([[2**29, 3]], dtype=torch.int32)  # block 0 of 8 tokens: slots from 2^32
    query_start_loc = torch.tensor([0, 1], dtype=torch.int32)
    seq_lens = torch.tensor([10], dtype=torch.int32)
    for backend in BACKENDS:
        out, out_lens = torch.full((1, 1, 16), 55, dtype=torch.int32), torch.full((1,), 55, dtype=torch.int32)
        args = dict(window=12, num_speculative_tokens=1, block_size=8, width=16, out=out, out_lens=out_lens)
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match="out is int32, but position 0 of request 0 has a slot past"):
                    specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, **args)
                assert out.unique().tolist() == [55] and out_lens.tolist() == [55]
            else:
                specops.dspark_swa_indices(block_table, query_start_loc, seq_lens, **args)
                assert out[0, 0].tolist() == [PAD] * 8 + [24, 25] + [PAD] * 6, backend
                assert out_lens.tolist() == [10]
