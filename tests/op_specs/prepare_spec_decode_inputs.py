"""The OpSpec of torch.ops.specops.prepare_spec_decode_inputs (one line of OP_TABLE in tests/op_table.py)."""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from strategies import make_spec_decode_step

import specops

from ._corruptions import _seed, _pick, _with_idx_mapping, _negative_block_ids
from ._spec import I32, I64, Call, Arg, Bad, Corruption, OpSpec, PAST_INT32, bad, bad_with, t32, stale
from .correct_num_computed_tokens import CORRECTION_TENSORS, CORRECTION_INPUTS
from .prepare_positions_and_seq_lens import _positions_tokens_past_padding


def _fused_valid() -> Call:
    # Row 0 continues row 1 (20 + 2 = 22), row 1 is new (host 6): positions 22, 23, 6.
    return dict(num_computed_tokens=t32(10, 20, 30), num_accepted_tokens=t32(0, 0, 0), prev_positions=t32(1, 0),
                valid_sampled_token_count=t32(1, 2), prev_num_draft_tokens=t32(1, 1),
                cpu_num_computed_tokens=t32(5, 6), query_start_loc=t32(0, 2, 3),
                block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32),
                              torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]], dtype=I32)],
                block_sizes=[16, 8], positions=stale(4, dtype=I64), seq_lens=stale(3),
                slot_mappings=[stale(4, dtype=I64), stale(4, dtype=I32)], blocks_per_kv_block=[1, 1],
                cp_sharded=[True, False], cp_world_size=1, cp_rank=0, cp_interleave=1, idx_mapping=t32(1, 0),
                num_tokens_padded=4, num_reqs_padded=3, num_blocks=[t32(2, 2), t32(4, 4)], num_gathered_rows=3,
                sliding_window_reach=0, num_new_sampled_tokens=1, num_logits_padded=0)


def _fused_metadata() -> list[Bad]:
    shared = torch.zeros(8, dtype=I64)
    return [
        bad("num_accepted_tokens shorter than n", ("num_accepted_tokens", "prev_positions"),
            num_accepted_tokens=t32(0)),
        bad("cpu_num_computed_tokens shorter than n", ("cpu_num_computed_tokens", "prev_positions"),
            cpu_num_computed_tokens=t32(5)),
        bad("num_computed_tokens shorter than R", ("num_computed_tokens", "query_start_loc"),
            num_computed_tokens=t32(10), prev_positions=t32(0), cpu_num_computed_tokens=t32(5),
            num_accepted_tokens=t32(0)),
        bad("num_tokens_padded past positions", ("num_tokens_padded", "positions"), num_tokens_padded=5),
        bad("num_tokens_padded -1", "num_tokens_padded", num_tokens_padded=-1),
        bad("num_reqs_padded past seq_lens", ("num_reqs_padded", "seq_lens"), num_reqs_padded=4),
        bad("num_reqs_padded < R", "num_reqs_padded", num_reqs_padded=1),
        bad("a slot mapping shorter than num_tokens_padded", ("num_tokens_padded", "slot_mappings[1]"),
            slot_mappings=[stale(4, dtype=I64), stale(3, dtype=I64)]),
        bad("one slot mapping for two tables", ("slot_mappings", "block_tables"), slot_mappings=[stale(4, dtype=I64)]),
        bad("num_blocks for one table of two", ("num_blocks", "block_tables"), num_blocks=[t32(2, 2)]),
        bad("num_blocks[1] shorter than its table", ("num_blocks[1]", "block_tables[1]"),
            num_blocks=[t32(2, 2), t32(4)]),
        bad("block_sizes[1] 0", "block_sizes[1]", block_sizes=[16, 0]),
        bad("three block sizes for two tables", ("block_sizes", "block_tables"), block_sizes=[16, 8, 4]),
        bad("blocks_per_kv_block[0] 0", "blocks_per_kv_block[0]", blocks_per_kv_block=[0, 1]),
        bad("one cp_sharded for two tables", ("cp_sharded", "block_tables"), cp_sharded=[True]),
        bad("one slot_mapping_enabled for two tables", ("slot_mapping_enabled", "block_tables"),
            slot_mapping_enabled=[True]),
        bad("cp_world_size 0", "cp_world_size", cp_world_size=0),
        bad("cp_rank = cp_world_size", ("cp_rank", "cp_world_size"), cp_world_size=2, cp_rank=2),
        bad("cp_interleave 0", "cp_interleave", cp_interleave=0),
        bad("cp_interleave not dividing block_sizes[0]", ("cp_interleave", "block_sizes[0]"), cp_world_size=2,
            cp_interleave=3),
        bad("a virtual block past int32", ("block_sizes[0]", "cp_world_size"), block_sizes=[2**30, 8],
            cp_world_size=2),
        # Fewer rows than query_start_loc has requests is the peer's padded query_start_loc
        # (R = idx_mapping.numel(), docs/persistent_buffers.md); more rows than it has requests is an error.
        bad("idx_mapping longer than query_start_loc's R", ("idx_mapping", "query_start_loc"), idx_mapping=t32(1, 0, 0)),
        bad("slot mappings sharing memory", ("slot_mappings[1]", "slot_mappings[0]"),
            slot_mappings=[shared[:4], shared[2:6]]),
        bad_with("a slot mapping sharing positions", ("slot_mappings[0]", "positions"),
                 lambda call: call.update(slot_mappings=[call["positions"], stale(4, dtype=I64)])),
    ]


