"""compute_slot_mapping: every backend against the independent expectation (tests/expectations.py),
opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, device_backends
from expectations import compute_slot_mapping as expected_slots
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import assert_same, batch_shapes, make_batch

import specops

PAD = specops.PAD_SLOT_ID


def expectation(query_start_loc, positions, block_table, block_size, *, out_dtype=torch.int64,
                num_tokens_padded=None, blocks_per_kv_block=1, cp_world_size=1, cp_rank=0,
                cp_interleave=1, idx_mapping=None):
    padded = positions.numel() if num_tokens_padded is None else num_tokens_padded
    out = torch.full((padded,), 12345, dtype=out_dtype)
    return expected_slots(query_start_loc, positions, block_table, block_size, out,
                          blocks_per_kv_block=blocks_per_kv_block, cp_world_size=cp_world_size, cp_rank=cp_rank,
                          cp_interleave=cp_interleave, idx_mapping=idx_mapping, num_tokens_padded=padded)


def test_spec_example_single_rank(backend):
    query_start_loc = torch.tensor([0, 4], dtype=torch.int32)
    positions = torch.tensor([0, 15, 16, 47])
    block_table = torch.tensor([[5, 6, 7]], dtype=torch.int32)
    out = specops.compute_slot_mapping(query_start_loc, positions, block_table, 16)
    assert out.tolist() == [80, 95, 96, 127]


def test_spec_example_two_ranks(backend):
    query_start_loc = torch.tensor([0, 6], dtype=torch.int32)
    positions = torch.tensor([0, 1, 2, 3, 32, 33])
    block_table = torch.tensor([[5, 6]], dtype=torch.int32)
    out = specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, cp_world_size=2, cp_rank=1)
    assert out.tolist() == [-1, 80, -1, 81, -1, 96]


def test_hand_computed_interleave_and_kernel_blocks(backend):
    # kv_block = 4 * 2 = 8 tokens, W = 2, I = 2: a virtual block is 16 positions; rank 0
    # stores offsets {0,1,4,5,8,9,12,13} as local offsets 0..7, i.e. kernel blocks 0 and 1.
    query_start_loc = torch.tensor([0, 3, 5], dtype=torch.int32)
    positions = torch.tensor([0, 4, 13, 16, 21])
    block_table = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]], dtype=torch.int32)
    idx_mapping = torch.tensor([1, 0], dtype=torch.int32)
    out = specops.compute_slot_mapping(query_start_loc, positions, block_table, 4, blocks_per_kv_block=2,
                                       cp_world_size=2, cp_rank=0, cp_interleave=2, idx_mapping=idx_mapping)
    # position 0 -> row 1, local 0 -> block 20 slot 80; 4 -> local 2 -> 82; 13 -> local 7 ->
    # kernel block 1 (21), offset 3 -> 87; 16 -> virtual block 1, local 0 -> column 2 (12) -> 48;
    # 21 -> offset 5 -> local 3 -> 12*4+3 = 51.
    assert out.tolist() == [80, 82, 87, 48, 51]


def test_block_ids_past_float32_and_slots_past_int32_are_exact(backend):
    """The peers' kernels lose these (docs/conformance.md): vllm-ascend's _compute_slot_mapping_kernel
    gathers block ids through float32 (2^24 + 1 becomes 2^24) and both peers store int32 slots
    (block 2^27 of 32 tokens starts at 2^32)."""
    block_table = torch.tensor([[2**24 + 1, 2**27]], dtype=torch.int32)
    slots = specops.compute_slot_mapping(torch.tensor([0, 2], dtype=torch.int32), torch.tensor([5, 35]), block_table,
                                         32)
    assert slots.tolist() == [(2**24 + 1) * 32 + 5, 2**27 * 32 + 3]


def test_rows_mapped_to_minus_one_are_pad(backend):
    query_start_loc = torch.tensor([0, 2, 3], dtype=torch.int32)
    positions = torch.tensor([0, 1, 0])
    block_table = torch.tensor([[3], [4]], dtype=torch.int32)
    idx_mapping = torch.tensor([-1, 1], dtype=torch.int64)
    out = specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, idx_mapping=idx_mapping)
    assert out.tolist() == [PAD, PAD, 64]


def test_negative_block_ids_are_pad(backend):
    query_start_loc = torch.tensor([0, 2], dtype=torch.int32)
    positions = torch.tensor([0, 16])
    block_table = torch.tensor([[-3, 2]], dtype=torch.int32)
    out = specops.compute_slot_mapping(query_start_loc, positions, block_table, 16)
    assert out.tolist() == [PAD, 32]


@given(
    shape=batch_shapes(max_reqs=6, max_query_len=6, max_context=200),
    block_size=st.sampled_from([1, 4, 16]),
    blocks_per_kv_block=st.sampled_from([1, 2, 4]),
    cp_world_size=st.sampled_from([1, 2, 3, 4, 8]),
    cp_interleave=st.sampled_from([1, 2, 4, 16]),
    rank_choice=st.integers(0, 7),
    with_idx_mapping=st.booleans(),
    out_dtype=st.sampled_from([torch.int64, torch.int32]),
    positions_dtype=st.sampled_from([torch.int64, torch.int32]),
    extra_padding=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_matches_expectation_on_random_batches(backend, shape, block_size, blocks_per_kv_block, cp_world_size,
                                               cp_interleave, rank_choice, with_idx_mapping, out_dtype,
                                               positions_dtype, extra_padding, seed):
    kv_block = block_size * blocks_per_kv_block
    if kv_block % cp_interleave:
        cp_interleave = 1
    query_lens, context_lens = shape
    generator = torch.Generator().manual_seed(seed)
    batch = make_batch(generator, query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=kv_block * cp_world_size, columns_per_block=blocks_per_kv_block,
                       extra_rows=3,
                       with_idx_mapping=with_idx_mapping, unmapped_fraction=0.3)
    positions = batch.positions.to(positions_dtype)
    kwargs = dict(num_tokens_padded=batch.num_tokens + extra_padding, blocks_per_kv_block=blocks_per_kv_block,
                  cp_world_size=cp_world_size, cp_rank=rank_choice % cp_world_size, cp_interleave=cp_interleave,
                  idx_mapping=batch.idx_mapping)
    out = torch.full((batch.num_tokens + extra_padding,), 777, dtype=out_dtype)
    specops.compute_slot_mapping(batch.query_start_loc, positions, batch.block_table, block_size, out=out, **kwargs)
    expected = expectation(batch.query_start_loc, positions, batch.block_table, block_size, out_dtype=out_dtype, **kwargs)
    assert_same(out, expected, backend)


@given(
    shape=batch_shapes(max_reqs=5, max_query_len=6, max_context=120),
    block_size=st.sampled_from([1, 4, 16]),
    cp=st.sampled_from([(1, 0, 1), (2, 1, 1), (4, 2, 2), (3, 0, 4)]),
    dropped=st.integers(1, 2),
    with_idx_mapping=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_positions_past_the_table_are_pad_on_device_paths_and_an_error_on_the_host(backend, shape, block_size, cp,
                                                                                   dropped, with_idx_mapping, seed):
    """The column bound: the table loses its last columns, so the tokens that lived there now
    read at column num_cols or past it (the boundary first). Device paths write PAD for exactly
    those tokens; the native op rejects the batch and writes nothing."""
    world, rank, interleave = cp
    if block_size % interleave:
        interleave = 1
    query_lens, context_lens = shape
    batch = make_batch(torch.Generator().manual_seed(seed), query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=block_size * world, with_idx_mapping=with_idx_mapping,
                       unmapped_fraction=0.2)
    columns = batch.block_table.size(1)
    assume(columns > dropped)
    table = batch.block_table[:, : columns - dropped].contiguous()
    kwargs = dict(num_tokens_padded=batch.num_tokens + 2, cp_world_size=world, cp_rank=rank, cp_interleave=interleave,
                  idx_mapping=batch.idx_mapping)
    expected = expectation(batch.query_start_loc, batch.positions, table, block_size, **kwargs)
    with_every_column = expectation(batch.query_start_loc, batch.positions, batch.block_table, block_size, **kwargs)
    past_the_table = bool(((with_every_column != PAD) & (expected == PAD)).any())
    out = torch.full((batch.num_tokens + 2,), 55, dtype=torch.int64)
    if backend == "native" and past_the_table:
        with pytest.raises(ValueError, match="positions"):
            specops.compute_slot_mapping(batch.query_start_loc, batch.positions, table, block_size, out=out, **kwargs)
        assert (out == 55).all()
        return
    specops.compute_slot_mapping(batch.query_start_loc, batch.positions, table, block_size, out=out, **kwargs)
    assert_same(out, expected, backend)


@pytest.mark.parametrize("cp_world_size", [1, 4])
def test_many_tiles_fixed_seed(backend, cp_world_size):
    generator = torch.Generator().manual_seed(7)
    query_lens = torch.randint(1, 200, (24,), generator=generator).tolist()
    context_lens = torch.randint(0, 3000, (24,), generator=generator).tolist()
    batch = make_batch(generator, query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=16 * cp_world_size, extra_rows=8, with_idx_mapping=True,
                       unmapped_fraction=0.1)
    assert batch.num_tokens > 2 * 1024  # several Triton tiles
    kwargs = dict(cp_world_size=cp_world_size, cp_rank=cp_world_size - 1, idx_mapping=batch.idx_mapping,
                  num_tokens_padded=batch.num_tokens + 100)
    out = specops.compute_slot_mapping(batch.query_start_loc, batch.positions, batch.block_table, 16, **kwargs)
    expected = expectation(batch.query_start_loc, batch.positions, batch.block_table, 16, **kwargs)
    assert_same(out, expected, backend)


def test_empty_batch(backend):
    query_start_loc = torch.zeros(1, dtype=torch.int32)
    positions = torch.zeros(0, dtype=torch.int64)
    block_table = torch.zeros(4, 2, dtype=torch.int32)
    out = torch.full((5,), 9, dtype=torch.int64)
    specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out)
    assert out.tolist() == [PAD] * 5
    assert specops.compute_slot_mapping(query_start_loc, positions, block_table, 16).numel() == 0


@pytest.mark.parametrize("cp_world_size,cp_interleave", [(2, 1), (3, 2), (4, 16), (8, 4)])
def test_every_token_is_local_on_exactly_one_rank(backend, cp_world_size, cp_interleave):
    generator = torch.Generator().manual_seed(cp_world_size)
    batch = make_batch(generator, query_lens=[1, 7, 33, 64], context_lens=[0, 100, 250, 1000],
                       tokens_per_block_row=16 * cp_world_size)
    stored = torch.zeros(batch.num_tokens, dtype=torch.int64)
    for rank in range(cp_world_size):
        out = specops.compute_slot_mapping(batch.query_start_loc, batch.positions, batch.block_table, 16,
                                           cp_world_size=cp_world_size, cp_rank=rank, cp_interleave=cp_interleave)
        stored += (out != PAD).long()
    assert stored.tolist() == [1] * batch.num_tokens


def test_writes_in_place_and_clears_a_stale_tail(backend):
    generator = torch.Generator().manual_seed(3)
    large = make_batch(generator, query_lens=[8] * 8, context_lens=[40] * 8, tokens_per_block_row=16)
    small = make_batch(generator, query_lens=[2, 3], context_lens=[5, 70], tokens_per_block_row=16)
    out = torch.empty(80, dtype=torch.int64)
    address = out.data_ptr()
    specops.compute_slot_mapping(large.query_start_loc, large.positions, large.block_table, 16, out=out)
    assert (out[: large.num_tokens] != PAD).all()
    result = specops.compute_slot_mapping(small.query_start_loc, small.positions, small.block_table, 16, out=out)
    assert result.data_ptr() == address == out.data_ptr()
    expected = expectation(small.query_start_loc, small.positions, small.block_table, 16, num_tokens_padded=80)
    assert_same(out, expected)
    assert (out[small.num_tokens:] == PAD).all()


def _opcheck_args(idx_dtype):
    generator = torch.Generator().manual_seed(11)
    batch = make_batch(generator, query_lens=[3, 1, 4], context_lens=[10, 60, 0], tokens_per_block_row=16 * 2,
                       extra_rows=2, with_idx_mapping=True)
    out = torch.empty(batch.num_tokens + 2, dtype=torch.int64)
    idx_mapping = batch.idx_mapping.to(idx_dtype)
    return (batch.query_start_loc, batch.positions, batch.block_table, 16, out, 1, 2, 1, 4, idx_mapping,
            batch.num_tokens + 2)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
def test_opcheck(idx_dtype):
    torch.library.opcheck(torch.ops.specops.compute_slot_mapping.default, _opcheck_args(idx_dtype))


def test_compiles_without_graph_break():
    args = _opcheck_args(torch.int32)
    query_start_loc, positions, block_table, block_size, out, _, world, rank, interleave, idx_mapping, padded = args

    def step(query_start_loc, positions, block_table, out, idx_mapping):
        specops.compute_slot_mapping(query_start_loc, positions + 0, block_table, block_size, out=out,
                                     cp_world_size=world, cp_rank=rank, cp_interleave=interleave,
                                     idx_mapping=idx_mapping)
        return out + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(query_start_loc, positions, block_table, out.clone(), idx_mapping)
    actual = compiled(query_start_loc, positions, block_table, out, idx_mapping)
    assert_same(actual, expected)
    assert_same(out + 1, expected)


def _int32_out_over_query_start_loc() -> tuple[torch.Tensor, ...]:
    """out (int32) and query_start_loc in one buffer, out starting at query_start_loc[1]; block
    ids so large that a slot stored into query_start_loc moves a loop bound far away."""
    buffer = torch.zeros(8, dtype=torch.int32)
    query_start_loc = buffer[:3]
    query_start_loc.copy_(torch.tensor([0, 2, 3], dtype=torch.int32))
    out = buffer[1:4]
    block_table = torch.full((2, 4), 2**24, dtype=torch.int32)
    return buffer, query_start_loc, torch.tensor([0, 1, 2]), block_table, out


def test_an_output_over_query_start_loc_is_rejected_before_any_write(backend):
    """Once a SIGSEGV: the native body re-read query_start_loc while storing into it, its own
    stores moved the loop bounds, and it wrote thousands of elements past out."""
    buffer, query_start_loc, positions, block_table, out = _int32_out_over_query_start_loc()
    before = buffer.clone()
    with pytest.raises(ValueError, match="out must not share memory with query_start_loc"):
        specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out)
    assert_same(buffer, before)


def test_a_compiled_call_with_an_output_over_query_start_loc_is_rejected():
    """Compiled, the fake kernel sees the two views of one storage and rejects at trace time
    (aot_eager would otherwise run the op on a copy and write garbage back over query_start_loc)."""
    buffer, query_start_loc, positions, block_table, out = _int32_out_over_query_start_loc()
    before = buffer.clone()

    def step(query_start_loc, positions, block_table, out):
        specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out)
        return out + 1

    torch._dynamo.reset()
    with pytest.raises(Exception, match="out must not share memory with query_start_loc"):
        torch.compile(step, fullgraph=True, backend="aot_eager")(query_start_loc, positions, block_table, out)
    assert_same(buffer, before)


def _valid_call():
    query_start_loc = torch.tensor([0, 2, 3], dtype=torch.int32)
    positions = torch.tensor([0, 17, 5])
    block_table = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    out = torch.full((4,), 55, dtype=torch.int64)
    return dict(query_start_loc=query_start_loc, positions=positions, block_table=block_table, block_size=16,
                out=out, blocks_per_kv_block=1, cp_world_size=1, cp_rank=0, cp_interleave=1, idx_mapping=None)


BAD_INPUTS = [
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 2, 3], dtype=torch.int64))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([[0, 2, 3]], dtype=torch.int32))),
    ("positions", dict(positions=torch.tensor([0.0, 17.0, 5.0]))),
    ("positions", dict(positions=torch.tensor([[0, 17, 5]]))),
    ("block_table", dict(block_table=torch.tensor([[1, 2], [3, 4]], dtype=torch.int64))),
    ("block_table", dict(block_table=torch.tensor([1, 2, 3, 4], dtype=torch.int32))),
    ("out", dict(out=torch.full((4,), 55, dtype=torch.float32))),
    ("num_tokens_padded", dict(out=torch.full((2,), 55, dtype=torch.int64))),
    ("block_size", dict(block_size=0)),
    ("blocks_per_kv_block", dict(blocks_per_kv_block=-1)),
    ("cp_world_size", dict(cp_world_size=0)),
    ("cp_rank", dict(cp_world_size=2, cp_rank=2)),
    ("cp_rank", dict(cp_rank=-1)),
    ("cp_interleave", dict(cp_interleave=3)),
    ("idx_mapping", dict(idx_mapping=torch.tensor([0], dtype=torch.int32))),
    ("idx_mapping", dict(idx_mapping=torch.tensor([0.0, 1.0]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    out = call.pop("out")
    before = out.clone()
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.compute_slot_mapping(**call, out=out)
    assert torch.equal(out, before)


VALUE_ERRORS = [
    ("positions", dict(positions=torch.tensor([0, 32, 5]))),  # beyond a 2-block row
    ("positions", dict(positions=torch.tensor([0, -1, 5]))),
    ("idx_mapping", dict(idx_mapping=torch.tensor([0, 2], dtype=torch.int32))),  # past the table
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 4, 3], dtype=torch.int32))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([1, 2, 3], dtype=torch.int32))),
]


@pytest.mark.parametrize("argument,change", VALUE_ERRORS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(VALUE_ERRORS)])
def test_native_rejects_invalid_values_and_writes_nothing(argument, change):
    call = _valid_call()
    call.update(change)
    out = call.pop("out")
    before = out.clone()
    with pytest.raises(ValueError, match=argument):
        specops.compute_slot_mapping(**call, out=out)
    assert torch.equal(out, before)


# _valid_call: request 0 (row 0 = blocks 1, 2) has positions 0 and 17, request 1 (row 1 = blocks
# 3, 4) position 5: slots 16, 33, 53, then PAD for the padded fourth token.
@pytest.mark.parametrize("change,expected", [
    (VALUE_ERRORS[0][1], [16, PAD, 53, PAD]),  # position 32 is past row 0's two blocks
    (VALUE_ERRORS[1][1], [16, PAD, 53, PAD]),  # a negative position
    (VALUE_ERRORS[2][1], [16, 33, PAD, PAD]),  # request 1 maps to row 2, past the table
])
def test_device_paths_write_pad_for_invalid_values(change, expected):
    call = _valid_call()
    call.update(change)
    out = call.pop("out")
    for name in device_backends():
        with specops.backend(name):
            result = specops.compute_slot_mapping(**call, out=out.clone())
        assert result.tolist() == expected, name


def test_a_slot_past_an_int32_out_is_pad_on_device_paths_and_an_error_on_the_host():
    """Once wrapped on every backend: block 2^28 of 16 tokens is slot 2^32, which an int32 out
    held as 0, a real slot of another request's block."""
    query_start_loc = torch.tensor([0, 2], dtype=torch.int32)
    positions = torch.tensor([0, 17])
    block_table = torch.tensor([[2**28, 5]], dtype=torch.int32)
    for backend in BACKENDS:
        out = torch.full((3,), 55, dtype=torch.int32)
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match=r"out is int32, but the slot of positions\[0\] = 0 is 4294967296"):
                    specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out)
                assert out.tolist() == [55, 55, 55]
            else:
                specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out)
                assert out.tolist() == [PAD, 5 * 16 + 1, PAD], backend
        wide = torch.zeros(3, dtype=torch.int64)
        with specops.backend(backend):
            specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=wide)
        assert wide.tolist() == [2**32, 81, PAD], backend
