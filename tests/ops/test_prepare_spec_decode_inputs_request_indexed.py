"""prepare_spec_decode_inputs in its request-indexed mode (model runner V2's target step): counts
read through idx_mapping, no correction, and every group's block-table gather in the same call.

Expectations are tests/expectations.py's plain-Python positions, slots and gathers (independent
of the reference); vLLM's own kernels are compared in tests/peers/test_vllm_target_step.py.
"""

from __future__ import annotations

import random

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_compiles_like_eager, assert_same

import expectations
import specops

E = torch.empty(0, dtype=torch.int32)


def _i32(*values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _call(case: dict, **changes):
    kwargs = dict(case["kwargs"], **changes)
    return specops.prepare_spec_decode_inputs(case["counts"], E.clone(), E, E, E, E, case["qsl"], case["tables"],
                                              case["block_sizes"], **kwargs)


def _hand_case() -> dict:
    # Rows 3, none, 0 of request-indexed counts [5, 0, 0, 17]; tokens 2, 1, 1.
    tables = [torch.tensor([[1, 2], [0, 0], [0, 0], [7, 8]], dtype=torch.int32),
              torch.tensor([[3, 4, 5], [0, 0, 0], [0, 0, 0], [9, 10, 11]], dtype=torch.int32)]
    return dict(counts=_i32(5, 0, 0, 17), qsl=_i32(0, 2, 3, 4), tables=tables, block_sizes=[16, 8], kwargs=dict(
        positions=torch.full((6,), -7, dtype=torch.int64), seq_lens=torch.full((4,), -7, dtype=torch.int32),
        slot_mappings=[torch.full((6,), -7, dtype=torch.int64) for _ in range(2)],
        idx_mapping=torch.tensor([3, -1, 0]), num_blocks=[_i32(2, 0, 0, 2), _i32(3, 0, 0, 3)],
        request_indexed_counts=True, gathered_block_tables=[torch.full((4, 2), -7, dtype=torch.int32),
                                                            torch.full((4, 3), -7, dtype=torch.int32)],
        num_gathered_rows=4, sliding_window_reach=[0, 8]))


def test_hand_computed(backend):
    case = _hand_case()
    result = _call(case)
    # Request 0 (row 3, count 17): positions 17, 18; request 1 (no row): 0; request 2 (row 0): 5.
    assert result.positions.tolist() == [17, 18, 0, 5, 0, 0]
    assert result.seq_lens.tolist() == [19, 1, 6, 0]
    # Group 0, blocks of 16: row 3's column 1 is block 8 (slots 129, 130); row 0's column 0 is 1.
    assert result.slot_mappings[0].tolist() == [129, 130, -1, 21, -1, -1]
    # Group 1, blocks of 8: position 17 is column 2 (block 11, slot 89), 5 is column 0 (block 3).
    assert result.slot_mappings[1].tolist() == [89, 90, -1, 29, -1, -1]
    gathered = case["kwargs"]["gathered_block_tables"]
    assert gathered[0].tolist() == [[7, 8], [0, 0], [1, 2], [0, 0]]
    # Group 1's window of 8: row 3 starts at 17, so its blocks wholly below 9 (column 0) are NULL.
    assert gathered[1].tolist() == [[0, 10, 11], [0, 0, 0], [3, 4, 5], [0, 0, 0]]


def _random_case(rng: random.Random, num_groups: int, cp_world_size: int) -> dict:
    rows, cols, R = rng.randint(1, 6), rng.randint(1, 6), rng.randint(0, 5)
    block_sizes = [rng.choice([4, 8, 16]) for _ in range(num_groups)]
    idx = [rng.choice([-1] + list(range(rows))) for _ in range(R)]
    query_lens = [rng.randint(0, 4) for _ in range(R)]
    qsl = [0]
    for q in query_lens:
        qsl.append(qsl[-1] + q)
    # Counts whose positions each row's table holds on every rank (a full table row maps them).
    capacity = min(block_sizes, default=16) * cols
    counts = [rng.randint(0, max(capacity - 4, 0)) for _ in range(rows)]
    tables = [torch.randint(1, 1000, (rows, cols), dtype=torch.int32) for _ in range(num_groups)]
    num_blocks = [torch.full((rows,), cols, dtype=torch.int32) for _ in range(num_groups)]
    tokens_padded, reqs_padded = qsl[-1] + rng.randint(0, 3), R + rng.randint(0, 2)
    gathered = [torch.full((reqs_padded + rng.randint(0, 1), cols + rng.randint(0, 1)), -7, dtype=torch.int32)
                for _ in range(num_groups)]
    return dict(
        counts=torch.tensor(counts, dtype=torch.int32), qsl=torch.tensor(qsl, dtype=torch.int32), tables=tables,
        block_sizes=block_sizes, kwargs=dict(
            positions=torch.full((tokens_padded,), -7, dtype=torch.int64),
            seq_lens=torch.full((reqs_padded,), -7, dtype=torch.int32),
            slot_mappings=[torch.full((tokens_padded,), -7, dtype=rng.choice([torch.int64, torch.int32]))
                           for _ in range(num_groups)],
            idx_mapping=torch.tensor(idx, dtype=rng.choice([torch.int32, torch.int64])),
            cp_sharded=[rng.random() < 0.5 for _ in range(num_groups)], cp_world_size=cp_world_size,
            cp_rank=rng.randrange(cp_world_size), cp_interleave=rng.choice([1, 2, 4]),
            slot_mapping_enabled=[rng.random() < 0.8 for _ in range(num_groups)], num_blocks=num_blocks,
            request_indexed_counts=True, gathered_block_tables=gathered, num_gathered_rows=reqs_padded,
            sliding_window_reach=[rng.choice([0, 0, 5, 12]) for _ in range(num_groups)]))


def _expected(case: dict) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    kw = case["kwargs"]
    idx, qsl = kw["idx_mapping"], case["qsl"]
    positions, seq_lens = expectations.positions_and_seq_lens(
        case["counts"], qsl, kw["positions"], kw["seq_lens"], kw["positions"].numel(), kw["seq_lens"].numel(), idx)
    num_tokens = int(qsl[-1])
    slots, gathered = [], []
    for g, table in enumerate(case["tables"]):
        sharded = kw["cp_sharded"][g]
        out = kw["slot_mappings"][g]
        if not kw["slot_mapping_enabled"][g]:
            slots.append(torch.full_like(out, -1))
        else:
            slots.append(expectations.compute_slot_mapping(
                qsl, positions[:num_tokens], table, case["block_sizes"][g], out,
                cp_world_size=kw["cp_world_size"] if sharded else 1, cp_rank=kw["cp_rank"] if sharded else 0,
                cp_interleave=kw["cp_interleave"] if sharded else 1, idx_mapping=idx))
        gathered.append(expectations.gathered_block_tables(
            table, kw["num_blocks"][g], idx, kw["gathered_block_tables"][g], kw["num_gathered_rows"], case["counts"],
            kw["sliding_window_reach"][g], case["block_sizes"][g]))
    return positions, seq_lens, slots, gathered


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(0, 5), cp_world_size=st.sampled_from([1, 2]))
def test_random_against_the_expectation(backend, seed, num_groups, cp_world_size):
    case = _random_case(random.Random(seed), num_groups, cp_world_size)
    expected = _expected(case)
    result = _call(case)
    assert_same(result.positions, expected[0])
    assert_same(result.seq_lens, expected[1])
    for g in range(num_groups):
        assert_same(result.slot_mappings[g], expected[2][g])
        assert_same(case["kwargs"]["gathered_block_tables"][g], expected[3][g])


