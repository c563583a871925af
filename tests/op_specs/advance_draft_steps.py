"""The op table's spec of advance_draft_steps; see op_table.py.

The wrapper takes its outputs as one `out=DraftSteps`; the table describes each output as an
argument of its own (named as the errors name them: out_positions, out_slots[0], ...), so the
spec's wrapper is an adapter that packs them into the DraftSteps the op writes.
"""

from __future__ import annotations

import inspect

import torch
from hypothesis import strategies as st

import specops
from specops.ops.advance_draft_steps import DraftSteps, pass_extents

from ._corruptions import _negative_block_ids, _pick, _seed
from .advance_draft_step import _limit, set_limit
from ._spec import (
    I32, I64, Arg, Bad, Call, Corruption, OpSpec, SLOW_KERNEL_GUARD_EXAMPLES, bad, bad_with, stale, t32, t64,
)

F32, BF16 = torch.float32, torch.bfloat16
FIELDS = ("out_positions", "out_seq_lens", "out_query_start_loc", "out_cos_sin", "out_local_cos_sin",
          "out_local_query_start_loc", "out_local_seq_lens", "out_start_pos")


def advance_draft_steps(*, out_slots, out_slot_pairs, **call) -> DraftSteps:
    """specops.advance_draft_steps with each output given by name."""
    fields = {name.removeprefix("out_"): call.pop(name) for name in FIELDS}
    return specops.advance_draft_steps(**call, out=DraftSteps(**fields, slots=out_slots, slot_pairs=out_slot_pairs))


# The table finds the op's checks through the wrapper's module (test_versions, test_bad_input_matrix),
# and which keywords default to None through its signature: the wrapper's, `out` given by field.
advance_draft_steps.__module__ = DraftSteps.__module__
advance_draft_steps.__signature__ = inspect.Signature(
    [p for p in inspect.signature(specops.advance_draft_steps).parameters.values() if p.name != "out"]
    + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY) for name in (*FIELDS, "out_slots", "out_slot_pairs")])


def _outputs(num_steps: int, num_input_tokens: int, num_reqs_padded: int, reqs_end: int, split_size: int,
             rot_dim: int, slot_dtypes, pair_dtypes, rope_dtype: torch.dtype = BF16) -> Call:
    """Every output, stale, at the least shape the call needs (reqs_end request rows)."""
    pad, per_rank, entries = pass_extents(num_steps, num_input_tokens, num_reqs_padded, split_size)
    return dict(
        out_positions=stale(num_steps, pad, dtype=I64), out_seq_lens=stale(num_steps, reqs_end),
        out_query_start_loc=stale(num_steps, reqs_end + 1), out_cos_sin=torch.full((num_steps, pad, rot_dim), -7.0, dtype=rope_dtype),
        out_local_cos_sin=torch.full((num_steps, per_rank, rot_dim), -7.0, dtype=rope_dtype),
        out_local_query_start_loc=stale(num_steps, reqs_end + 1), out_local_seq_lens=stale(num_steps, reqs_end),
        out_start_pos=stale(num_steps, reqs_end),
        out_slots=[stale(num_steps, entries, dtype=d) for d in slot_dtypes],
        out_slot_pairs=[stale(num_steps, entries, 2, dtype=d) for d in pair_dtypes])


def rope(rows: int, dim: int = 4, dtype: torch.dtype = BF16) -> torch.Tensor:
    # bfloat16 in the valid call, so that the matrix's float32 is a wrong dtype (exact: small integers).
    return (torch.arange(rows * dim, dtype=F32).view(rows, dim) + 1).to(dtype)


def _valid() -> Call:
    # Three passes, clamp at 14, CP 2 (rank 1) and a token split of 2 (rank 1), request-indexed
    # tables (group 1 not sharded), one int64 and one int32 group.
    return dict(query_start_loc=t32(0, 2, 3), positions=t64(5, 6, 9), seq_lens=t32(7, 10), token_indices=t32(1, 2),
                num_rejected_tokens=t32(0, 0), idx_mapping=t32(2, 0),
                block_tables=[t32(1, 2, 3, 4, 5, 6).view(3, 2), torch.arange(21, 33, dtype=I32).view(3, 4)],
                block_sizes=[8, 4], rope_cos_sin_cache=rope(16), num_steps=3, num_actual_tokens=3,
                num_input_tokens=4, max_model_len=14, target_slot_mappings=[t64(0, 1, 2), t32(3, 4, 5)],
                past_max_model_len="clamp", num_blocks=[t32(2, 2, 2), t32(4, 4, 4)], storage_block_sizes=[16, 4],
                blocks_per_kv_block=[1, 1], cp_sharded=[True, False], slot_mapping_enabled=[True, True],
                cp_world_size=2, cp_rank=1, cp_interleave=1, split_size=2, split_rank=1, num_reqs_padded=3,
                **_outputs(3, 4, 3, 3, 2, 4, (I64, I32), (I64, I32)))