def _request_indexed(call: Call) -> Call:
    """The valid call in the request-indexed mode with both groups gathered: its counts by row
    (row 1 of request 0 holds 20 as before), nothing to correct, a window on group 0."""
    empty = t32()
    call.update(num_accepted_tokens=empty.clone(), prev_positions=empty.clone(),
                valid_sampled_token_count=empty.clone(), prev_num_draft_tokens=empty.clone(),
                cpu_num_computed_tokens=empty.clone(),
                request_indexed_counts=True, gathered_block_tables=[stale(3, 2), stale(3, 4)], num_gathered_rows=3,
                sliding_window_reach=[8, 0])
    return call


def _in_mode(label: str, names: str | tuple[str, ...], **replace) -> Bad:
    """A Bad of the request-indexed mode: the valid call switched to it, then `replace`."""
    return bad_with(label, names, lambda call: _request_indexed(call).update(replace))


def _mode_metadata() -> list[Bad]:
    shared = torch.zeros(8, dtype=I64)
    return [
        _in_mode("gathered_block_tables[0] int64", "gathered_block_tables[0]",
                 gathered_block_tables=[stale(3, 2, dtype=I64), stale(3, 4)]),
        _in_mode("gathered_block_tables[1] 1-D", "gathered_block_tables[1]",
                 gathered_block_tables=[stale(3, 2), stale(3)]),
        _in_mode("one gathered table for two tables", ("gathered_block_tables", "block_tables"),
                 gathered_block_tables=[stale(3, 2)]),
        _in_mode("a gather of batch-indexed counts", ("gathered_block_tables", "request_indexed_counts"),
                 request_indexed_counts=False),
        _in_mode("request-indexed counts with a correction", ("prev_positions", "request_indexed_counts"),
                 num_accepted_tokens=t32(0, 0), prev_positions=t32(1, 0), valid_sampled_token_count=t32(1, 2),
                 prev_num_draft_tokens=t32(1, 1), cpu_num_computed_tokens=t32(5, 6)),
        _in_mode("request-indexed counts without idx_mapping", ("idx_mapping", "request_indexed_counts"),
                 idx_mapping=None),
        _in_mode("num_gathered_rows past gathered_block_tables[0]", ("num_gathered_rows", "gathered_block_tables[0]"),
                 num_gathered_rows=4),
        _in_mode("num_gathered_rows < R", "num_gathered_rows", num_gathered_rows=1),
        _in_mode("three sliding_window_reach for two tables", ("sliding_window_reach", "block_tables"),
                 sliding_window_reach=[8, 0, 0]),
        _in_mode("sliding_window_reach[0] negative", "sliding_window_reach[0]", sliding_window_reach=[-1, 0]),
        _in_mode("a window on two blocks per kv block", ("blocks_per_kv_block[0]", "sliding_window_reach[0]"),
                 blocks_per_kv_block=[2, 1], block_tables=[torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=I32),
                                                            torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]], dtype=I32)]),
        _in_mode("a gather without num_blocks", ("num_blocks", "gathered_block_tables"), num_blocks=None),
        _in_mode("gathered tables sharing memory", ("gathered_block_tables[1]", "gathered_block_tables[0]"),
                 gathered_block_tables=[shared.view(I32)[:6].view(3, 2), shared.view(I32)[4:16].view(3, 4)]),
    ]