def test_equals_the_unfused_ops(backend):
    """One call equals prepare_positions_and_seq_lens, compute_slot_mapping per group and
    gather_block_tables_multi, each run on its own."""
    case = _random_case(random.Random(5), 3, 2)
    kw = case["kwargs"]
    unfused = dict(positions=kw["positions"].clone(), seq_lens=kw["seq_lens"].clone(),
                   slots=[t.clone() for t in kw["slot_mappings"]],
                   gathered=[t.clone() for t in kw["gathered_block_tables"]])
    _call(case)
    idx = kw["idx_mapping"]
    specops.prepare_positions_and_seq_lens(case["counts"], case["qsl"], positions=unfused["positions"],
                                           seq_lens=unfused["seq_lens"], idx_mapping=idx)
    num_tokens = int(case["qsl"][-1])
    for g, table in enumerate(case["tables"]):
        if not kw["slot_mapping_enabled"][g]:
            unfused["slots"][g].fill_(-1)
            continue
        sharded = kw["cp_sharded"][g]
        specops.compute_slot_mapping(case["qsl"], unfused["positions"][:num_tokens], table, case["block_sizes"][g],
                                     out=unfused["slots"][g], cp_world_size=kw["cp_world_size"] if sharded else 1,
                                     cp_rank=kw["cp_rank"] if sharded else 0,
                                     cp_interleave=kw["cp_interleave"] if sharded else 1, idx_mapping=idx,
                                     num_tokens_padded=unfused["slots"][g].numel())
    specops.gather_block_tables_multi(case["tables"], kw["num_blocks"], idx, unfused["gathered"],
                                      num_reqs_padded=kw["num_gathered_rows"], num_computed_tokens=case["counts"],
                                      sliding_window_reach=kw["sliding_window_reach"],
                                      block_sizes=case["block_sizes"])
    assert_same(kw["positions"], unfused["positions"])
    assert_same(kw["seq_lens"], unfused["seq_lens"])
    for ours, theirs in zip(kw["slot_mappings"] + kw["gathered_block_tables"], unfused["slots"] + unfused["gathered"]):
        assert_same(ours, theirs)


