"""prepare_spec_decode_inputs: rejected calls write nothing, bad input names the argument,
outputs sharing memory, a slot past an int32 slot mapping and a negative token count. The
shared parts are in spec_decode_cases.py."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import BACKENDS
from spec_decode_cases import (
    PAD,
    assert_same_step,
    clone_outputs,
    clone_step,
    fresh_outputs,
    i32,
    run_fused,
)
from strategies import assert_same, make_spec_decode_step

import specops


def _rejected_call():
    step = make_spec_decode_step(torch.Generator().manual_seed(8), num_reqs=4, num_prev_rows=4, max_query_len=3,
                                 groups=[(16, 1, True), (8, 1, True)], with_idx_mapping=True)
    return step, fresh_outputs(step, step.num_tokens + 1, 5)


def test_native_rejects_positions_beyond_a_table_and_writes_nothing():
    step, outputs = _rejected_call()
    step.block_tables[1] = step.block_tables[1][:, :2]  # too short for the corrected positions
    before_step, before = clone_step(step), clone_outputs(outputs)
    with pytest.raises(ValueError, match=r"beyond block_tables\[1\]"):
        run_fused(step, outputs)
    assert_same_step(step, outputs, before_step, before, "rejected")


def test_native_rejects_an_idx_mapping_past_a_table_and_writes_nothing():
    step, outputs = _rejected_call()
    step.idx_mapping[0] = step.block_tables[0].size(0)
    before_step, before = clone_step(step), clone_outputs(outputs)
    with pytest.raises(ValueError, match=r"idx_mapping\[0\] = \d+ is past block_tables\[0\]"):
        run_fused(step, outputs)
    assert_same_step(step, outputs, before_step, before, "rejected")


def _valid_call():
    return dict(num_computed_tokens=i32([10, 20, 30]), num_accepted_tokens=i32([0, 0, 0]), prev_positions=i32([1, 0]),
                valid_sampled_token_count=i32([1, 2]), prev_num_draft_tokens=i32([1, 1]),
                cpu_num_computed_tokens=i32([5, 6]), query_start_loc=i32([0, 2, 3]),
                block_tables=[i32([[1, 2], [3, 4]]), i32([[5, 6, 7, 8], [9, 10, 11, 12]])], block_sizes=[16, 8],
                positions=torch.full((4,), 55, dtype=torch.int64), seq_lens=torch.full((3,), 55, dtype=torch.int32),
                slot_mappings=[torch.full((4,), 55, dtype=torch.int64), torch.full((4,), 55, dtype=torch.int32)],
                blocks_per_kv_block=[1, 1], cp_sharded=[True, False], cp_world_size=1, cp_rank=0, cp_interleave=1,
                idx_mapping=None, num_tokens_padded=4, num_reqs_padded=3)


BAD_INPUTS = [
    ("num_computed_tokens", dict(num_computed_tokens=torch.tensor([10, 20, 30]))),
    ("num_accepted_tokens", dict(num_accepted_tokens=i32([0]))),
    ("prev_positions", dict(prev_positions=torch.tensor([1.0, 0.0]))),
    ("valid_sampled_token_count", dict(valid_sampled_token_count=torch.tensor([1, 2], dtype=torch.int16))),
    ("prev_num_draft_tokens", dict(prev_num_draft_tokens=i32([[1, 1]]))),
    ("cpu_num_computed_tokens", dict(cpu_num_computed_tokens=i32([5]))),
    ("query_start_loc", dict(query_start_loc=torch.tensor([0, 2, 3]))),
    ("positions", dict(positions=torch.zeros(4))),
    ("seq_lens", dict(seq_lens=torch.zeros(3, dtype=torch.int64))),
    ("num_tokens_padded", dict(num_tokens_padded=5)),
    ("num_reqs_padded", dict(num_reqs_padded=4)),
    (r"block_tables\[1\]", dict(block_tables=[i32([[1, 2], [3, 4]]), torch.zeros(2, 4, dtype=torch.int64)])),
    (r"slot_mappings\[0\]", dict(slot_mappings=[torch.zeros(4), torch.zeros(4, dtype=torch.int32)])),
    (r"slot_mappings\[1\]", dict(slot_mappings=[torch.zeros(4, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)])),
    ("slot_mappings", dict(slot_mappings=[torch.zeros(4, dtype=torch.int64)])),
    (r"block_sizes\[1\]", dict(block_sizes=[16, 0])),
    ("block_sizes", dict(block_sizes=[16, 8, 4])),
    (r"blocks_per_kv_block\[0\]", dict(blocks_per_kv_block=[0, 1])),
    ("cp_sharded", dict(cp_sharded=[True])),
    ("cp_world_size", dict(cp_world_size=0)),
    ("cp_rank", dict(cp_world_size=2, cp_rank=2)),
    ("cp_interleave", dict(cp_world_size=2, cp_interleave=3)),
    ("idx_mapping", dict(idx_mapping=i32([0, 1, 0]))),  # more rows than query_start_loc has requests
    ("idx_mapping", dict(idx_mapping=torch.tensor([0.0, 1.0]))),
]


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{a}-{i}" for i, (a, _) in enumerate(BAD_INPUTS)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _valid_call()
    call.update(change)
    written = [call["num_computed_tokens"], call["num_accepted_tokens"], call["positions"], call["seq_lens"],
               *call["slot_mappings"]]
    before = [t.clone() for t in written]
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.prepare_spec_decode_inputs(**call)
    assert all(torch.equal(t, b) for t, b in zip(written, before))


def test_outputs_sharing_memory_are_rejected(backend):
    call = _valid_call()
    buffer = torch.zeros(8, dtype=torch.int64)
    call["slot_mappings"] = [buffer[:4], buffer[2:6]]
    with pytest.raises(ValueError, match=r"slot_mappings\[1\] must not share memory with slot_mappings\[0\]"):
        specops.prepare_spec_decode_inputs(**call)
    call["slot_mappings"] = [call["positions"], torch.zeros(4, dtype=torch.int64)]
    with pytest.raises(ValueError, match=r"slot_mappings\[0\] must not share memory with positions"):
        specops.prepare_spec_decode_inputs(**call)


def _over(buffer: torch.Tensor, start: int, values: torch.Tensor) -> torch.Tensor:
    view = buffer[start : start + values.numel()]
    view.copy_(values)
    return view


@pytest.mark.parametrize("output", ["slot_mappings[1]", "num_computed_tokens"])
def test_an_output_over_query_start_loc_is_rejected_before_any_write(backend, output):
    """Once: the native op wrote far outside its outputs when an int32 slot mapping or
    num_computed_tokens overlapped query_start_loc (it re-reads query_start_loc while storing)."""
    call = _valid_call()
    buffer = torch.zeros(16, dtype=torch.int32)
    if output == "num_computed_tokens":
        call["num_computed_tokens"] = _over(buffer, 2, call["num_computed_tokens"])
    else:
        call["slot_mappings"] = [call["slot_mappings"][0], _over(buffer, 1, call["slot_mappings"][1])]
    call["query_start_loc"] = _over(buffer, 0, call["query_start_loc"])  # last: it keeps its values
    before = buffer.clone()
    with pytest.raises(ValueError, match=rf"{re.escape(output)} must not share memory with query_start_loc"):
        specops.prepare_spec_decode_inputs(**call)
    assert_same(buffer, before)


def test_idx_mapping_that_is_seq_lens_is_rejected(backend):
    """Once silently wrong slots: the native op read idx_mapping after it had stored seq_lens there."""
    call = _valid_call()
    call["seq_lens"] = i32([0, 1, 99])
    call["idx_mapping"] = call["seq_lens"][:2]
    before = call["seq_lens"].clone()
    with pytest.raises(ValueError, match="seq_lens must not share memory with idx_mapping"):
        specops.prepare_spec_decode_inputs(**call)
    assert_same(call["seq_lens"], before)


def test_correction_inputs_may_share_memory_with_outputs(backend):
    """They are read in full before the first store, on every backend: the result is the one
    their values give in buffers of their own."""
    call = _valid_call()
    call["prev_positions"] = i32([1, -1])  # row 0 continues row 1, row 1 takes the host count
    buffer = torch.full((8,), 7, dtype=torch.int32)
    call["seq_lens"] = buffer[:3]
    call["cpu_num_computed_tokens"] = _over(buffer, 1, call["cpu_num_computed_tokens"])
    separate = {**call, "seq_lens": call["seq_lens"].clone(), "cpu_num_computed_tokens": call["cpu_num_computed_tokens"].clone(),
                "num_computed_tokens": call["num_computed_tokens"].clone(),
                "num_accepted_tokens": call["num_accepted_tokens"].clone(), "positions": call["positions"].clone(),
                "slot_mappings": [t.clone() for t in call["slot_mappings"]]}
    expected = specops.prepare_spec_decode_inputs(**separate)
    actual = specops.prepare_spec_decode_inputs(**call)
    assert_same(actual.seq_lens, expected.seq_lens)
    assert_same(actual.positions, expected.positions)
    assert actual.seq_lens.tolist() == [24, 7, 0]  # 20 + 2 accepted + 2 tokens; host 6 + 1 token; padding


def test_a_slot_past_an_int32_slot_mapping_is_pad_on_device_paths_and_an_error_on_the_host():
    """Once wrapped (2^32 + 6 to 6, a real slot) on every backend. Group 1 has blocks of 8:
    tokens 0 and 1 (positions 22, 23) read column 2 of row 0, whose id 2^29 puts them at 2^32 + 6
    and 2^32 + 7; token 2 (position 11) reads column 1 of row 1, id 10."""
    for backend in BACKENDS:
        call = _valid_call()
        call["block_tables"] = [call["block_tables"][0], i32([[5, 6, 2**29, 8], [9, 10, 11, 12]])]
        with specops.backend(backend):
            if backend == "native":
                before = call["slot_mappings"][1].clone()
                with pytest.raises(ValueError, match=r"slot_mappings\[1\] is int32, but token 0 has slot 4294967302"):
                    specops.prepare_spec_decode_inputs(**call)
                assert_same(call["slot_mappings"][1], before)
                assert call["num_computed_tokens"].tolist() == [10, 20, 30]  # nothing written
            else:
                result = specops.prepare_spec_decode_inputs(**call)
                assert result.positions.tolist() == [22, 23, 11, 0]
                assert result.slot_mappings[1].tolist() == [PAD, PAD, 10 * 8 + 3, PAD], backend


def test_a_negative_token_count_is_written_whole_or_not_at_all():
    """query_start_loc[R] < 0: the reference once wrote the count correction and then raised
    torch.arange's error. Device paths now finish the step (no real token); the host op rejects
    it before any write."""
    for backend in BACKENDS:
        call = _valid_call()
        call["query_start_loc"] = i32([0, 2, -1])
        with specops.backend(backend):
            if backend == "native":
                with pytest.raises(ValueError, match="query_start_loc must be non-decreasing"):
                    specops.prepare_spec_decode_inputs(**call)
                assert call["num_computed_tokens"].tolist() == [10, 20, 30]
                continue
            result = specops.prepare_spec_decode_inputs(**call)
        assert call["num_computed_tokens"].tolist() == [22, 11, 30], backend
        assert result.positions.tolist() == [0, 0, 0, 0], backend
        assert result.seq_lens.tolist() == [22 + 2, 11 - 3, 0], backend
        assert result.slot_mappings[0].tolist() == [PAD] * 4, backend


def _new_requests(counts: list[int], query_lens: list[int], columns: int = 2):
    """New requests (no row continues a previous one: each takes its host count) on one group of
    kernel blocks of 4, `columns` per row: every position below 4 * columns has a block."""
    num_reqs = len(counts)
    starts = [0]
    for query_len in query_lens:
        starts.append(starts[-1] + query_len)
    table = torch.arange(num_reqs * columns, dtype=torch.int32).reshape(num_reqs, columns)
    return dict(num_computed_tokens=i32([0] * num_reqs), num_accepted_tokens=i32([0] * num_reqs),
                prev_positions=i32([-1] * num_reqs), valid_sampled_token_count=i32([0] * num_reqs),
                prev_num_draft_tokens=i32([0] * num_reqs), cpu_num_computed_tokens=i32(counts),
                query_start_loc=i32(starts), block_tables=[table], block_sizes=4,
                positions=torch.full((starts[-1],), 55, dtype=torch.int64),
                seq_lens=torch.full((num_reqs,), 55, dtype=torch.int32),
                slot_mappings=[torch.full((starts[-1],), 55, dtype=torch.int64)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_requests_without_tokens_bound_no_position(backend):
    # Counts of requests without tokens (negative, past int32 once a token is added, past the
    # table) say nothing about the batch's positions; the one with tokens ends on the table's
    # last covered position.
    call = _new_requests([-5, 2**31 - 1, 5, 99], [0, 0, 3, 0])
    with specops.backend(backend):
        result = specops.prepare_spec_decode_inputs(**call)
    assert result.positions.tolist() == [5, 6, 7]
    block_id = 2 * 2 + 1  # row 2, column 1 (positions 4 to 7)
    assert result.slot_mappings[0].tolist() == [block_id * 4 + 1, block_id * 4 + 2, block_id * 4 + 3]
    assert result.seq_lens.tolist() == [-5, 2**31 - 1, 8, 99]


@pytest.mark.parametrize("counts,query_lens,message", [
    ([-5, 2, 5], [1, 0, 3], r"request 0 .*num_computed_tokens = -5"),
    ([0, 2, 5], [0, 2, 4], r"request 2 .*beyond block_tables\[0\]"),
    ([0, 2**31 - 2, 5], [0, 3, 0], r"request 1 "),
])
def test_native_rejects_the_first_position_outside_and_writes_nothing(counts, query_lens, message):
    call = _new_requests(counts, query_lens)
    before = {name: value.clone() for name, value in call.items() if isinstance(value, torch.Tensor)}
    with pytest.raises(ValueError, match=message):
        specops.prepare_spec_decode_inputs(**call)
    for name, value in before.items():
        assert torch.equal(call[name], value), name
    assert (call["slot_mappings"][0] == 55).all()