# The parts a request-indexed call may add (the step's input ids, the DCP-local seq_lens).
PART_TENSORS = {"input_ids": Arg((I32,), 1), "prefill_len": Arg((I32,), 1),
                "last_sampled_tokens": Arg((I32, I64), 1, other_dims=(2,)),
                "draft_tokens": Arg((I32, I64), 2, row_stride=True), "cu_num_logits": Arg((I32,), 1),
                "all_token_ids": Arg((I32,), 2, row_stride=True), "next_prefill_tokens": Arg((I32,), 2, row_stride=True),
                "logits_indices": Arg((I64,), 1), "expanded_idx_mapping": Arg((I32,), 1),
                "expanded_local_pos": Arg((I32,), 1), "dcp_local_seq_lens": Arg((I32,), 1)}


def _with_parts(call: Call) -> Call:
    """The valid call in the request-indexed mode with both parts: request 0 (row 1, count 20)
    decodes with one draft, request 1 (row 0, count 10) with none; rows' prompts of 8 tokens."""
    _request_indexed(call)
    call.update(input_ids=stale(4), prefill_len=t32(8, 8, 8), last_sampled_tokens=torch.tensor([100, 101, 102]),
                draft_tokens=torch.tensor([[0], [201], [0]]), cu_num_logits=t32(0, 2, 3),
                all_token_ids=torch.arange(3 * 32, dtype=I32).view(3, 32), next_prefill_tokens=stale(1, 3),
                logits_indices=stale(3, dtype=I64), expanded_idx_mapping=stale(3), expanded_local_pos=stale(3),
                dcp_local_seq_lens=stale(3), num_logits_padded=None)
    return call


def _in_parts(label: str, names: str | tuple[str, ...], **replace) -> Bad:
    return bad_with(label, names, lambda call: _with_parts(call).update(replace))


def _parts_metadata() -> list[Bad]:
    shared = torch.zeros(16, dtype=I64)
    return [
        _in_parts("input_ids int64", "input_ids", input_ids=stale(4, dtype=I64)),
        _in_parts("prefill_len 2-D", "prefill_len", prefill_len=t32(8, 8, 8).view(3, 1)),
        _in_parts("last_sampled_tokens [M, 2]", "last_sampled_tokens", last_sampled_tokens=torch.zeros(3, 2, dtype=I64)),
        _in_parts("draft_tokens 1-D", "draft_tokens", draft_tokens=torch.zeros(3, dtype=I64)),
        _in_parts("cu_num_logits of R entries", "cu_num_logits", cu_num_logits=t32(0, 2)),
        _in_parts("num_new_sampled_tokens 2", "num_new_sampled_tokens", num_new_sampled_tokens=2),
        _in_parts("all_token_ids without next_prefill_tokens", ("all_token_ids", "next_prefill_tokens"),
                  next_prefill_tokens=None),
        _in_parts("next_prefill_tokens int64", "next_prefill_tokens", next_prefill_tokens=stale(1, 3, dtype=I64)),
        _in_parts("logits_indices int32", "logits_indices", logits_indices=stale(3)),
        _in_parts("expanded_idx_mapping of another dtype than idx_mapping", "expanded_idx_mapping",
                  expanded_idx_mapping=stale(3, dtype=I64)),
        _in_parts("expanded_local_pos int64", "expanded_local_pos", expanded_local_pos=stale(3, dtype=I64)),
        _in_parts("num_logits_padded past logits_indices", ("num_logits_padded", "logits_indices"),
                  num_logits_padded=4),
        _in_parts("dcp_local_seq_lens int64", "dcp_local_seq_lens", dcp_local_seq_lens=stale(3, dtype=I64)),
        _in_parts("dcp_local_seq_lens shorter than R", "dcp_local_seq_lens", dcp_local_seq_lens=stale(1)),
        _in_parts("input ids of batch-indexed counts", ("input_ids", "request_indexed_counts"),
                  request_indexed_counts=False, gathered_block_tables=None),
        _in_parts("a part of the input ids without input_ids", ("prefill_len", "input_ids"), input_ids=None),
        _in_parts("input ids without cu_num_logits", ("cu_num_logits", "input_ids"), cu_num_logits=None),
        bad_with("logits_indices sharing positions", ("logits_indices", "positions"),
                 lambda call: _with_parts(call).update(positions=shared[:4], logits_indices=shared[2:5])),
        bad_with("input_ids sharing a block table", ("input_ids", "block_tables[1]"),
                 lambda call: _with_parts(call).update(input_ids=call["block_tables"][1].view(-1)[:4])),
        bad_with("dcp_local_seq_lens sharing seq_lens", ("dcp_local_seq_lens", "seq_lens"),
                 lambda call: _with_parts(call).update(dcp_local_seq_lens=call["seq_lens"])),
    ]