def test_without_a_gather(backend):
    case = _hand_case()
    untouched = [t.clone() for t in case["kwargs"]["gathered_block_tables"]]
    result = _call(case, gathered_block_tables=None, sliding_window_reach=0)
    assert result.positions.tolist() == [17, 18, 0, 5, 0, 0]
    assert [t.tolist() for t in case["kwargs"]["gathered_block_tables"]] == [t.tolist() for t in untouched]


_BAD = [
    ("prev_positions", dict(prev_positions=_i32(0)), "prev_positions must be empty with request_indexed_counts"),
    ("idx_mapping", dict(idx_mapping=None), "idx_mapping must be given with request_indexed_counts"),
    ("request_indexed_counts", dict(request_indexed_counts=False, counts=_i32(5, 0, 0)),
     "gathered_block_tables needs request_indexed_counts"),
    ("gathered_block_tables", dict(gathered_block_tables=[torch.zeros(4, 2, dtype=torch.int32)]),
     r"gathered_block_tables must be empty or hold one tensor per block table \(len\(block_tables\) = 2\), got 1"),
    ("num_blocks", dict(num_blocks=None), r"num_blocks must hold one tensor per block table"),
    ("num_gathered_rows", dict(num_gathered_rows=5), r"num_gathered_rows must be <= gathered_block_tables\[0\]"),
    ("num_gathered_rows", dict(num_gathered_rows=2), r"num_gathered_rows must be >= R = 3"),
    ("sliding_window_reach", dict(sliding_window_reach=[1, 2, 3]), r"sliding_window_reach must"),
    ("blocks_per_kv_block", dict(blocks_per_kv_block=[1, 2]), r"blocks_per_kv_block\[1\] must be 1 where"),
    ("gathered_block_tables[1]", dict(gathered_block_tables=[torch.zeros(4, 2, dtype=torch.int32),
                                                             torch.zeros(4, 3, dtype=torch.int64)]),
     r"gathered_block_tables\[1\] must have dtype"),
    ("num_computed_tokens", dict(counts=_i32(5, 0, 0, 17)[:3]),
     r"num_computed_tokens must have at least block_tables\[0\].size\(0\) = 4 entries"),
]


@pytest.mark.parametrize("name, changes, message", _BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(_BAD)])
def test_bad_input_names_the_argument_and_writes_nothing(backend, name, changes, message):
    case = _hand_case()
    changes = dict(changes)
    counts = changes.pop("counts", case["counts"])
    # A correction of one row: every correction input then has its one entry.
    one_row = "prev_positions" in changes
    correction = [_i32(0), _i32(0), _i32(1), _i32(0), _i32(0)] if one_row else [E.clone(), E, E, E, E]
    changes.pop("prev_positions", None)
    kw = case["kwargs"]
    outputs = [kw["positions"], kw["seq_lens"], *kw["slot_mappings"], *kw["gathered_block_tables"]]
    before = [t.clone() for t in outputs]
    with pytest.raises((ValueError, TypeError), match=message):
        specops.prepare_spec_decode_inputs(counts, *correction, case["qsl"], case["tables"],
                                           case["block_sizes"], **dict(kw, **changes))
    for t, b in zip(outputs, before):
        assert torch.equal(t, b), name