def _metadata() -> list[Bad]:
    return [
        bad("num_steps 0", "num_steps", num_steps=0),
        bad("max_model_len 0", "max_model_len", max_model_len=0),
        # The limit as a device tensor (vLLM 0.34's max_model_len_gpu).
        bad("max_model_len_tensor float", "max_model_len_tensor", max_model_len=None,
            max_model_len_tensor=torch.tensor(14.0)),
        bad("max_model_len_tensor 1-D", "max_model_len_tensor", max_model_len=None, max_model_len_tensor=t32(14)),
        bad("max_model_len and max_model_len_tensor both", "max_model_len_tensor",
            max_model_len_tensor=torch.tensor(14, dtype=I32)),
        bad_with("max_model_len_tensor sharing an output", "max_model_len_tensor",
                 lambda call: call.update(max_model_len=None, max_model_len_tensor=call["out_start_pos"].view(-1)[0])),
        bad("an unknown rule", "past_max_model_len", past_max_model_len="wrap"),
        bad("num_actual_tokens negative", "num_actual_tokens", num_actual_tokens=-1),
        bad("num_input_tokens below num_actual_tokens", "num_input_tokens", num_input_tokens=2),
        bad("num_input_tokens past the outputs", "num_input_tokens", num_input_tokens=5),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=1),
        bad("num_reqs_padded past the slot outputs", "num_reqs_padded", num_reqs_padded=9),
        bad("cp_rank = cp_world_size", "cp_rank", cp_rank=2),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing the block", "cp_interleave", cp_interleave=3),
        bad("split_rank = split_size", "split_rank", split_rank=2),
        bad("split_size 0", "split_size", split_size=0),
        bad("block_sizes[0] 0", "block_sizes[0]", block_sizes=[0, 4]),
        bad("blocks_per_kv_block[1] 0", "blocks_per_kv_block[1]", blocks_per_kv_block=[1, 0]),
        bad("storage_block_sizes[1] 0", "storage_block_sizes[1]", storage_block_sizes=[16, 0]),
        bad("seq_lens shorter than R", "seq_lens", seq_lens=t32(7)),
        bad("query_start_loc shorter than R + 1", "query_start_loc", query_start_loc=t32(0, 2)),
        bad("positions shorter than num_actual_tokens", "positions", positions=t64(5, 6)),
        bad("num_rejected_tokens of another length", "num_rejected_tokens", num_rejected_tokens=t32(0)),
        bad("idx_mapping of another length", "idx_mapping", idx_mapping=t32(2, 0, 1)),
        bad("one target slot mapping for two tables", "target_slot_mappings", target_slot_mappings=[t64(0, 1, 2)]),
        bad("a target slot mapping shorter than num_actual_tokens", "target_slot_mappings[1]",
            target_slot_mappings=[t64(0, 1, 2), t32(3, 4)]),
        bad("one num_blocks for two tables", "num_blocks", num_blocks=[t32(2, 2, 2)]),
        bad("a rope cache without rows", "rope_cos_sin_cache", rope_cos_sin_cache=torch.zeros(0, 4, dtype=BF16)),
        bad_with("out_seq_lens with fewer rows than num_steps", "out_seq_lens",
                 lambda call: call.update(out_seq_lens=stale(2, 3))),
        bad_with("out_cos_sin of another rot_dim", "out_cos_sin",
                 lambda call: call.update(out_cos_sin=torch.zeros(3, 4, 2, dtype=BF16))),
        bad_with("out_local_cos_sin shorter than a split rank's rows", "out_local_cos_sin",
                 lambda call: call.update(out_local_cos_sin=torch.zeros(3, 1, 4, dtype=BF16))),
        bad_with("out_start_pos narrower than out_seq_lens", "out_start_pos",
                 lambda call: call.update(out_start_pos=stale(3, 2))),
        bad_with("out_query_start_loc without its last entry", "out_query_start_loc",
                 lambda call: call.update(out_query_start_loc=stale(3, 3))),
        bad_with("out_slots[1] shorter than the stream", "out_slots[1]",
                 lambda call: call["out_slots"].__setitem__(1, stale(3, 3))),
        bad_with("out_slot_pairs[0] of triples", "out_slot_pairs[0]",
                 lambda call: call["out_slot_pairs"].__setitem__(0, stale(3, 4, 3, dtype=I64))),
        bad_with("out_start_pos sharing out_local_seq_lens", ("out_start_pos", "out_local_seq_lens"),
                 lambda call: call.update(out_start_pos=call["out_local_seq_lens"])),
        bad_with("out_slots[1] sharing a table", ("out_slots[1]", "block_tables[1]"), _share_slots_and_table),
    ]


