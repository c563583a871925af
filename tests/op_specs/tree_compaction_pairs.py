"""The op table's spec of tree_compaction_pairs; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _negative_block_ids, _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, bad, bad_with, stale, t32, t64


def _valid() -> Call:
    # D = 4, S = 4: request 0 (verified prefix 10, row 1) accepted path [0, 2, 3], request 1 (20, row 0) [0, 1];
    # CP 2 (rank 0, interleave 2), group 1 not sharded.
    return dict(accept_index=t32(0, 2, 3, -1, 4, 5, -1, -1).view(2, 4), accept_token_num=t32(2, 1),
                verified_seq_len=t64(10, 20), block_tables=[torch.arange(1, 17, dtype=I32).view(2, 8),
                                                            torch.arange(40, 56, dtype=I32).view(2, 8)],
                block_sizes=[4, 4], draft_token_num=4, idx_mapping=t32(1, 0), src_slots=stale(2, 8, dtype=I64),
                dst_slots=stale(2, 8, dtype=I64), blocks_per_kv_block=[1, 1], cp_sharded=[True, False],
                slot_mapping_enabled=[True, True], cp_world_size=2, cp_rank=0, cp_interleave=2,
                num_blocks=[t32(8, 8), t32(8, 8)], next_seq_lens=stale(2, dtype=I64),
                num_accepted_tokens=stale(2))


def _metadata() -> list[Bad]:
    return [
        bad("draft_token_num 0", "draft_token_num", draft_token_num=0),
        bad("cp_rank = cp_world_size", "cp_rank", cp_rank=2),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing the block", "cp_interleave", cp_interleave=3),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 4]),
        bad("blocks_per_kv_block[1] 0", "blocks_per_kv_block[1]", blocks_per_kv_block=[1, 0]),
        bad("cp_sharded for one table of two", "cp_sharded", cp_sharded=[True]),
        bad("accept_index 1-D", "accept_index", accept_index=t32(0, 2, 3, -1, 4, 5, -1, -1)),
        bad("accept_index without columns", "accept_index", accept_index=torch.zeros(2, 0, dtype=I32),
            src_slots=stale(2, 0, dtype=I64), dst_slots=stale(2, 0, dtype=I64)),
        bad("accept_token_num of another length", "accept_token_num", accept_token_num=t32(2)),
        bad("verified_seq_len of another length", "verified_seq_len", verified_seq_len=t64(10, 20, 30)),
        bad("idx_mapping of another length", "idx_mapping", idx_mapping=t32(1)),
        bad("src_slots of another width", "src_slots", src_slots=stale(2, 7, dtype=I64)),
        bad("dst_slots for one group of two", "dst_slots", dst_slots=stale(1, 8, dtype=I64)),
        bad("next_seq_lens of another length", "next_seq_lens", next_seq_lens=stale(3, dtype=I64)),
        bad("num_accepted_tokens 2-D", "num_accepted_tokens", num_accepted_tokens=stale(1, 2)),
        bad("num_blocks for one table of two", "num_blocks", num_blocks=[t32(8, 8)]),
        bad("num_blocks[1] shorter than its table", "num_blocks[1]", num_blocks=[t32(8, 8), t32(8)]),
        bad("block_tables[1] 1-D", "block_tables[1]", block_tables=[torch.arange(1, 17, dtype=I32).view(2, 8),
                                                                    torch.arange(8, dtype=I32)]),
        bad_with("src_slots with overlapping rows", "src_slots",
                 lambda call: call.update(src_slots=stale(8, dtype=I64).expand(2, 8))),
    ]


def _values() -> list[Bad]:
    return [
        bad("an accept count past the envelope", "accept_token_num", accept_token_num=t32(4, 1)),
        bad("a negative accept count", "accept_token_num", accept_token_num=t32(2, -1)),
        bad("an accepted node of another request", "accept_index",
            accept_index=t32(0, 2, 4, -1, 4, 5, -1, -1).view(2, 4)),
        bad("a negative verified_seq_len", "verified_seq_len", verified_seq_len=t64(-10, 20)),
        bad("a position past the allocated blocks", ("num_blocks[1]",), num_blocks=[t32(8, 8), t32(8, 3)]),
        bad("a position past the table", ("block_tables[1]",), verified_seq_len=t64(10, 40)),
        bad("idx_mapping past a table", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(1, 2)),
        bad("an int32 slot past 2^31 - 1", "src_slots", src_slots=stale(2, 8),
            block_tables=[torch.arange(1, 17, dtype=I32).view(2, 8), torch.full((2, 8), 2**29, dtype=I32)]),
        bad("an int32 next seq_len past 2^31 - 1", "next_seq_lens", next_seq_lens=stale(2),
            verified_seq_len=t64(2**31 - 3, 20), slot_mapping_enabled=[False, False]),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_groups, num_reqs = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    draft_token_num = draw(st.integers(1, 8))
    num_steps = draw(st.integers(1, draft_token_num))
    index, counts = [], []
    for r in range(num_reqs):
        count = draw(st.integers(0, num_steps - 1))
        path = [0] + sorted(torch.randperm(draft_token_num - 1, generator=generator)[:count].add(1).tolist())
        index += [r * draft_token_num + i for i in path] + [-1] * (num_steps - count - 1)
        counts.append(count)
    world = draw(st.sampled_from([1, 2]))
    block_sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)]
    rows = num_reqs + 2
    cols = [-(-(40 + draft_token_num) // bs) for bs in block_sizes]
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None
    slot_dtype = draw(st.sampled_from([I64, I32]))
    requests = draw(st.booleans())
    return dict(
        accept_index=torch.tensor(index, dtype=draw(st.sampled_from([I32, I64]))).view(num_reqs, num_steps),
        accept_token_num=torch.tensor(counts, dtype=draw(st.sampled_from([I32, I64]))),
        verified_seq_len=torch.randint(0, 40, (num_reqs,), generator=generator).to(draw(st.sampled_from([I64, I32]))),
        block_tables=[torch.randint(0, 5000, (rows, c), generator=generator, dtype=I32) for c in cols],
        block_sizes=block_sizes, draft_token_num=draft_token_num,
        idx_mapping=torch.tensor(idx, dtype=draw(st.sampled_from([I32, I64]))) if idx is not None else None,
        src_slots=stale(num_groups, num_reqs * num_steps, dtype=slot_dtype),
        dst_slots=stale(num_groups, num_reqs * num_steps, dtype=slot_dtype),
        blocks_per_kv_block=1, cp_sharded=[draw(st.booleans()) for _ in range(num_groups)],
        slot_mapping_enabled=[draw(st.booleans()) for _ in range(num_groups)], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=draw(st.sampled_from([1, 2])),
        num_blocks=[torch.full((rows,), c, dtype=I32) for c in cols] if draw(st.booleans()) else None,
        next_seq_lens=stale(num_reqs, dtype=draw(st.sampled_from([I64, I32]))) if requests else None,
        num_accepted_tokens=stale(num_reqs, dtype=draw(st.sampled_from([I64, I32]))) if requests else None)


def _request(draw, call: Call) -> int | None:
    num_reqs = call["accept_token_num"].numel()
    return None if num_reqs == 0 else _pick(draw, num_reqs)


def _count_outside(draw, call: Call) -> bool:
    r = _request(draw, call)
    if r is None:
        return False
    num_steps = call["accept_index"].size(1)
    call["accept_token_num"][r] = draw(st.sampled_from([-1, -7, num_steps, num_steps + 3]))
    return True


def _index_outside(draw, call: Call) -> bool:
    r = _request(draw, call)
    if r is None:
        return False
    j = draw(st.integers(0, int(call["accept_token_num"][r])))
    d = call["draft_token_num"]
    call["accept_index"][r, j] = draw(st.sampled_from([-1, (r + 1) * d, r * d - 1, 10**6]))
    return True


def _negative_base(draw, call: Call) -> bool:
    r = _request(draw, call)
    if r is None:
        return False
    call["verified_seq_len"][r] = draw(st.integers(-50, -1))
    return True


def _negative_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


TREE_COMPACTION_PAIRS = OpSpec(
    name="tree_compaction_pairs",
    wrapper=specops.tree_compaction_pairs,
    tensors={"accept_index": Arg((I32, I64), 2, row_stride=True), "accept_token_num": Arg((I32, I64), 1),
             "verified_seq_len": Arg((I64, I32), 1), "block_tables[0]": Arg((I32,), 2, row_stride=True),
             "block_tables[1]": Arg((I32,), 2, row_stride=True), "idx_mapping": Arg((I32, I64), 1),
             "src_slots": Arg((I64, I32), 2, row_stride=True), "dst_slots": Arg((I64, I32), 2, row_stride=True),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1),
             "next_seq_lens": Arg((I64, I32), 1), "num_accepted_tokens": Arg((I32, I64), 1)},
    outputs=("src_slots", "dst_slots", "next_seq_lens", "num_accepted_tokens"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("an accept count outside the envelope", _count_outside),
        Corruption("an accepted index outside its tree", _index_outside),
        Corruption("a negative verified_seq_len", _negative_base),
        Corruption("negative block ids", _negative_ids),
    ),
    scalars=("draft_token_num", "cp_world_size", "cp_rank", "cp_interleave", "block_sizes", "blocks_per_kv_block"),
    allocation_sizes={},
)
