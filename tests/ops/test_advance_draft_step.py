"""advance_draft_step: the worked examples (both max_model_len rules, CP), random steps of up
to five groups against the plain-Python contract on every backend, the deliberate differences
from vLLM, padding, opcheck, compile, host value checks."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import draft_step
from strategies import assert_rejected_without_writes

import specops

PAD = specops.PAD_SLOT_ID


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def rows_of(first: int, rows: int, cols: int, step: int = 10) -> torch.Tensor:
    return torch.tensor([[first + step * r + c for c in range(cols)] for r in range(rows)], dtype=torch.int32)


def test_example_reset_two_groups(backend):
    positions = torch.tensor([5, 38, 39, 15])
    seq_lens = t32([6, 39, 40, 16])
    tables = [t32([[3, 4, 9], [7, 8, 2], [5, 6, 1], [10, 11, 12]]), rows_of(20, 4, 5)]
    step = specops.advance_draft_step(positions, seq_lens, tables, [16, 8], max_model_len=40, num_tokens_padded=6)
    assert step.positions is positions and positions.tolist() == [6, 39, 0, 16]
    assert step.seq_lens is seq_lens and seq_lens.tolist() == [7, 40, 1, 17]
    assert step.slot_mappings[0].tolist() == [54, 39, PAD, 176, PAD, PAD]
    assert step.slot_mappings[1].tolist() == [166, 279, PAD, 416, PAD, PAD]
    assert step.query_start_loc is None


def test_example_clamp_first_step_with_context_parallelism(backend):
    positions = torch.tensor([9, 62, 63])
    seq_lens = t32([12, 63, 64, 5])
    query_start_loc = t32([9] * 5)
    tables = [rows_of(1, 3, 4, 4), rows_of(21, 3, 8)]
    step = specops.advance_draft_step(
        positions, seq_lens, tables, 8, max_model_len=64, past_max_model_len="clamp",
        num_rejected_tokens=t32([2, 0, 0]), idx_mapping=t32([2, 0, 1]), cp_sharded=[True, False], cp_world_size=2,
        cp_rank=1, query_start_loc=query_start_loc, num_reqs_padded=4, num_tokens_padded=6)
    assert positions.tolist() == [10, 63, 63]
    assert seq_lens.tolist() == [11, 64, 64, 0]
    assert query_start_loc.tolist() == [0, 1, 2, 3, 3]
    assert step.slot_mappings[0].tolist() == [PAD, 39, 71, PAD, PAD, PAD]
    assert step.slot_mappings[1].tolist() == [338, 231, 311, PAD, PAD, PAD]


def test_first_step_gathers_the_sampled_tokens_positions(backend):
    positions = torch.tensor([3, 4, 5, 20, 21])
    seq_lens = t32([6, 22])
    step = specops.advance_draft_step(positions, seq_lens, [t32([[1, 2], [3, 4]])], 16, max_model_len=100,
                                      token_indices=t32([1, 4]), num_rejected_tokens=t32([1, 0]))
    assert positions.tolist() == [3, 4, 5, 20, 21]  # read only: the step's positions are a new tensor
    assert step.positions.tolist() == [5, 22] and step.positions.dtype == torch.int64
    assert seq_lens.tolist() == [6, 23]
    assert step.slot_mappings[0].tolist() == [21, 70]


def test_slots_past_int32_are_exact(backend):
    table = t32([[134217729]])
    step = specops.advance_draft_step(torch.tensor([0]), t32([1]), [table], 16, max_model_len=64)
    assert step.slot_mappings[0].tolist() == [2147483665]


def test_a_position_past_the_table_is_pad_on_the_device_paths():
    for name in device_backends():
        with specops.backend(name):
            step = specops.advance_draft_step(torch.tensor([40]), t32([41]), [t32([[3, 4]])], 16, max_model_len=100)
        # vLLM's V1 kernel clamps the column to the last one and writes slot 73 (another position's).
        assert step.slot_mappings[0].tolist() == [PAD], name


def test_native_rejects_a_position_past_the_table_and_writes_nothing():
    call = dict(positions=torch.tensor([40]), seq_lens=t32([41]), block_tables=[t32([[3, 4]])], block_sizes=16,
                max_model_len=100, slot_mappings=[torch.full((1,), 5)])
    with specops.backend("native"):
        with pytest.raises(ValueError, match="position 41 of request 0"):
            specops.advance_draft_step(**call)
    assert call["positions"].tolist() == [40] and call["seq_lens"].tolist() == [41]
    assert call["slot_mappings"][0].tolist() == [5]


@st.composite
def steps(draw):
    num_groups = draw(st.integers(1, 5))
    num_reqs = draw(st.integers(0, 6))
    limit = draw(st.integers(1, 40))
    world = draw(st.sampled_from([1, 2]))
    rank = draw(st.integers(0, world - 1))
    block_sizes = [draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)]
    rows = num_reqs + 2
    positions = [draw(st.integers(0, limit + 2)) for _ in range(num_reqs)]
    seq_lens = [draw(st.integers(1, 60)) for _ in range(num_reqs)]
    rejected = [draw(st.integers(0, s)) for s in seq_lens] if draw(st.booleans()) else None
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None
    return dict(num_groups=num_groups, limit=limit, world=world, rank=rank, block_sizes=block_sizes, rows=rows,
                positions=positions, seq_lens=seq_lens, rejected=rejected, idx=idx,
                rule=draw(st.sampled_from(["reset", "clamp"])),
                sharded=[draw(st.booleans()) for _ in range(num_groups)],
                enabled=[draw(st.booleans()) for _ in range(num_groups)],
                pos_dtype=draw(st.sampled_from([torch.int64, torch.int32])),
                slot_dtype=draw(st.sampled_from([torch.int64, torch.int32])), extra=draw(st.integers(0, 2)))


@settings(max_examples=examples(25))
@given(step=steps())
def test_random_steps_match_the_contract(backend, step):
    num_reqs = len(step["positions"])
    # Tables wide enough for every position below limit + 3 on one rank.
    cols = [-(-(step["limit"] + 3) // bs) for bs in step["block_sizes"]]
    tables = [rows_of(100 * g + 1, step["rows"], c, c) for g, c in enumerate(cols)]
    positions = torch.tensor(step["positions"], dtype=step["pos_dtype"])
    seq_lens = t32(step["seq_lens"] + [555] * step["extra"])
    slots = [torch.full((num_reqs + step["extra"],), 555, dtype=step["slot_dtype"]) for _ in tables]
    query_start_loc = t32([555] * (num_reqs + step["extra"] + 1))
    result = specops.advance_draft_step(
        positions, seq_lens, tables, step["block_sizes"], max_model_len=step["limit"], past_max_model_len=step["rule"],
        num_rejected_tokens=t32(step["rejected"]) if step["rejected"] is not None else None,
        idx_mapping=t32(step["idx"]) if step["idx"] is not None else None, slot_mappings=slots,
        query_start_loc=query_start_loc, cp_sharded=step["sharded"], slot_mapping_enabled=step["enabled"],
        cp_world_size=step["world"], cp_rank=step["rank"])
    want_positions, want_seq_lens, want_slots = draft_step(
        step["positions"], step["seq_lens"], [t.tolist() for t in tables], step["block_sizes"],
        max_model_len=step["limit"], rule=step["rule"], num_rejected=step["rejected"], idx_mapping=step["idx"],
        cp=(step["world"], step["rank"], 1), cp_sharded=step["sharded"], enabled=step["enabled"])
    assert result.positions.tolist() == want_positions
    assert seq_lens.tolist() == want_seq_lens + [0] * step["extra"]
    for g in range(step["num_groups"]):
        assert slots[g].tolist() == want_slots[g] + [PAD] * step["extra"], f"group {g}"
    assert query_start_loc.tolist() == [min(i, num_reqs) for i in range(num_reqs + step["extra"] + 1)]


def _opcheck_args():
    tables = [t32([[3, 4, 9], [7, 8, 2], [5, 6, 1], [10, 11, 12]]), rows_of(20, 4, 5)]
    positions = torch.tensor([5, 38, 39, 15])
    return (positions, t32([6, 39, 40, 16, 3]), tables, None, None, None, torch.zeros(6, dtype=torch.int64),
            [torch.zeros(6, dtype=torch.int64), torch.zeros(6, dtype=torch.int32)], torch.zeros(6, dtype=torch.int32),
            [], 40, 0, 6, 5, 1, 0, 1, [16, 8], [1, 1], [True, True], [True, True])


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.advance_draft_step.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(positions, seq_lens, slot):
        result = specops.advance_draft_step(positions, seq_lens, args[2], [16, 8], max_model_len=40,
                                            out_positions=args[6].clone(), slot_mappings=[slot, args[7][1].clone()],
                                            num_tokens_padded=6)
        return result.positions + 1, result.slot_mappings[0] * 2, seq_lens + 0

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(args[0].clone(), args[1].clone(), args[7][0].clone())
    actual = compiled(args[0].clone(), args[1].clone(), args[7][0].clone())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def _call(**change):
    call = dict(positions=torch.tensor([5, 38]), seq_lens=t32([6, 39]), block_tables=[t32([[3, 4, 9], [7, 8, 2]])],
                block_sizes=16, max_model_len=40, slot_mappings=[torch.full((2,), 555)])
    call.update(change)
    return call


@pytest.mark.parametrize("change,argument", [
    (dict(positions=torch.tensor([-5, 38])), "positions"),
    (dict(token_indices=t32([0, 2])), "token_indices"),
    (dict(num_rejected_tokens=t32([7, 0])), "num_rejected_tokens"),
    (dict(idx_mapping=t32([0, 2])), "idx_mapping"),
    (dict(block_tables=[t32([[134217729, 4, 9], [7, 8, 2]])], slot_mappings=[torch.full((2,), 555, dtype=torch.int32)]),
     "slot_mappings"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    with specops.backend("native"):
        assert_rejected_without_writes(specops.advance_draft_step, _call(**change), argument=argument,
                                       written=("positions", "seq_lens"), errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(max_model_len=0), "max_model_len"),
    (dict(past_max_model_len="wrap"), "past_max_model_len"),
    (dict(cp_world_size=2, cp_rank=2), "cp_rank"),
    (dict(seq_lens=t32([6])), "seq_lens"),
    (dict(slot_mappings=[torch.full((1,), 555)]), "slot_mappings"),
    (dict(out_positions=torch.zeros(3, dtype=torch.int64), num_tokens_padded=4), "num_tokens_padded"),
    (dict(query_start_loc=t32([0, 0])), "query_start_loc"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    assert_rejected_without_writes(specops.advance_draft_step, _call(**change), argument=argument,
                                   written=("positions", "seq_lens"))


def test_out_positions_sharing_part_of_positions_is_rejected(backend):
    positions = torch.tensor([5, 38, 1])
    call = _call(positions=positions[:2], out_positions=positions[1:])
    assert_rejected_without_writes(specops.advance_draft_step, call, argument="out_positions",
                                   written=("seq_lens",))