def _share_slots_and_table(call: Call) -> None:
    """out_slots[1] (int32 [3, 4]) is group 1's table too."""
    shared = torch.arange(21, 33, dtype=I32).view(3, 4)
    call["block_tables"] = [call["block_tables"][0], shared]
    call["out_slots"] = [call["out_slots"][0], shared]


def _values() -> list[Bad]:
    return [
        bad("a negative position", "positions", positions=t64(5, -6, 9)),
        bad("max_model_len_tensor 0", "max_model_len_tensor", max_model_len=None,
            max_model_len_tensor=torch.tensor(0, dtype=I32)),
        bad("a position past the RoPE cache", "rope_cos_sin_cache", positions=t64(5, 6, 9),
            rope_cos_sin_cache=rope(9)),
        bad("token_indices outside positions", "token_indices", token_indices=t32(1, 3)),
        bad("more rejected tokens than seq_lens", "num_rejected_tokens", num_rejected_tokens=t32(8, 0)),
        bad("a decreasing query_start_loc", "query_start_loc", query_start_loc=t32(0, 3, 2)),
        bad("a position past the allocated blocks", "num_blocks[1]", num_blocks=[t32(2, 2, 2), t32(4, 4, 2)]),
        bad("idx_mapping past a table", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(3, 0)),
    ]