def test_a_gathered_table_sharing_a_slot_mapping_is_rejected(backend):
    case = _hand_case()
    shared = torch.zeros(8, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"gathered_block_tables\[0\]"):
        _call(case, slot_mappings=[shared[:6], torch.zeros(6, dtype=torch.int64)],
              gathered_block_tables=[shared.view(torch.int32)[:8].view(4, 2), torch.zeros(4, 3, dtype=torch.int32)])


def test_opcheck():
    case = _hand_case()
    kw = case["kwargs"]
    args = (case["counts"], E.clone(), E, E, E, E, case["qsl"], kw["positions"], kw["seq_lens"], case["tables"],
            kw["slot_mappings"], kw["idx_mapping"], 6, 4, 1, 0, 1, case["block_sizes"], [1, 1], [True, True],
            [True, True], kw["num_blocks"], True, kw["gathered_block_tables"], 4, [0, 8])
    torch.library.opcheck(torch.ops.specops.prepare_spec_decode_inputs.default, args)


def test_compiles_without_graph_break():
    case = _hand_case()
    kw = case["kwargs"]

    def step(counts, positions, seq_lens, slot0, slot1, out0, out1):
        result = specops.prepare_spec_decode_inputs(
            counts, E.clone(), E, E, E, E, case["qsl"], case["tables"], case["block_sizes"], positions=positions,
            seq_lens=seq_lens, slot_mappings=[slot0, slot1], idx_mapping=kw["idx_mapping"],
            num_blocks=kw["num_blocks"], request_indexed_counts=True, gathered_block_tables=[out0, out1],
            num_gathered_rows=4, sliding_window_reach=[0, 8])
        return result.positions + 1, out1 * 2

    tensors = (case["counts"], kw["positions"], kw["seq_lens"], *kw["slot_mappings"], *kw["gathered_block_tables"])
    assert_compiles_like_eager(step, *tensors)


def _hostile(case: dict, rng: random.Random) -> None:
    """Values the host op rejects, in place: rows past the counts and the tables, counts at the
    int32 limits, block counts past the columns."""
    kw = case["kwargs"]
    idx = kw["idx_mapping"]
    for r in range(idx.numel()):
        idx[r] = rng.choice([int(idx[r]), -5, 10**6, case["counts"].numel()])
    for row in range(case["counts"].numel()):
        case["counts"][row] = rng.choice([int(case["counts"][row]), -(2**31), 2**31 - 1, -3])
    for counts in kw["num_blocks"]:
        counts[rng.randrange(counts.numel())] = rng.choice([-2, 10**6])


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), num_groups=st.integers(1, 5))
def test_device_paths_stay_in_bounds_and_agree_on_hostile_values(seed, num_groups):
    """Rows past the counts or the tables, counts at the int32 limits, block counts past the
    columns: Triton and the reference write the same values and nothing outside their outputs
    (each output in the middle of a canary-filled buffer)."""
    rng = random.Random(seed)
    case = _random_case(rng, num_groups, rng.choice([1, 2]))
    if case["qsl"].numel() == 1:
        return
    _hostile(case, rng)
    results = {}
    for backend in ("triton", "reference"):
        kw = dict(case["kwargs"])
        bands = []

        def banded(t):
            buffer = torch.full((t.numel() + 16,), 0x5A5A, dtype=t.dtype)
            bands.append(buffer)
            return buffer[8:-8].view(t.shape)

        kw["positions"], kw["seq_lens"] = banded(kw["positions"]), banded(kw["seq_lens"])
        kw["slot_mappings"] = [banded(t) for t in kw["slot_mappings"]]
        kw["gathered_block_tables"] = [banded(t) for t in kw["gathered_block_tables"]]
        with specops.backend(backend):
            _call(dict(case, kwargs=kw))
        for buffer in bands:
            assert (buffer[:8] == 0x5A5A).all() and (buffer[-8:] == 0x5A5A).all(), backend
        results[backend] = [kw["positions"], kw["seq_lens"], *kw["slot_mappings"], *kw["gathered_block_tables"]]
    for ours, theirs in zip(results["triton"], results["reference"]):
        assert_same(ours, theirs)
