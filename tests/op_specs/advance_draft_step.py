"""The op table's spec of advance_draft_step; see op_table.py."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import specops

from ._corruptions import _negative_block_ids, _pick, _seed
from ._spec import I32, I64, Arg, Bad, Call, Corruption, OpSpec, PAST_INT32, bad, bad_with, stale, t32, t64

F32, BF16 = torch.float32, torch.bfloat16


def _hidden(rows: int) -> torch.Tensor:
    # bfloat16 in the valid call, so that the matrix's float32 is a wrong dtype (exact: small integers).
    return (torch.arange(rows * 2, dtype=F32).view(rows, 2) + 1).to(BF16)


def _valid() -> Call:
    # The clamp example: first step, CP 2 (rank 1), request-indexed tables, group 1 not sharded.
    return dict(positions=t64(9, 62, 63), seq_lens=t32(12, 63, 64, 5),
                block_tables=[torch.arange(1, 13, dtype=I32).view(3, 4),
                              (torch.arange(8, dtype=I32) + torch.tensor([[21], [31], [41]], dtype=I32))],
                block_sizes=[8, 8], max_model_len=64, past_max_model_len="clamp", token_indices=None,
                num_rejected_tokens=t32(2, 0, 0), idx_mapping=t32(2, 0, 1), out_positions=stale(6, dtype=I64),
                slot_mappings=[stale(6, dtype=I64), stale(6, dtype=I32)], query_start_loc=stale(5),
                blocks_per_kv_block=[1, 1], cp_sharded=[True, False], slot_mapping_enabled=[True, True],
                cp_world_size=2, cp_rank=1, cp_interleave=1, num_blocks=[t32(4, 4, 4), t32(8, 8, 8)],
                num_tokens_padded=6, num_reqs_padded=4,
                # The token bookkeeping, all of it (step 1 of 3: not the last one).
                target_seq_lens=t32(12, 63, 64), input_ids=stale(4), draft_tokens=stale(4, 3, dtype=I64),
                sampled_tokens=t64(17, 18, 19), draft_step=torch.tensor(1), num_draft_steps=3,
                sample_positions=t64(100, 200, 300, 400), hidden_states=_hidden(4),
                next_hidden_states=torch.zeros(5, 2, dtype=BF16))


def _metadata() -> list[Bad]:
    return [
        bad("max_model_len 0", "max_model_len", max_model_len=0),
        # The limit as a device tensor (vLLM 0.34's max_model_len_gpu).
        bad("max_model_len_tensor float", "max_model_len_tensor", max_model_len=None,
            max_model_len_tensor=torch.tensor(14.0)),
        bad("max_model_len_tensor 1-D", "max_model_len_tensor", max_model_len=None, max_model_len_tensor=t32(14)),
        bad("max_model_len and max_model_len_tensor both", "max_model_len_tensor",
            max_model_len_tensor=torch.tensor(14, dtype=I32)),
        bad_with("max_model_len_tensor sharing an output", "max_model_len_tensor",
                 lambda call: call.update(max_model_len=None, max_model_len_tensor=call["seq_lens"].view(-1)[0])),
        bad("an unknown rule", "past_max_model_len", past_max_model_len="wrap"),
        bad("cp_rank = cp_world_size", "cp_rank", cp_rank=2),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 8]),
        bad("blocks_per_kv_block[1] 0", "blocks_per_kv_block[1]", blocks_per_kv_block=[1, 0]),
        bad("cp_interleave not dividing the block", "cp_interleave", cp_interleave=3),
        bad("seq_lens shorter than R", "seq_lens", seq_lens=t32(12, 63), num_reqs_padded=None),
        bad("num_reqs_padded past seq_lens", ("num_reqs_padded", "seq_lens"), num_reqs_padded=5),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=2),
        bad("num_tokens_padded past the outputs", "num_tokens_padded", num_tokens_padded=7),
        bad("a slot mapping shorter than num_tokens_padded", ("num_tokens_padded", "slot_mappings[0]"),
            slot_mappings=[stale(5, dtype=I64), stale(6, dtype=I32)]),
        bad("num_rejected_tokens of another length", "num_rejected_tokens", num_rejected_tokens=t32(2, 0)),
        bad("idx_mapping of another length", "idx_mapping", idx_mapping=t32(2, 0)),
        bad("one slot mapping for two tables", "slot_mappings", slot_mappings=[stale(6, dtype=I64)]),
        bad("query_start_loc shorter than num_reqs_padded + 1", "query_start_loc", query_start_loc=stale(4)),
        bad("token_indices int16", "token_indices", token_indices=torch.tensor([0, 1, 2], dtype=torch.int16)),
        bad_with("out_positions sharing positions", ("out_positions", "positions"),
                 lambda call: call.update(out_positions=call["positions"], token_indices=t32(0, 1, 2))),
        bad("target_seq_lens of another length", "target_seq_lens", target_seq_lens=t32(12, 63)),
        bad("draft_tokens with fewer rows than R", "draft_tokens", draft_tokens=stale(2, 3, dtype=I64)),
        bad("sampled_tokens of another length", "sampled_tokens", sampled_tokens=t64(17, 18)),
        bad("sampled_tokens without draft_tokens", "sampled_tokens", draft_tokens=None, input_ids=None),
        bad("input_ids shorter than R", "input_ids", input_ids=stale(2)),
        bad("draft_step of one element, 1-D", "draft_step", draft_step=t64(1)),
        bad("num_draft_steps 0", "num_draft_steps", num_draft_steps=0),
        bad("num_draft_steps without draft_step", "num_draft_steps", draft_step=None),
        bad("sample_positions shorter than R", "sample_positions", sample_positions=t64(1, 2)),
        bad("hidden_states alone", "hidden_states", next_hidden_states=None),
        bad("next_hidden_states of another width", "next_hidden_states",
            next_hidden_states=torch.zeros(5, 3, dtype=BF16)),
        bad_with("input_ids sharing sample_positions", ("sample_positions", "input_ids"),
                 lambda call: call.update(input_ids=call["sample_positions"])),
        bad_with("a slot mapping sharing a table", ("slot_mappings[1]", "block_tables[0]"),
                 lambda call: call.update(slot_mappings=[call["slot_mappings"][0], call["block_tables"][0][0, :]],
                                          num_tokens_padded=4)),
    ]


def _values() -> list[Bad]:
    return [
        bad("a negative position", "positions", positions=t64(9, -5, 63)),
        bad("max_model_len_tensor 0", "max_model_len_tensor", max_model_len=None,
            max_model_len_tensor=torch.tensor(0, dtype=I32)),
        bad("token_indices outside positions", "token_indices", token_indices=t32(0, 3, 1)),
        bad("more rejected tokens than seq_lens", "num_rejected_tokens", num_rejected_tokens=t32(13, 0, 0)),
        bad("a position past the allocated blocks", ("num_blocks[0]",), num_blocks=[t32(4, 3, 4), t32(8, 8, 8)]),
        bad("idx_mapping past a table", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(2, 0, 3)),
        bad("a step past the drafts' columns", "draft_step", draft_step=t64(3)),
        bad("more rejected tokens than target_seq_lens", ("num_rejected_tokens", "target_seq_lens"),
            num_rejected_tokens=t32(13, 0, 0), seq_lens=t32(20, 63, 64, 5)),
        bad("an int32 slot past 2^31 - 1", "slot_mappings[1]",
            block_tables=[torch.arange(1, 13, dtype=I32).view(3, 4), torch.full((3, 8), 2**28, dtype=I32)]),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_groups, num_reqs = draw(st.integers(0, 5)), draw(st.integers(0, 6))
    limit, world = draw(st.integers(1, 40)), draw(st.sampled_from([1, 2]))
    block_sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)]
    rows = num_reqs + 2
    gather = draw(st.booleans())
    positions = torch.randint(0, limit + 3, (num_reqs + (2 if gather else 0),), generator=generator)
    seq_lens = torch.randint(1, 60, (num_reqs,), generator=generator, dtype=I32)
    reqs_padded, tokens_padded = num_reqs + draw(st.integers(0, 2)), num_reqs + draw(st.integers(0, 2))
    cols = [-(-(limit + 3) // bs) for bs in block_sizes]
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None
    return dict(
        positions=positions.to(draw(st.sampled_from([I64, I32]))),
        seq_lens=torch.cat([seq_lens, stale(reqs_padded - num_reqs + draw(st.integers(0, 1)))]),
        block_tables=[torch.randint(0, 5000, (rows, c), generator=generator, dtype=I32) for c in cols],
        block_sizes=block_sizes, past_max_model_len=draw(st.sampled_from(["reset", "clamp"])),
        token_indices=torch.randperm(positions.numel(), generator=generator)[:num_reqs].to(I32) if gather else None,
        num_rejected_tokens=(seq_lens * torch.rand(num_reqs, generator=generator)).to(I32) if draw(st.booleans()) else None,
        idx_mapping=torch.tensor(idx, dtype=draw(st.sampled_from([I32, I64]))) if idx is not None else None,
        out_positions=stale(tokens_padded, dtype=draw(st.sampled_from([I64, I32]))),
        slot_mappings=[stale(tokens_padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32])))
                       for _ in range(num_groups)],
        query_start_loc=stale(reqs_padded + 1) if draw(st.booleans()) else None,
        blocks_per_kv_block=1, cp_sharded=[draw(st.booleans()) for _ in range(num_groups)],
        slot_mapping_enabled=[draw(st.booleans()) for _ in range(num_groups)], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=1,
        num_blocks=[torch.full((rows,), c, dtype=I32) for c in cols] if draw(st.booleans()) else None,
        num_tokens_padded=tokens_padded, num_reqs_padded=reqs_padded, **_limit(draw, limit),
        **(_draw_inputs(draw, generator, num_reqs) if draw(st.booleans()) else {}))


def _limit(draw, limit: int) -> Call:
    """max_model_len as an int or as a 0-D tensor read on the device (vLLM 0.34's form)."""
    if draw(st.booleans()):
        return dict(max_model_len=limit)
    return dict(max_model_len=None, max_model_len_tensor=torch.tensor(limit, dtype=draw(st.sampled_from([I32, I64]))))


def set_limit(call: Call, limit: int) -> None:
    """Sets the limit in the form the call gives it."""
    if call.get("max_model_len_tensor") is not None:
        call["max_model_len_tensor"] = torch.tensor(limit, dtype=call["max_model_len_tensor"].dtype)
    else:
        call["max_model_len"] = limit


def _draw_inputs(draw, generator, num_reqs: int) -> Call:
    """The token bookkeeping of a random step: the first (target seq_lens, drafts' column 0) or a
    later one (sampled tokens stored at a drawn step, possibly the last)."""
    columns = draw(st.integers(1, 4))
    later = draw(st.booleans())
    step = draw(st.integers(0, columns - 1))
    hidden = torch.randn(num_reqs + 1, draw(st.integers(0, 6)), generator=generator)
    hidden = hidden.to(draw(st.sampled_from([F32, BF16])))
    return dict(
        target_seq_lens=None if later else torch.randint(60, 90, (num_reqs,), generator=generator, dtype=I32),
        input_ids=stale(num_reqs + 1, dtype=draw(st.sampled_from([I32, I64]))),
        draft_tokens=torch.randint(0, 500, (num_reqs + 1, columns), generator=generator),
        sampled_tokens=torch.randint(0, 500, (num_reqs,), generator=generator) if later else None,
        draft_step=torch.tensor(step) if later else None, num_draft_steps=columns if later else None,
        sample_positions=torch.randint(0, 99, (num_reqs + 1,), generator=generator),
        hidden_states=hidden, next_hidden_states=torch.zeros_like(hidden))


def _position_past_tables(draw, call: Call) -> bool:
    """A request far past every table, stored on this rank (2^26 is a multiple of every block here)."""
    num_reqs = call["seq_lens"].numel() if call["token_indices"] is None else call["token_indices"].numel()
    num_reqs = min(num_reqs, call["positions"].numel() if call["token_indices"] is None else num_reqs)
    if num_reqs == 0 or not call["block_tables"]:
        return False
    r = _pick(draw, num_reqs)
    index = int(call["token_indices"][r]) if call["token_indices"] is not None else r
    call["positions"][index] = 2**26 + call["cp_rank"] - 1
    set_limit(call, 2**27)
    row = int(call["idx_mapping"][r]) if call["idx_mapping"] is not None else r
    return row >= 0 and any(call["slot_mapping_enabled"])


def _negative_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _token_index_outside(draw, call: Call) -> bool:
    if call["token_indices"] is None or call["token_indices"].numel() == 0:
        return False
    call["token_indices"][_pick(draw, call["token_indices"].numel())] = draw(st.sampled_from([-1, 99]))
    return True


ADVANCE_DRAFT_STEP = OpSpec(
    name="advance_draft_step",
    guard_examples=15,  # slow under the interpreter, though less than the SLOW_KERNEL_GUARD_EXAMPLES ones
    wrapper=specops.advance_draft_step,
    tensors={"positions": Arg((I64, I32), 1), "seq_lens": Arg((I32,), 1),
             "block_tables[0]": Arg((I32,), 2, row_stride=True), "block_tables[1]": Arg((I32,), 2, row_stride=True),
             "token_indices": Arg((I32, I64), 1), "num_rejected_tokens": Arg((I32,), 1),
             "idx_mapping": Arg((I32, I64), 1), "out_positions": Arg((I64, I32), 1),
             "slot_mappings[0]": Arg((I64, I32), 1), "slot_mappings[1]": Arg((I64, I32), 1),
             "query_start_loc": Arg((I32,), 1), "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1),
             "target_seq_lens": Arg((I32,), 1), "input_ids": Arg((I32, I64), 1), "draft_tokens": Arg((I64, I32), 2),
             "sampled_tokens": Arg((I64, I32), 1), "draft_step": Arg((I64, I32), 0),
             "sample_positions": Arg((I64, I32), 1), "hidden_states": Arg((BF16, F32, torch.float16), 2),
             "next_hidden_states": Arg((BF16, F32, torch.float16), 2),
             "max_model_len_tensor": Arg((I32, I64), 0)},
    outputs=("seq_lens", "out_positions", "slot_mappings[0]", "slot_mappings[1]", "query_start_loc", "input_ids",
             "draft_tokens", "sample_positions", "next_hidden_states"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    exclusive=("token_indices", "max_model_len_tensor"),
    corruptions=(
        Corruption("a position past every table", _position_past_tables),
        Corruption("negative block ids", _negative_ids),
        Corruption("a token index outside positions", _token_index_outside),
    ),
    scalars=("max_model_len", "cp_world_size", "cp_rank", "cp_interleave", "block_sizes", "blocks_per_kv_block",
             "num_tokens_padded", "num_reqs_padded", "num_draft_steps"),
    allocation_sizes={"num_tokens_padded": PAST_INT32},
)