@st.composite
def _draw(draw) -> Call:
    generator = _seed(draw)
    num_groups, num_reqs = draw(st.integers(0, 4)), draw(st.integers(0, 5))
    limit, world = draw(st.integers(4, 30)), draw(st.sampled_from([1, 2]))
    num_steps, split = draw(st.sampled_from([1, 2, 3, 5])), draw(st.sampled_from([1, 2, 4]))
    query_lens = [draw(st.integers(1, 3)) for _ in range(num_reqs)]
    seq_lens = [draw(st.integers(q, limit)) for q in query_lens]
    starts = [0]
    for q in query_lens:
        starts.append(starts[-1] + q)
    num_tokens = starts[-1]
    positions = [s - q + j for q, s in zip(query_lens, seq_lens) for j in range(q)]
    rejected = [draw(st.integers(0, q - 1)) for q in query_lens]
    token_indices = [starts[r + 1] - 1 - rejected[r] for r in range(num_reqs)]
    block_sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)]
    rows = num_reqs + 2
    cols = [-(-(limit + 2) // bs) + 1 for bs in block_sizes]  # wide enough for a group not CP-sharded
    idx = torch.randperm(rows, generator=generator)[:num_reqs].to(draw(st.sampled_from([I32, I64]))) \
        if draw(st.booleans()) else None
    num_input_tokens, padded = num_tokens + draw(st.integers(0, 2)), num_reqs + draw(st.integers(0, 2))
    slot_dtypes = [draw(st.sampled_from([I64, I32])) for _ in range(num_groups)]
    pair_dtypes = [draw(st.sampled_from([I64, I32])) for _ in range(num_groups)]
    call = dict(
        query_start_loc=t32(*starts), positions=torch.tensor(positions, dtype=draw(st.sampled_from([I64, I32]))),
        seq_lens=t32(*seq_lens), token_indices=t32(*token_indices), num_rejected_tokens=t32(*rejected),
        idx_mapping=idx, block_tables=[torch.randint(0, 5000, (rows, c), generator=generator, dtype=I32)
                                       for c in cols],
        block_sizes=block_sizes,
        rope_cos_sin_cache=rope(limit + 2, draw(st.sampled_from([2, 4])), draw(st.sampled_from([BF16, F32]))),
        num_steps=num_steps, num_actual_tokens=num_tokens, num_input_tokens=num_input_tokens, **_limit(draw, limit),
        target_slot_mappings=[torch.randint(-1, 5000, (num_tokens,), generator=generator).to(d) for d in slot_dtypes],
        past_max_model_len=draw(st.sampled_from(["reset", "clamp"])),
        num_blocks=[torch.full((rows,), c, dtype=I32) for c in cols] if draw(st.booleans()) else None,
        storage_block_sizes=[draw(st.sampled_from([2, 4, 16])) for _ in range(num_groups)], blocks_per_kv_block=1,
        cp_sharded=[draw(st.booleans()) for _ in range(num_groups)],
        slot_mapping_enabled=[draw(st.booleans()) for _ in range(num_groups)], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=1, split_size=split, split_rank=_pick(draw, split),
        num_reqs_padded=padded)
    rot_dim = call["rope_cos_sin_cache"].size(1)
    call.update(_outputs(num_steps, num_input_tokens, padded, padded + draw(st.integers(0, 1)), split, rot_dim,
                         slot_dtypes, pair_dtypes, call["rope_cos_sin_cache"].dtype))
    return call


def _position_past_tables(draw, call: Call) -> bool:
    """A request far past every table and the RoPE cache: the native op rejects it, the device
    paths write no slot and a zero RoPE row for it."""
    num_reqs = call["token_indices"].numel()
    if num_reqs == 0:
        return False
    r = _pick(draw, num_reqs)
    call["positions"][int(call["token_indices"][r])] = 2**26 + call["cp_rank"] - 1
    set_limit(call, 2**27)
    return True


def _negative_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _token_index_outside(draw, call: Call) -> bool:
    if call["token_indices"].numel() == 0:
        return False
    call["token_indices"][_pick(draw, call["token_indices"].numel())] = draw(st.sampled_from([-1, 99]))
    return True


ADVANCE_DRAFT_STEPS = OpSpec(
    name="advance_draft_steps",
    guard_examples=SLOW_KERNEL_GUARD_EXAMPLES,
    wrapper=advance_draft_steps,
    tensors={"query_start_loc": Arg((I32,), 1), "positions": Arg((I64, I32), 1), "seq_lens": Arg((I32,), 1),
             "token_indices": Arg((I32, I64), 1), "num_rejected_tokens": Arg((I32,), 1),
             "idx_mapping": Arg((I32, I64), 1),
             "block_tables[0]": Arg((I32,), 2, row_stride=True), "block_tables[1]": Arg((I32,), 2, row_stride=True),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1),
             "target_slot_mappings[0]": Arg((I64, I32), 1), "target_slot_mappings[1]": Arg((I64, I32), 1),
             "rope_cos_sin_cache": Arg((BF16, F32, torch.float16), 2),
             "out_positions": Arg((I64,), 2), "out_seq_lens": Arg((I32,), 2), "out_query_start_loc": Arg((I32,), 2),
             "out_cos_sin": Arg((BF16, F32, torch.float16), 3),
             "out_local_cos_sin": Arg((BF16, F32, torch.float16), 3),
             "out_local_query_start_loc": Arg((I32,), 2), "out_local_seq_lens": Arg((I32,), 2),
             "out_start_pos": Arg((I32,), 2),
             "out_slots[0]": Arg((I64, I32), 2), "out_slots[1]": Arg((I64, I32), 2),
             "out_slot_pairs[0]": Arg((I64, I32), 3), "out_slot_pairs[1]": Arg((I64, I32), 3),
             "max_model_len_tensor": Arg((I32, I64), 0)},
    outputs=(*FIELDS, "out_slots[0]", "out_slots[1]", "out_slot_pairs[0]", "out_slot_pairs[1]"),
    valid_call=_valid,
    metadata_errors=_metadata,
    value_errors=_values,
    draw_call=_draw(),
    corruptions=(
        Corruption("a position past every table", _position_past_tables),
        Corruption("negative block ids", _negative_ids),
        Corruption("a token index outside positions", _token_index_outside),
    ),
    scalars=("num_steps", "num_actual_tokens", "num_input_tokens", "max_model_len", "cp_world_size", "cp_rank",
             "cp_interleave", "split_size", "split_rank", "num_reqs_padded", "block_sizes", "blocks_per_kv_block",
             "storage_block_sizes"),
    offsets=("query_start_loc",),
    exclusive=("max_model_len_tensor",),
)