def _parts_values() -> list[Bad]:
    return [
        _in_parts("more logits than the query", "cu_num_logits", cu_num_logits=t32(0, 3, 4)),
        _in_parts("more drafts than draft_tokens has columns", ("cu_num_logits", "draft_tokens"),
                  draft_tokens=torch.zeros(3, 0, dtype=I64)),
        _in_parts("a prompt read past all_token_ids", "all_token_ids", prefill_len=t32(30, 40, 8)),
    ]


def _fused_values() -> list[Bad]:
    return [
        bad("positions past block_tables[1]", "block_tables[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32), torch.tensor([[5], [9]], dtype=I32)]),
        bad("idx_mapping past the tables", ("idx_mapping", "block_tables[0]"), idx_mapping=t32(2, 0)),
        # Request 0 reads row 1, which holds one block of 16: position 22 needs a second.
        bad("positions past a row's allocated blocks", ("positions", "num_blocks[0]"),
            num_blocks=[t32(2, 1), t32(4, 4)]),
        bad("query_start_loc decreasing", "query_start_loc", query_start_loc=t32(0, 3, 2)),
        bad("query_start_loc[0] != 0", "query_start_loc", query_start_loc=t32(1, 2, 3)),
        bad("query_start_loc[R] past num_tokens_padded", ("num_tokens_padded", "query_start_loc"),
            query_start_loc=t32(0, 2, 5)),
        # Request 0 reads row 1; positions 22, 23 in blocks of 8: column 2, id 2^29, slot 2^32 + 6.
        bad("a slot past an int32 slot mapping", "slot_mappings[1]",
            block_tables=[torch.tensor([[1, 2], [3, 4]], dtype=I32),
                          torch.tensor([[5, 6, 7, 8], [9, 10, 2**29, 12]], dtype=I32)]),
    ]


FUSED_GROUPS = [(16, 1, True), (4, 2, False), (8, 1, True)]


@st.composite
def _fused_draw(draw) -> Call:
    world = draw(st.sampled_from([1, 2]))
    groups = draw(st.lists(st.sampled_from(FUSED_GROUPS), max_size=2))
    step = make_spec_decode_step(_seed(draw), num_reqs=draw(st.integers(0, 5)), num_prev_rows=draw(st.integers(0, 6)),
                                 max_query_len=3, groups=groups, cp_world_size=world,
                                 with_idx_mapping=draw(st.booleans()), prev_dtype=draw(st.sampled_from([I32, I64])),
                                 valid_dtype=draw(st.sampled_from([I32, I64])),
                                 host_dtype=draw(st.sampled_from([I32, I64])))
    tokens_padded = step.num_tokens + draw(st.integers(0, 3))
    reqs_padded = step.num_reqs + draw(st.integers(0, 2))
    return dict(
        zip(CORRECTION_TENSORS, step.correction.args()), query_start_loc=step.query_start_loc,
        block_tables=step.block_tables, block_sizes=step.block_sizes,
        positions=stale(tokens_padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32]))),
        seq_lens=stale(reqs_padded + draw(st.integers(0, 1))),
        slot_mappings=[stale(tokens_padded + draw(st.integers(0, 1)), dtype=draw(st.sampled_from([I64, I32])))
                       for _ in groups],
        blocks_per_kv_block=step.blocks_per_kv_block, cp_sharded=step.cp_sharded,
        slot_mapping_enabled=[draw(st.booleans()) for _ in groups], cp_world_size=world,
        cp_rank=_pick(draw, world), cp_interleave=draw(st.sampled_from([1, 2, 4])), idx_mapping=step.idx_mapping,
        num_tokens_padded=tokens_padded, num_reqs_padded=reqs_padded)


