"""The op table's spec of tree_slot_mappings; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _negative_block_ids, _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t32, t64


def _valid() -> Call:
    # Two trees of D = 3 under CP 2 (rank 1, interleave 2), request-indexed tables, group 1 not sharded.
    return dict(verified_seq_len=t64(5, 14), block_tables=[torch.arange(1, 13, dtype=I32).view(3, 4),
                                                           torch.arange(20, 44, dtype=I32).view(3, 8)],
                block_sizes=[4, 4], draft_token_num=3, idx_mapping=t32(2, 0), slot_mappings=[stale(8, dtype=I64),
                                                                                             stale(8, dtype=I32)],
                blocks_per_kv_block=[1, 1], cp_sharded=[True, False], slot_mapping_enabled=[True, True],
                cp_world_size=2, cp_rank=1, cp_interleave=2, num_blocks=[t32(4, 4, 4), t32(8, 8, 8)],
                num_tokens_padded=8)


def _metadata() -> list[Bad]:
    return [
        bad("draft_token_num 0", "draft_token_num", draft_token_num=0),
        bad("cp_rank = cp_world_size", "cp_rank", cp_rank=2),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing the block", "cp_interleave", cp_interleave=3),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 4]),
        bad("blocks_per_kv_block[1] 0", "blocks_per_kv_block[1]", blocks_per_kv_block=[1, 0]),
        bad("verified_seq_len 2-D", "verified_seq_len", verified_seq_len=t64(5, 14).view(1, 2)),
        bad("verified_seq_len float", "verified_seq_len", verified_seq_len=torch.tensor([5.0, 14.0])),
        bad("idx_mapping of another length", "idx_mapping", idx_mapping=t32(2)),
        bad("one slot mapping for two tables", "slot_mappings", slot_mappings=[stale(8, dtype=I64)]),
        bad("a slot mapping shorter than R * D", "slot_mappings[0]", slot_mappings=[stale(5, dtype=I64),
                                                                                   stale(8, dtype=I32)],
            num_tokens_padded=None),
        bad("num_tokens_padded past the outputs", "num_tokens_padded", num_tokens_padded=9),
        bad("num_tokens_padded below R * D", "num_tokens_padded", num_tokens_padded=5),
        bad("num_blocks for one table of two", "num_blocks", num_blocks=[t32(4, 4, 4)]),
        bad("num_blocks[1] shorter than its table", "num_blocks[1]", num_blocks=[t32(4, 4, 4), t32(8, 8)]),
        bad("block_tables[1] 1-D", "block_tables[1]", block_tables=[torch.arange(1, 13, dtype=I32).view(3, 4),
                                                                    torch.arange(8, dtype=I32)]),
        bad_with("a slot mapping sharing a table", ("slot_mappings[1]", "block_tables[0]"),
                 lambda call: call.update(slot_mappings=[call["slot_mappings"][0],
                                                         call["block_tables"][0].view(-1)[:8]])),
    ]


def _values() -> list[Bad]:
    return [
        bad("a negative verified_seq_len", "verified_seq_len", verified_seq_len=t64(-5, 14)),
        bad("a position past the allocated blocks", ("num_blocks[0]",), num_blocks=[t32(1, 4, 4), t32(8, 8, 8)]),
        bad("a position past the table", ("block_tables[1]",), verified_seq_len=t64(5, 30)),
        bad("idx_mapping past a table", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(2, 3)),
        bad("an int32 slot past 2^31 - 1", "slot_mappings[1]",
            block_tables=[torch.arange(1, 13, dtype=I32).view(3, 4), torch.full((3, 8), 2**29, dtype=I32)]),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_groups, num_reqs = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    draft_token_num = draw(st.integers(1, 8))
    world = draw(st.sampled_from([1, 2]))
    block_sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)]
    rows = num_reqs + 2
    cols = [-(-(40 + draft_token_num) // bs) for bs in block_sizes]
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None
    padded = num_reqs * draft_token_num + draw(st.integers(0, 3))
    return dict(
        verified_seq_len=torch.randint(0, 40, (num_reqs,), generator=generator).to(draw(st.sampled_from([I64, I32]))),
        block_tables=[torch.randint(0, 5000, (rows, c), generator=generator, dtype=I32) for c in cols],
        block_sizes=block_sizes, draft_token_num=draft_token_num,
        idx_mapping=torch.tensor(idx, dtype=draw(st.sampled_from([I32, I64]))) if idx is not None else None,
        slot_mappings=[stale(padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32])))
                       for _ in range(num_groups)],
        blocks_per_kv_block=1, cp_sharded=[draw(st.booleans()) for _ in range(num_groups)],
        slot_mapping_enabled=[draw(st.booleans()) for _ in range(num_groups)], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=draw(st.sampled_from([1, 2])),
        num_blocks=[torch.full((rows,), c, dtype=I32) for c in cols] if draw(st.booleans()) else None,
        num_tokens_padded=padded if draw(st.booleans()) else None)


def _past_tables(draw, call: Call) -> bool:
    """A tree far past every table (2^26 is a multiple of every block here)."""
    num_reqs = call["verified_seq_len"].numel()
    if num_reqs == 0 or not call["block_tables"]:
        return False
    r = _pick(draw, num_reqs)
    call["verified_seq_len"][r] = 2**26
    row = int(call["idx_mapping"][r]) if call["idx_mapping"] is not None else r
    if row < 0:
        return False
    # The native op rejects it where an enabled group stores one of its positions on this rank.
    for sharded, enabled in zip(call["cp_sharded"], call["slot_mapping_enabled"]):
        world, interleave = (call["cp_world_size"], call["cp_interleave"]) if sharded else (1, 1)
        rank = call["cp_rank"] if sharded else 0
        if enabled and any((2**26 + i) // interleave % world == rank for i in range(call["draft_token_num"])):
            return True
    return False


def _negative_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _negative_base(draw, call: Call) -> bool:
    if call["verified_seq_len"].numel() == 0:
        return False
    call["verified_seq_len"][_pick(draw, call["verified_seq_len"].numel())] = draw(st.integers(-50, -1))
    return True


def _row_past_tables(draw, call: Call) -> bool:
    num_reqs = call["verified_seq_len"].numel()
    if num_reqs == 0:
        return False
    if call["idx_mapping"] is None:
        call["idx_mapping"] = torch.arange(num_reqs, dtype=I32)
    r = _pick(draw, num_reqs)
    call["idx_mapping"][r] = num_reqs + 2 + draw(st.integers(0, 3))
    return any(call["slot_mapping_enabled"])


TREE_SLOT_MAPPINGS = OpSpec(
    name="tree_slot_mappings",
    wrapper=specops.tree_slot_mappings,
    tensors={"verified_seq_len": Arg((I64, I32), 1), "block_tables[0]": Arg((I32,), 2, row_stride=True),
             "block_tables[1]": Arg((I32,), 2, row_stride=True), "idx_mapping": Arg((I32, I64), 1),
             "slot_mappings[0]": Arg((I64, I32), 1), "slot_mappings[1]": Arg((I64, I32), 1),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1)},
    outputs=("slot_mappings[0]", "slot_mappings[1]"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("a tree past every table", _past_tables),
        Corruption("negative block ids", _negative_ids),
        Corruption("a negative verified_seq_len", _negative_base),
        Corruption("idx_mapping past the tables", _row_past_tables),
    ),
    scalars=("draft_token_num", "cp_world_size", "cp_rank", "cp_interleave", "block_sizes", "blocks_per_kv_block",
             "num_tokens_padded"),
    allocation_sizes={"num_tokens_padded": PAST_INT32, "draft_token_num": PAST_INT32},
)
