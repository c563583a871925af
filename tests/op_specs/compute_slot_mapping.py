"""The OpSpec of torch.ops.specops.compute_slot_mapping (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import batch_shapes, make_batch

import specops

from ._corruptions import (
    _seed, _pick, _one_entry, _negative, _with_idx_mapping, _negative_block_ids, _query_start_loc_past,
)
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, PAST_INT32, bad, t32, t64, stale


def _slot_valid() -> Call:
    return dict(query_start_loc=t32(0, 2, 3), positions=t64(0, 17, 5),
                block_table=torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=I32), block_size=16,
                out=stale(5, dtype=I64), blocks_per_kv_block=1, cp_world_size=1, cp_rank=0, cp_interleave=1,
                idx_mapping=t32(2, 0), num_tokens_padded=4, num_blocks=t32(2, 1, 2))


def _slot_metadata() -> list[Bad]:
    return [
        bad("R+1 = 0 entries", "query_start_loc", query_start_loc=torch.zeros(0, dtype=I32)),
        bad("one request more than idx_mapping", ("idx_mapping", "query_start_loc"), query_start_loc=t32(0, 2, 3, 3)),
        bad("out smaller than T", ("num_tokens_padded", "out"), out=stale(2, dtype=I64), num_tokens_padded=None),
        bad("num_tokens_padded < T", "num_tokens_padded", num_tokens_padded=2),
        bad("num_tokens_padded > out", ("num_tokens_padded", "out"), num_tokens_padded=6),
        bad("block_size 0", "block_size", block_size=0),
        bad("block_size -16", "block_size", block_size=-16),
        bad("blocks_per_kv_block 0", "blocks_per_kv_block", blocks_per_kv_block=0),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_rank = cp_world_size", ("cp_rank", "cp_world_size"), cp_rank=1),
        bad("cp_rank -1", "cp_rank", cp_rank=-1),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing the block", "cp_interleave", cp_interleave=3),
        bad("virtual block past int32", ("block_size", "cp_world_size"), block_size=2**30, cp_world_size=2),
        bad("num_blocks shorter than the table", ("num_blocks", "block_table"), num_blocks=t32(2, 1)),
    ]


def _slot_values() -> list[Bad]:
    return [
        bad("position past the block table", "positions", positions=t64(0, 32, 5)),
        # Request 0 reads row 2, which holds one block: position 17 needs a second.
        bad("position past the row's allocated blocks", ("positions", "num_blocks"), num_blocks=t32(2, 1, 1)),
        bad("negative position", "positions", positions=t64(0, -1, 5)),
        bad("position past int32", "positions", positions=t64(0, 2**31, 5)),
        bad("idx_mapping past the block table", "idx_mapping", idx_mapping=t32(3, 0)),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 4, 3)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("query_start_loc[R] != T", ("query_start_loc", "positions"), positions=t64(0, 17, 5, 6),
            num_tokens_padded=4),
        # Row 2, position 0: block 2^28 of 16 tokens is slot 2^32, which an int32 out would hold as 0.
        bad("a slot past an int32 out", "out", out=stale(5, dtype=I32),
            block_table=torch.tensor([[1, 2], [3, 4], [2**28, 6]], dtype=I32)),
    ]


@st.composite
def _slot_draw(draw) -> Call:
    query_lens, context_lens = draw(batch_shapes(max_reqs=5, max_query_len=5, max_context=120))
    block_size = draw(st.sampled_from([1, 4, 16]))
    blocks_per_kv_block = draw(st.sampled_from([1, 2]))
    world = draw(st.sampled_from([1, 2, 3]))
    interleave = draw(st.sampled_from([1, 2, 4]))
    if (block_size * blocks_per_kv_block) % interleave:
        interleave = 1
    batch = make_batch(_seed(draw), query_lens=query_lens, context_lens=context_lens,
                       tokens_per_block_row=block_size * blocks_per_kv_block * world,
                       columns_per_block=blocks_per_kv_block, extra_rows=2,
                       with_idx_mapping=draw(st.booleans()), unmapped_fraction=0.3)
    idx_mapping = batch.idx_mapping
    if idx_mapping is not None:
        idx_mapping = idx_mapping.to(draw(st.sampled_from([I32, I64])))
    padded = batch.num_tokens + draw(st.integers(0, 4))
    untouched = draw(st.integers(0, 2))  # entries past num_tokens_padded: never written
    # Every column counted as allocated, or no counts: the positions stay valid.
    num_blocks = (torch.full((batch.block_table.size(0),), batch.block_table.size(1), dtype=I32)
                  if draw(st.booleans()) else None)
    return dict(query_start_loc=batch.query_start_loc, positions=batch.positions.to(draw(st.sampled_from([I64, I32]))),
                block_table=batch.block_table, block_size=block_size, num_blocks=num_blocks,
                out=stale(padded + untouched, dtype=draw(st.sampled_from([I64, I32]))),
                blocks_per_kv_block=blocks_per_kv_block, cp_world_size=world, cp_rank=_pick(draw, world),
                cp_interleave=interleave, idx_mapping=idx_mapping, num_tokens_padded=padded)


def _slot_token_with_row(draw, call: Call) -> int | None:
    """A token whose request reads a row of the table (mapping it to row 0 if it had none)."""
    num_tokens = call["positions"].numel()
    if num_tokens == 0:
        return None
    token = _pick(draw, num_tokens)
    if call["idx_mapping"] is not None:
        request = int(torch.searchsorted(call["query_start_loc"][1:], token, right=True))
        if not 0 <= int(call["idx_mapping"][request]) < call["block_table"].size(0):
            call["idx_mapping"][request] = 0
    return token


def _slot_local_position(call: Call, virtual_block: int) -> int:
    """A position in `virtual_block` that this CP rank stores."""
    block = call["block_size"] * call["blocks_per_kv_block"]
    return virtual_block * block * call["cp_world_size"] + call["cp_rank"] * call["cp_interleave"]


def _slot_positions_past_table(call: Call) -> st.SearchStrategy[int]:
    first_uncovered = call["block_table"].size(1) // call["blocks_per_kv_block"]
    return st.integers(0, 3).map(lambda k: _slot_local_position(call, first_uncovered + k))


def _slot_more_positions_than_tokens(draw, call: Call) -> bool:
    """T past query_start_loc[R]: tokens outside every request (with R = 0, a batch of none)."""
    extra = draw(st.integers(1, 3))
    call["positions"] = torch.cat([call["positions"], torch.zeros(extra, dtype=call["positions"].dtype)])
    call["num_tokens_padded"] += extra
    call["out"] = stale(call["out"].numel() + extra, dtype=call["out"].dtype)
    return True


def _slot_idx_past_table(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs == 0:
        return False
    _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = call["block_table"].size(0) + draw(st.integers(0, 5))
    return True


def _slot_negative_idx(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs:
        _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = -draw(st.integers(1, 5))
    return False


SLOT_MAPPING = OpSpec(
    name="compute_slot_mapping",
    wrapper=specops.compute_slot_mapping,
    tensors=dict(query_start_loc=Arg((I32,), 1), positions=Arg((I64, I32), 1),
                 block_table=Arg((I32,), 2, row_stride=True), idx_mapping=Arg((I32, I64), 1), out=Arg((I64, I32), 1),
                 num_blocks=Arg((I32,), 1)),
    outputs=("out",),
    valid_call=_slot_valid,
    metadata_errors=_slot_metadata,
    value_errors=_slot_values,
    offsets=("query_start_loc",),
    draw_call=_slot_draw(),
    corruptions=(
        Corruption("position past the block table", _one_entry(
            "positions", _slot_positions_past_table, native_raises=True, where=_slot_token_with_row)),
        Corruption("negative position", _one_entry("positions", _negative, native_raises=True,
                                                   where=_slot_token_with_row)),
        Corruption("idx_mapping past the block table", _slot_idx_past_table),
        Corruption("negative idx_mapping", _slot_negative_idx),
        Corruption("negative block ids", _negative_block_ids),
        Corruption("query_start_loc[R] past T", _query_start_loc_past(lambda call: call["positions"].numel()),
                   device="bounds"),
        Corruption("T past query_start_loc[R]", _slot_more_positions_than_tokens, device="bounds"),
    ),
    allocation_sizes={"num_tokens_padded": PAST_INT32},
)
