"""compute_slot_mapping on batches of short requests of consecutive positions (the decode batches
of speculative decoding), placed where their runs split: at kernel-block ends and, under CP with
interleave, where a rank's run of I positions ends. Under CP interleave with power-of-two sizes
the host body stores such a request as one chunk of slots without a branch on the split (the
other layouts in runs); every backend is held to the independent expectation
(tests/expectations.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from expectations import compute_slot_mapping as expected_slots
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_same, make_batch

import specops

PAD = specops.PAD_SLOT_ID

# (block_size, blocks_per_kv_block, cp_world_size, cp_interleave): powers of two, a single rank,
# CP with an interleave below, at and past the kernel block, and CP without interleave.
LAYOUTS = [(8, 1, 1, 1), (4, 2, 1, 1), (16, 1, 4, 16), (32, 1, 4, 8), (16, 2, 2, 4), (8, 1, 8, 2), (4, 4, 2, 16),
           (16, 1, 2, 1), (8, 1, 4, 4), (16, 1, 3, 8)]


def _expected(batch, positions, table, block_size, out_dtype, padded, **kwargs):
    out = torch.full((padded,), 12345, dtype=out_dtype)
    return expected_slots(batch.query_start_loc, positions, table, block_size, out, num_tokens_padded=padded, **kwargs)


@st.composite
def _short_batches(draw):
    """Query lengths (mostly 1-8) and contexts that end a few positions before or after a
    multiple of the layout's run boundary, so requests split at every offset."""
    num_reqs = draw(st.integers(6, 24))
    query_lens = draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 7, 8, 8, 8, 9]), min_size=num_reqs,
                               max_size=num_reqs))
    boundaries = draw(st.lists(st.integers(0, 12), min_size=num_reqs, max_size=num_reqs))
    offsets = draw(st.lists(st.integers(-8, 8), min_size=num_reqs, max_size=num_reqs))
    return query_lens, boundaries, offsets


@settings(max_examples=examples(40))
@given(
    shape=_short_batches(),
    layout=st.sampled_from(LAYOUTS),
    rank_choice=st.integers(0, 7),
    with_idx_mapping=st.booleans(),
    out_dtype=st.sampled_from([torch.int64, torch.int32]),
    positions_dtype=st.sampled_from([torch.int64, torch.int32]),
    negative_fraction=st.sampled_from([0.0, 0.2]),
    extra_padding=st.sampled_from([0, 1, 6, 7, 9]),
    seed=st.integers(0, 2**16),
)
def test_short_requests_at_every_split_match_the_expectation(backend, shape, layout, rank_choice, with_idx_mapping,
                                                             out_dtype, positions_dtype, negative_fraction,
                                                             extra_padding, seed):
    block_size, blocks_per_kv_block, world, interleave = layout
    query_lens, boundaries, offsets = shape
    # A run ends at a multiple of min(I, block_size) under CP interleave, of block_size otherwise.
    period = min(interleave, block_size) if world > 1 and interleave > 1 else block_size
    context_lens = [max(0, b * period + o) for b, o in zip(boundaries, offsets)]
    generator = torch.Generator().manual_seed(seed)
    batch = make_batch(generator, query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=block_size * blocks_per_kv_block * world,
                       columns_per_block=blocks_per_kv_block, extra_rows=2, with_idx_mapping=with_idx_mapping,
                       unmapped_fraction=0.2)
    table = batch.block_table.clone()
    table[torch.rand(table.shape, generator=generator) < negative_fraction] = -1
    positions = batch.positions.to(positions_dtype)
    padded = batch.num_tokens + extra_padding
    kwargs = dict(blocks_per_kv_block=blocks_per_kv_block, cp_world_size=world, cp_rank=rank_choice % world,
                  cp_interleave=interleave, idx_mapping=batch.idx_mapping)
    out = torch.full((padded,), 777, dtype=out_dtype)  # stale values everywhere, the tail included
    specops.compute_slot_mapping(batch.query_start_loc, positions, table, block_size, out=out,
                                 num_tokens_padded=padded, **kwargs)
    assert_same(out, _expected(batch, positions, table, block_size, out_dtype, padded, **kwargs), backend)


@pytest.mark.parametrize("world,rank", [(1, 0), (4, 0), (4, 3)])
def test_a_decode_batch_of_eight_token_requests_matches_the_expectation(backend, world, rank):
    """The benchmark's CP goal case, smaller: 8 tokens a request after random contexts, block 128,
    interleave 16 under CP."""
    generator = torch.Generator().manual_seed(world + rank)
    num_reqs, block_size = 96, 128
    contexts = torch.randint(0, 16 * block_size * world, (num_reqs,), generator=generator).tolist()
    batch = make_batch(generator, query_lens=[8] * num_reqs, context_lens=contexts,
                       tokens_per_block_row=block_size * world)
    interleave = 16 if world > 1 else 1
    kwargs = dict(cp_world_size=world, cp_rank=rank, cp_interleave=interleave)
    out = specops.compute_slot_mapping(batch.query_start_loc, batch.positions, batch.block_table, block_size,
                                       **kwargs)
    expected = _expected(batch, batch.positions, batch.block_table, block_size, torch.int64, batch.num_tokens,
                         **kwargs)
    assert_same(out, expected, backend)
    assert (out != PAD).any()


@pytest.mark.parametrize("huge_run", ["first", "second"])
def test_a_slot_past_int32_in_either_run_of_a_split_request_is_caught(huge_run):
    """Requests of 8 tokens under W=2, I=8, rank 0, block 16: request 0 (positions 4 .. 11)
    splits into 4-7 (rank 0's, block 0 of row 0) and 8-11 (rank 1's); request 1 (12 .. 19) into
    12-15 (rank 1's) and 16-19 (rank 0's, local positions 8-11, block 0 of row 1). Block 2^28 of
    16 tokens is slot 2^32: an int32 out is rejected on the host whichever run holds it, PAD on
    device paths."""
    query_start_loc = torch.tensor([0, 8, 16, 24], dtype=torch.int32)
    positions = torch.arange(4, 28)
    block_table = torch.tensor([[5, 6], [2**28, 7], [9, 10]], dtype=torch.int32)
    if huge_run == "first":
        block_table[1, 0], block_table[0, 0] = 3, 2**28
    kwargs = dict(cp_world_size=2, cp_rank=0, cp_interleave=8)
    wide = torch.zeros(24, dtype=torch.int64)
    specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=wide, **kwargs)
    huge = wide > 2**31 - 1
    assert huge.sum() == 4
    for backend in BACKENDS:
        out = torch.full((24,), 55, dtype=torch.int32)
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match="out is int32, but the slot of positions"):
                    specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out, **kwargs)
                assert out.tolist() == [55] * 24
            else:
                specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out, **kwargs)
                assert out[huge].tolist() == [PAD] * 4, backend
                assert out[~huge].tolist() == wide[~huge].to(torch.int32).tolist(), backend