def _fused_request_past_tables(draw, call: Call) -> bool:
    """A request that takes a host count far past every table, its first token stored on this
    rank in every group (2^26 is a multiple of every virtual block here)."""
    qsl = call["query_start_loc"]
    with_tokens = (qsl[1:] > qsl[:-1]).nonzero().flatten().tolist()
    if not with_tokens or not call["block_tables"]:
        return False
    request = draw(st.sampled_from(with_tokens))
    call["prev_positions"][request] = -1
    call["cpu_num_computed_tokens"][request] = 2**26 + call["cp_rank"] * call["cp_interleave"]
    if call["idx_mapping"] is not None and call["idx_mapping"][request] < 0:
        call["idx_mapping"][request] = 0
    return any(call["slot_mapping_enabled"])  # a group without a slot mapping never reads its table


def _fused_idx_past_tables(draw, call: Call) -> bool:
    num_reqs = call["query_start_loc"].numel() - 1
    if num_reqs == 0 or not call["block_tables"]:
        return False
    rows = min(table.size(0) for table in call["block_tables"])
    _with_idx_mapping(call, num_reqs)[_pick(draw, num_reqs)] = rows + draw(st.integers(0, 5))
    return any(call["slot_mapping_enabled"])


def _fused_negative_block_ids(draw, call: Call) -> bool:
    for g in range(len(call["block_tables"])):
        _negative_block_ids(draw, call["block_tables"], g)
    return False


