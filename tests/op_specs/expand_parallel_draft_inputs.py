"""The op table's spec of expand_parallel_draft_inputs; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _negative_block_ids, _pick, _seed
from ._spec import (
    I32, I64, PAST_INT32, Arg, Bad, Call, Corruption, OpSpec, SLOW_KERNEL_GUARD_EXAMPLES, bad, bad_with, stale, t32,
    t64,
)

BOOL = torch.bool


def _valid() -> Call:
    # The Eagle example, two groups (the second not CP-sharded), CP 2 rank 0, padded.
    return dict(target_token_ids=t64(11, 12, 13, 21, 22, 23, 24), target_positions=t64(7, 8, 9, 30, 31, 32, 33),
                next_token_ids=t64(14, 25), query_start_loc=t32(0, 3, 7),
                block_tables=[t32(1, 2, 3, 4, 5, 6).view(2, 3), torch.arange(8, dtype=I32).view(2, 4) + 10],
                block_sizes=[16, 16], slots_per_request=3, max_model_len=64, parallel_drafting_token_id=999,
                shift_input_ids=True, padding_token_id=0, num_rejected_tokens=t32(1, 0), seq_lens=t32(10, 34),
                idx_mapping=t32(1, 0), blocks_per_kv_block=[1, 1], cp_sharded=[True, False],
                slot_mapping_enabled=[True, True], cp_world_size=2, cp_rank=0, cp_interleave=1,
                num_blocks=[t32(3, 3), t32(4, 4)], input_ids=stale(13), positions=stale(13, dtype=I64),
                is_rejected_token_mask=torch.ones(13, dtype=BOOL), is_masked_token_mask=torch.ones(13, dtype=BOOL),
                token_indices_to_sample=stale(9), hidden_state_mapping=stale(8),
                slot_mappings=[stale(13, dtype=I64), stale(13)], out_query_start_loc=stale(4), out_seq_lens=stale(3),
                num_tokens_padded=12, num_reqs_padded=3)


def _metadata() -> list[Bad]:
    return [
        bad("slots_per_request 1 with the shift", "slots_per_request", slots_per_request=1),
        bad("max_model_len 0", "max_model_len", max_model_len=0),
        bad("cp_rank = cp_world_size", "cp_rank", cp_rank=2),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("blocks_per_kv_block[1] 0", "blocks_per_kv_block[1]", blocks_per_kv_block=[1, 0]),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 16]),
        bad("query_start_loc shorter than R + 1", "query_start_loc", query_start_loc=t32(0, 3)),
        bad("target_positions shorter than T", "target_positions", target_positions=t64(7, 8, 9)),
        bad("num_rejected_tokens of another length", "num_rejected_tokens", num_rejected_tokens=t32(1)),
        bad("idx_mapping of another length", "idx_mapping", idx_mapping=t32(1, 0, 0)),
        bad("input_ids shorter than T'", "input_ids", input_ids=stale(10), num_tokens_padded=None),
        bad("num_tokens_padded past the outputs", "num_tokens_padded", num_tokens_padded=14),
        bad("num_tokens_padded below T'", "num_tokens_padded", num_tokens_padded=10),
        bad("num_reqs_padded below R", "num_reqs_padded", num_reqs_padded=1),
        bad("token_indices_to_sample shorter than num_reqs_padded * S", "token_indices_to_sample",
            token_indices_to_sample=stale(8)),
        bad("out_query_start_loc shorter than num_reqs_padded + 1", "out_query_start_loc",
            out_query_start_loc=stale(3)),
        bad("one slot mapping for two tables", "slot_mappings", slot_mappings=[stale(13, dtype=I64)]),
        bad_with("an output sharing an input", ("input_ids", "next_token_ids"),
                 lambda call: call.update(next_token_ids=call["input_ids"][11:13])),
    ]


def _values() -> list[Bad]:
    return [
        bad("query_start_loc not ending at T", "query_start_loc", query_start_loc=t32(0, 3, 6)),
        bad("a request of no token", "query_start_loc", query_start_loc=t32(0, 0, 7), num_rejected_tokens=t32(0, 0)),
        bad("more rejected tokens than the query less one", "num_rejected_tokens", num_rejected_tokens=t32(3, 0)),
        bad("target positions not consecutive", "target_positions", target_positions=t64(7, 8, 10, 30, 31, 32, 33)),
        bad("a kept position past the allocated blocks", ("num_blocks[0]",), num_blocks=[t32(0, 3), t32(4, 4)]),
        bad("idx_mapping past a table", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(1, 2)),
        bad("an int32 slot past 2^31 - 1", "slot_mappings[1]",
            block_tables=[t32(1, 2, 3, 4, 5, 6).view(2, 3), torch.full((2, 4), 2**28, dtype=I32)]),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_groups, num_reqs = draw(st.integers(0, 4)), draw(st.integers(0, 5))
    shift = draw(st.booleans())
    slots = draw(st.integers(2 if shift else 1, 4))
    limit, world = draw(st.integers(1, 40)), draw(st.sampled_from([1, 2]))
    query_lens = torch.randint(1, 5, (num_reqs,), generator=generator)
    num_tokens = int(query_lens.sum())
    starts = torch.randint(0, limit + 3, (num_reqs,), generator=generator)
    positions = torch.cat([torch.arange(int(s), int(s) + int(q)) for s, q in zip(starts, query_lens)]
                          ) if num_reqs else torch.zeros(0, dtype=I64)
    num_out = num_tokens + num_reqs * (slots - (1 if shift else 0))
    tokens_padded, reqs_padded = num_out + draw(st.integers(0, 2)), num_reqs + draw(st.integers(0, 2))
    block_sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)]
    rows = num_reqs + 2
    cols = [-(-(limit + 8) // bs) for bs in block_sizes]
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None
    with_seq_lens = draw(st.booleans())
    return dict(
        target_token_ids=torch.randint(0, 1000, (num_tokens,), generator=generator).to(draw(st.sampled_from([I64, I32]))),
        target_positions=positions.to(draw(st.sampled_from([I64, I32]))),
        next_token_ids=torch.randint(0, 1000, (num_reqs,), generator=generator).to(draw(st.sampled_from([I64, I32]))),
        query_start_loc=torch.cat([torch.zeros(1, dtype=I64), query_lens.cumsum(0)]).to(I32),
        block_tables=[torch.randint(0, 5000, (rows, c), generator=generator, dtype=I32) for c in cols],
        block_sizes=block_sizes, slots_per_request=slots, max_model_len=limit, parallel_drafting_token_id=999,
        shift_input_ids=shift, padding_token_id=draw(st.integers(0, 5)),
        num_rejected_tokens=((query_lens - 1) * torch.rand(num_reqs, generator=generator)).round().to(I32)
        if draw(st.booleans()) else None,
        seq_lens=(starts + query_lens).to(I32) if with_seq_lens else None,
        idx_mapping=torch.tensor(idx, dtype=draw(st.sampled_from([I32, I64]))) if idx is not None else None,
        blocks_per_kv_block=1, cp_sharded=[draw(st.booleans()) for _ in range(num_groups)],
        slot_mapping_enabled=[draw(st.booleans()) for _ in range(num_groups)], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=1,
        num_blocks=[torch.full((rows,), c, dtype=I32) for c in cols] if draw(st.booleans()) else None,
        input_ids=stale(tokens_padded, dtype=draw(st.sampled_from([I32, I64]))),
        positions=stale(tokens_padded, dtype=draw(st.sampled_from([I64, I32]))),
        is_rejected_token_mask=torch.ones(tokens_padded, dtype=BOOL),
        is_masked_token_mask=torch.ones(tokens_padded, dtype=BOOL),
        token_indices_to_sample=stale(reqs_padded * slots + draw(st.integers(0, 1))),
        hidden_state_mapping=stale(num_tokens + draw(st.integers(0, 1))) if shift else None,
        slot_mappings=[stale(tokens_padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32])))
                       for _ in range(num_groups)],
        out_query_start_loc=stale(reqs_padded + 1 + draw(st.integers(0, 1))),
        out_seq_lens=stale(reqs_padded) if with_seq_lens else None,
        num_tokens_padded=tokens_padded, num_reqs_padded=reqs_padded)


def _negative_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _rejected_outside(draw, call: Call) -> bool:
    rejected = call["num_rejected_tokens"]
    if rejected is None or rejected.numel() == 0:
        return False
    rejected[_pick(draw, rejected.numel())] = draw(st.sampled_from([-3, 50, 2**31 - 1]))
    return True


def _layout_broken(draw, call: Call) -> bool:
    qsl = call["query_start_loc"]
    if qsl.numel() < 2:
        return False
    qsl[_pick(draw, qsl.numel())] = draw(st.sampled_from([-(2**31), -7, 2**20, 2**31 - 1]))
    return True


EXPAND_PARALLEL_DRAFT = OpSpec(
    name="expand_parallel_draft_inputs",
    guard_examples=SLOW_KERNEL_GUARD_EXAMPLES,
    wrapper=specops.expand_parallel_draft_inputs,
    tensors={"target_token_ids": Arg((I64, I32), 1), "target_positions": Arg((I64, I32), 1),
             "next_token_ids": Arg((I64, I32), 1), "query_start_loc": Arg((I32,), 1),
             "block_tables[0]": Arg((I32,), 2, row_stride=True), "block_tables[1]": Arg((I32,), 2, row_stride=True),
             "num_rejected_tokens": Arg((I32,), 1), "seq_lens": Arg((I32,), 1), "idx_mapping": Arg((I32, I64), 1),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1), "input_ids": Arg((I32, I64), 1),
             "positions": Arg((I64, I32), 1), "is_rejected_token_mask": Arg((BOOL,), 1),
             "is_masked_token_mask": Arg((BOOL,), 1), "token_indices_to_sample": Arg((I32,), 1),
             "hidden_state_mapping": Arg((I32,), 1), "slot_mappings[0]": Arg((I64, I32), 1),
             "slot_mappings[1]": Arg((I64, I32), 1), "out_query_start_loc": Arg((I32,), 1),
             "out_seq_lens": Arg((I32,), 1)},
    outputs=("input_ids", "positions", "is_rejected_token_mask", "is_masked_token_mask", "token_indices_to_sample",
             "hidden_state_mapping", "slot_mappings[0]", "slot_mappings[1]", "out_query_start_loc", "out_seq_lens"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    offsets=("query_start_loc",),
    corruptions=(
        Corruption("negative block ids", _negative_ids),
        Corruption("rejected counts outside the query", _rejected_outside),
        Corruption("a broken query layout", _layout_broken, device="bounds"),
    ),
    # parallel_drafting_token_id and padding_token_id: any int64 is a token id.
    scalars=("slots_per_request", "max_model_len", "cp_world_size", "cp_rank", "cp_interleave", "block_sizes",
             "blocks_per_kv_block", "num_tokens_padded", "num_reqs_padded"),
    allocation_sizes={"num_tokens_padded": PAST_INT32, "num_reqs_padded": PAST_INT32,
                      # 2^30 is inside the argument's own bound; T' and R * S are not
                      "slots_per_request": (2**30, *PAST_INT32)},
)