def _request_indexed_call(seed: int, num_groups: int, world: int, gather: bool) -> Call:
    """A valid call of the request-indexed mode (model runner V2's counts, no correction), with
    every group's gather when `gather`: shuffled rows, -1 rows, windows, padded outputs."""
    rng = torch.Generator().manual_seed(seed)
    rows, cols, num_reqs = 6, 4, 4
    idx = torch.randperm(rows, generator=rng)[:num_reqs]
    idx[1] = -1
    query_lens = torch.randint(0, 4, (num_reqs,), generator=rng)
    qsl = torch.cat([torch.zeros(1, dtype=I64), query_lens.cumsum(0)]).to(I32)
    tokens_padded, reqs_padded = int(qsl[-1]) + 2, num_reqs + 1
    groups = [FUSED_GROUPS[g % len(FUSED_GROUPS)] for g in range(num_groups)]
    block_sizes = [size for size, _, _ in groups]
    per_kv = [blocks for _, blocks, _ in groups]
    # Positions that every row's table holds whole on every rank.
    most = min((size * cols) // max(blocks, 1) for size, blocks, _ in groups) if groups else 16
    dtype_of = (lambda g: I64 if (seed + g) % 2 else I32)
    return dict(
        num_computed_tokens=torch.randint(0, max(most - 4, 1), (rows,), generator=rng, dtype=I32),
        num_accepted_tokens=t32(), prev_positions=t32(), valid_sampled_token_count=t32(),
        prev_num_draft_tokens=t32(), cpu_num_computed_tokens=t32(), query_start_loc=qsl,
        block_tables=[torch.randint(1, 1000, (rows, cols), generator=rng, dtype=I32) for _ in groups],
        block_sizes=block_sizes, positions=stale(tokens_padded, dtype=dtype_of(0)), seq_lens=stale(reqs_padded + 1),
        slot_mappings=[stale(tokens_padded, dtype=dtype_of(g + 1)) for g in range(num_groups)],
        blocks_per_kv_block=per_kv, cp_sharded=[sharded for _, _, sharded in groups], cp_world_size=world,
        cp_rank=world - 1, cp_interleave=2 if world > 1 else 1,
        slot_mapping_enabled=[g != 1 for g in range(num_groups)],
        idx_mapping=idx.to(dtype_of(7)), num_tokens_padded=tokens_padded, num_reqs_padded=reqs_padded,
        num_blocks=[torch.full((rows,), cols, dtype=I32) for _ in groups], request_indexed_counts=True,
        gathered_block_tables=[stale(reqs_padded + 1, cols + g % 2) for g in range(num_groups)] if gather else None,
        num_gathered_rows=reqs_padded + 1 if gather else None,
        sliding_window_reach=[9 if per_kv[g] == 1 and g % 2 == 0 else 0 for g in range(num_groups)])


def _step_parts(call: Call, seed: int, dcp: bool) -> Call:
    """The request-indexed call with the step's input ids (each request decoding with a draft per
    token past its first, or prefilling a prompt of 12 past its count) and, when `dcp`, the
    DCP-local seq_lens."""
    rng = torch.Generator().manual_seed(seed)
    rows = call["num_computed_tokens"].numel()
    qsl, idx = call["query_start_loc"].tolist(), call["idx_mapping"]
    counts = call["num_computed_tokens"]
    prefill = counts.clone()
    cu = [0]
    for r in range(idx.numel()):
        query = qsl[r + 1] - qsl[r]
        if int(idx[r]) >= 0 and r % 2:
            prefill[int(idx[r])] = counts[int(idx[r])] + 12
        cu.append(cu[-1] + min(query, 3))
    num_logits = cu[-1]
    call.update(input_ids=stale(qsl[-1] + 1), prefill_len=prefill,
                last_sampled_tokens=torch.randint(0, 500, (rows,), generator=rng),
                draft_tokens=torch.randint(500, 900, (rows, 2), generator=rng), cu_num_logits=torch.tensor(cu, dtype=I32),
                all_token_ids=torch.randint(0, 500, (rows, int(prefill.max()) + 4 if rows else 4), generator=rng,
                                            dtype=I32),
                next_prefill_tokens=stale(2, rows), logits_indices=stale(num_logits + 1, dtype=I64),
                expanded_idx_mapping=stale(num_logits + 1, dtype=call["idx_mapping"].dtype),
                expanded_local_pos=stale(num_logits + 1), dcp_local_seq_lens=stale(idx.numel() + 2) if dcp else None)
    return call


def _fused_mode_calls() -> list[tuple[str, Call]]:
    calls = [(f"request-indexed seed {seed} G={groups} W={world}{' gather' if gather else ''}",
              _request_indexed_call(seed, groups, world, gather))
             for seed, groups, world, gather in ((1, 2, 1, True), (2, 3, 2, True), (3, 5, 1, True), (4, 1, 2, False),
                                                 (5, 0, 1, False))]
    # The target step of model runner V2 in one launch: the input ids and (DCP > 1) the DCP-local seq_lens.
    return calls + [(f"request-indexed seed {seed} G={groups} W={world} gather input ids{' dcp' if world > 1 else ''}",
                     _step_parts(_request_indexed_call(seed, groups, world, True), seed, world > 1))
                    for seed, groups, world in ((6, 3, 1), (7, 3, 2))]


FUSED = OpSpec(
    name="prepare_spec_decode_inputs",
    wrapper=specops.prepare_spec_decode_inputs,
    tensors={**CORRECTION_TENSORS, "query_start_loc": Arg((I32,), 1), "positions": Arg((I64, I32), 1),
             "seq_lens": Arg((I32,), 1), "block_tables[0]": Arg((I32,), 2, row_stride=True),
             "block_tables[1]": Arg((I32,), 2, row_stride=True), "slot_mappings[0]": Arg((I64, I32), 1),
             "slot_mappings[1]": Arg((I64, I32), 1), "idx_mapping": Arg((I32, I64), 1),
             "num_blocks[0]": Arg((I32,), 1), "num_blocks[1]": Arg((I32,), 1),
             "gathered_block_tables[0]": Arg((I32,), 2, row_stride=True),
             "gathered_block_tables[1]": Arg((I32,), 2, row_stride=True), **PART_TENSORS},
    outputs=("num_computed_tokens", "num_accepted_tokens", "positions", "seq_lens", "slot_mappings[0]",
             "slot_mappings[1]"),
    valid_call=_fused_valid,
    metadata_errors=lambda: _fused_metadata() + _mode_metadata() + _parts_metadata(),
    value_errors=lambda: _fused_values() + _parts_values(),
    offsets=("query_start_loc",),
    draw_call=_fused_draw(),
    reads_first=CORRECTION_INPUTS,  # gathered before the first store; the rest is read while storing
    corruptions=(
        Corruption("a request past every table", _fused_request_past_tables),
        Corruption("idx_mapping past the tables", _fused_idx_past_tables),
        Corruption("negative block ids", _fused_negative_block_ids),
        Corruption("query_start_loc[R] past num_tokens_padded", _positions_tokens_past_padding),
    ),
    scalars=("num_tokens_padded", "num_reqs_padded", "cp_world_size", "cp_rank", "cp_interleave", "block_sizes",
             "blocks_per_kv_block", "num_gathered_rows", "sliding_window_reach", "num_new_sampled_tokens",
             "num_logits_padded"),
    # The request-indexed mode's outputs and its parts: their calls are mode_calls and
    # _mode_metadata's and _parts_metadata's.
    exclusive=("gathered_block_tables[0]", "gathered_block_tables[1]", *PART_TENSORS),
    mode_calls=_fused_mode_calls,
    allocation_sizes={"num_tokens_padded": PAST_INT32},
)
