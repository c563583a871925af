"""expand_parallel_draft_inputs: the worked examples (Eagle shift, draft model), random batches
of up to five groups against the plain-Python contract on every backend, padding, opcheck,
compile, host value checks and the device paths' bounds on corrupt query layouts."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import parallel_draft
from strategies import assert_rejected_without_writes

import specops

PAD = specops.PAD_SLOT_ID


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def test_example_eagle_shift(backend):
    result = specops.expand_parallel_draft_inputs(
        torch.tensor([11, 12, 13, 21, 22, 23, 24]), torch.tensor([7, 8, 9, 30, 31, 32, 33]), torch.tensor([14, 25]),
        t32([0, 3, 7]), [t32([[1, 2, 3], [4, 5, 6]])], 16, slots_per_request=3, max_model_len=64,
        parallel_drafting_token_id=999, num_rejected_tokens=t32([1, 0]), seq_lens=t32([10, 34]))
    assert result.num_tokens == 11
    assert result.input_ids.tolist() == [12, 14, 999, 999, 0, 22, 23, 24, 25, 999, 999]
    assert result.input_ids.dtype == torch.int32
    assert result.positions.tolist() == [7, 8, 9, 10, 0, 30, 31, 32, 33, 34, 35]
    assert [i for i, x in enumerate(result.is_rejected_token_mask.tolist()) if x] == [4]
    assert [i for i, x in enumerate(result.is_masked_token_mask.tolist()) if x] == [2, 3, 9, 10]
    assert result.token_indices_to_sample.tolist() == [1, 2, 3, 8, 9, 10]
    assert result.hidden_state_mapping.tolist() == [0, 1, 2, 5, 6, 7, 8]
    assert result.slot_mappings[0].tolist() == [23, 24, 25, 26, PAD, 94, 95, 96, 97, 98, 99]
    assert result.query_start_loc.tolist() == [0, 5, 11]
    assert result.seq_lens.tolist() == [12, 36]


def test_example_draft_model_without_shift(backend):
    result = specops.expand_parallel_draft_inputs(
        torch.tensor([5, 6, 7, 8]), torch.tensor([60, 61, 62, 3]), torch.tensor([9, 4]), t32([0, 3, 4]),
        [t32([[1, 2, 3, 4], [7, 0, 0, 0]])], 16, slots_per_request=2, max_model_len=64,
        parallel_drafting_token_id=500, shift_input_ids=False, seq_lens=t32([63, 4]))
    assert result.num_tokens == 8
    assert result.input_ids.tolist() == [5, 6, 7, 9, 500, 8, 4, 500]
    assert result.positions.tolist() == [60, 61, 62, 63, 64, 3, 4, 5]
    assert not result.is_rejected_token_mask.any()
    assert [i for i, x in enumerate(result.is_masked_token_mask.tolist()) if x] == [4, 7]
    assert result.token_indices_to_sample.tolist() == [3, 4, 6, 7]
    assert result.hidden_state_mapping is None
    # Position 64 >= max_model_len: PAD; seq_lens are not clamped (63 + 2 = 65), as vLLM.
    assert result.slot_mappings[0].tolist() == [76, 77, 78, 79, PAD, 115, 116, 117]
    assert result.query_start_loc.tolist() == [0, 5, 8]
    assert result.seq_lens.tolist() == [65, 6]


def test_padding_and_int64_slots(backend):
    # Block 134217729 x 16: vLLM's compute_new_slot_mapping wraps in int32 (-2147483632).
    result = specops.expand_parallel_draft_inputs(
        torch.tensor([3]), torch.tensor([0]), torch.tensor([4]), t32([0, 1]), [t32([[134217729]])], 16,
        slots_per_request=2, max_model_len=64, parallel_drafting_token_id=7, num_tokens_padded=4, num_reqs_padded=3,
        seq_lens=t32([1]), padding_token_id=5)
    assert result.input_ids.tolist() == [4, 7, 0, 0]
    assert result.positions.tolist() == [0, 1, 0, 0]
    assert result.slot_mappings[0].tolist() == [2147483664, 2147483665, PAD, PAD]
    assert result.token_indices_to_sample.tolist() == [0, 1, 0, 0, 0, 0]
    assert result.query_start_loc.tolist() == [0, 2, 2, 2]
    assert result.seq_lens.tolist() == [2, 0, 0]
    assert not result.is_masked_token_mask[2:].any() and result.is_masked_token_mask[1]


@st.composite
def batches(draw):
    num_groups = draw(st.integers(0, 4))
    num_reqs = draw(st.integers(0, 5))
    shift = draw(st.booleans())
    slots = draw(st.integers(2 if shift else 1, 4))
    limit = draw(st.integers(1, 40))
    world = draw(st.sampled_from([1, 2]))
    query_lens = [draw(st.integers(1, 5)) for _ in range(num_reqs)]
    rejected = [draw(st.integers(0, q - 1)) for q in query_lens] if draw(st.booleans()) else None
    starts = [draw(st.integers(0, limit + 2)) for _ in range(num_reqs)]
    rows = num_reqs + 2
    return dict(num_groups=num_groups, shift=shift, slots=slots, limit=limit, world=world,
                rank=draw(st.integers(0, world - 1)), query_lens=query_lens, rejected=rejected, starts=starts,
                rows=rows, block_sizes=[draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)],
                idx=draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None,
                sharded=[draw(st.booleans()) for _ in range(num_groups)],
                enabled=[draw(st.booleans()) for _ in range(num_groups)],
                ids=[draw(st.integers(0, 999)) for _ in range(sum(query_lens))],
                next_ids=[draw(st.integers(0, 999)) for _ in range(num_reqs)],
                id_dtype=draw(st.sampled_from([torch.int64, torch.int32])),
                slot_dtype=draw(st.sampled_from([torch.int64, torch.int32])), extra=draw(st.integers(0, 2)),
                with_seq_lens=draw(st.booleans()))


@settings(max_examples=examples(25))
@given(batch=batches())
def test_random_batches_match_the_contract(backend, batch):
    num_reqs, extra = len(batch["query_lens"]), batch["extra"]
    qsl = [0]
    for q in batch["query_lens"]:
        qsl.append(qsl[-1] + q)
    positions = [p for q, s in zip(batch["query_lens"], batch["starts"]) for p in range(s, s + q)]
    cols = [-(-(batch["limit"] + 8) // bs) for bs in batch["block_sizes"]]
    tables = [torch.tensor([[1000 * g + c * c + 3 * r for c in range(cols[g])] for r in range(batch["rows"])],
                           dtype=torch.int32) for g in range(batch["num_groups"])]
    seq_lens = [s + q for s, q in zip(batch["starts"], batch["query_lens"])]
    n = batch["slots"] - (1 if batch["shift"] else 0)
    total = len(positions) + num_reqs * n
    padded = total + extra
    slot_outs = [torch.full((padded,), 555, dtype=batch["slot_dtype"]) for _ in tables]
    result = specops.expand_parallel_draft_inputs(
        torch.tensor(batch["ids"], dtype=batch["id_dtype"]), torch.tensor(positions, dtype=torch.int64),
        torch.tensor(batch["next_ids"], dtype=batch["id_dtype"]), t32(qsl), tables, batch["block_sizes"],
        slots_per_request=batch["slots"], max_model_len=batch["limit"], parallel_drafting_token_id=77777,
        shift_input_ids=batch["shift"], padding_token_id=3,
        num_rejected_tokens=t32(batch["rejected"]) if batch["rejected"] is not None else None,
        seq_lens=t32(seq_lens) if batch["with_seq_lens"] else None,
        idx_mapping=t32(batch["idx"]) if batch["idx"] is not None else None, cp_sharded=batch["sharded"],
        slot_mapping_enabled=batch["enabled"], cp_world_size=batch["world"], cp_rank=batch["rank"],
        slot_mappings=slot_outs, num_tokens_padded=padded, num_reqs_padded=num_reqs + extra)
    want = parallel_draft(
        batch["ids"], positions, batch["next_ids"], qsl, [t.tolist() for t in tables], batch["block_sizes"],
        slots=batch["slots"], max_model_len=batch["limit"], draft_token=77777, shift=batch["shift"], padding_token=3,
        num_rejected=batch["rejected"], seq_lens=seq_lens if batch["with_seq_lens"] else None,
        idx_mapping=batch["idx"], cp=(batch["world"], batch["rank"], 1), cp_sharded=batch["sharded"],
        enabled=batch["enabled"])
    assert result.num_tokens == total
    assert result.input_ids.tolist() == want["input_ids"] + [0] * extra
    assert result.positions.tolist() == want["positions"] + [0] * extra
    assert result.is_rejected_token_mask.tolist() == want["rejected"] + [False] * extra
    assert result.is_masked_token_mask.tolist() == want["masked"] + [False] * extra
    assert result.token_indices_to_sample.tolist() == want["indices"] + [0] * (extra * batch["slots"])
    if batch["shift"]:
        assert result.hidden_state_mapping.tolist() == want["hidden"]
    else:
        assert result.hidden_state_mapping is None
    for g in range(batch["num_groups"]):
        assert slot_outs[g].tolist() == want["slots"][g] + [PAD] * extra, f"group {g}"
    assert result.query_start_loc.tolist() == want["qsl"] + [total] * extra
    if batch["with_seq_lens"]:
        assert result.seq_lens.tolist() == want["seq_lens"] + [0] * extra
    else:
        assert result.seq_lens is None


def _schema_args():
    return (torch.tensor([11, 12, 13, 21, 22, 23, 24]), torch.tensor([7, 8, 9, 30, 31, 32, 33]), torch.tensor([14, 25]),
            t32([0, 3, 7]), [t32([[1, 2, 3], [4, 5, 6]]), t32([[7, 8, 9, 10, 11, 12], [13, 14, 15, 16, 17, 18]])], t32([1, 0]),
            t32([10, 34]), None, [], torch.zeros(12, dtype=torch.int32), torch.zeros(12, dtype=torch.int64),
            torch.zeros(12, dtype=torch.bool), torch.zeros(12, dtype=torch.bool), torch.zeros(9, dtype=torch.int32),
            torch.zeros(7, dtype=torch.int32), [torch.zeros(12, dtype=torch.int64), torch.zeros(12, dtype=torch.int32)],
            torch.zeros(4, dtype=torch.int32), torch.zeros(3, dtype=torch.int32),
            3, True, 64, 999, 0, 12, 3, 1, 0, 1, [16, 8], [1, 1], [True, True], [True, True])


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.expand_parallel_draft_inputs.default, _schema_args())


def test_compiles_without_graph_break():
    args = _schema_args()

    def expand(target_ids, positions_out, slot):
        result = specops.expand_parallel_draft_inputs(
            target_ids, args[1], args[2], args[3], args[4], [16, 8], slots_per_request=3, max_model_len=64,
            parallel_drafting_token_id=999, num_rejected_tokens=args[5], seq_lens=args[6], positions=positions_out,
            slot_mappings=[slot, args[15][1].clone()], num_tokens_padded=12, num_reqs_padded=3)
        return result.input_ids + 1, result.positions * 2, result.slot_mappings[0] + 0, result.query_start_loc + 0

    compiled = torch.compile(expand, fullgraph=True, backend="aot_eager")
    expected = expand(args[0].clone(), args[10].clone(), args[15][0].clone())
    actual = compiled(args[0].clone(), args[10].clone(), args[15][0].clone())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def _call(**change):
    call = dict(target_token_ids=torch.tensor([11, 12, 13, 21, 22, 23, 24]),
                target_positions=torch.tensor([7, 8, 9, 30, 31, 32, 33]), next_token_ids=torch.tensor([14, 25]),
                query_start_loc=t32([0, 3, 7]), block_tables=[t32([[1, 2, 3], [4, 5, 6]])], block_sizes=16,
                slots_per_request=3, max_model_len=64, parallel_drafting_token_id=999,
                num_rejected_tokens=t32([1, 0]), seq_lens=t32([10, 34]), input_ids=torch.full((11,), 5, dtype=torch.int32),
                slot_mappings=[torch.full((11,), 5)])
    call.update(change)
    return call


@pytest.mark.parametrize("change,argument", [
    (dict(query_start_loc=t32([0, 3, 6])), "query_start_loc"),
    (dict(query_start_loc=t32([0, 0, 7])), "query_start_loc"),
    (dict(num_rejected_tokens=t32([3, 0])), "num_rejected_tokens"),
    (dict(num_rejected_tokens=t32([-1, 0])), "num_rejected_tokens"),
    (dict(target_positions=torch.tensor([7, 8, 10, 30, 31, 32, 33])), "target_positions"),
    (dict(target_positions=torch.tensor([-1, 0, 1, 30, 31, 32, 33])), "target_positions"),
    (dict(block_tables=[t32([[1, 2], [4, 5]])], max_model_len=100), "position 32 of request 1"),
    (dict(idx_mapping=t32([0, 2])), "idx_mapping"),
    (dict(block_tables=[t32([[134217729, 2, 3], [4, 5, 6]])], slot_mappings=[torch.full((11,), 5, dtype=torch.int32)]),
     "slot_mappings"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    with specops.backend("native"):
        assert_rejected_without_writes(specops.expand_parallel_draft_inputs, _call(**change), argument=argument,
                                       written=("input_ids",), errors=ValueError)
    assert _call(**change)["slot_mappings"][0].tolist() == [5] * 11


def test_kept_positions_past_max_model_len_need_no_table_column():
    # Positions 64 and 65 are past max_model_len: PAD, and the 4-column table is not asked for them.
    with specops.backend("native"):
        result = specops.expand_parallel_draft_inputs(
            torch.tensor([1]), torch.tensor([63]), torch.tensor([2]), t32([0, 1]), [t32([[1, 2, 3, 4]])], 16,
            slots_per_request=3, max_model_len=64, parallel_drafting_token_id=9, shift_input_ids=False)
    assert result.slot_mappings[0].tolist() == [79, PAD, PAD, PAD]


@pytest.mark.parametrize("change,argument", [
    (dict(slots_per_request=1), "slots_per_request"),
    (dict(slots_per_request=0, shift_input_ids=False), "slots_per_request"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(cp_world_size=2, cp_rank=2), "cp_rank"),
    (dict(next_token_ids=torch.tensor([14, 25, 3])), "query_start_loc"),
    (dict(num_rejected_tokens=t32([1])), "num_rejected_tokens"),
    (dict(input_ids=torch.zeros(10, dtype=torch.int32)), "input_ids"),
    (dict(num_tokens_padded=12), "num_tokens_padded"),
    (dict(num_reqs_padded=1), "num_reqs_padded"),
    # num_reqs_padded * slots_per_request once overflowed int64 in the host op (UBSan).
    (dict(num_reqs_padded=2**62 + 1), "num_reqs_padded"),
    (dict(slots_per_request=2**62), "slots_per_request"),
    (dict(token_indices_to_sample=torch.zeros(5, dtype=torch.int32)), "token_indices_to_sample"),
    (dict(out_query_start_loc=torch.zeros(2, dtype=torch.int32)), "out_query_start_loc"),
    (dict(slot_mappings=[torch.full((11,), 5, dtype=torch.int16)]), "slot_mappings"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    assert_rejected_without_writes(specops.expand_parallel_draft_inputs, _call(**change), argument=argument,
                                   written=("input_ids",))


def test_an_output_sharing_an_input_is_rejected(backend):
    call = _call()
    call["input_ids"] = torch.zeros(20, dtype=torch.int32)
    call["next_token_ids"] = call["input_ids"][18:]
    assert_rejected_without_writes(specops.expand_parallel_draft_inputs, call, argument="input_ids",
                                   written=("seq_lens",))


@pytest.mark.parametrize("qsl", [[0, 3, 2**30], [0, -5, 7], [5, 3, 7], [0, 7, 3]])
def test_device_paths_stay_in_bounds_on_a_corrupt_layout(qsl):
    for name in device_backends():
        guard = torch.full((40,), 123, dtype=torch.int32)
        input_ids = guard[10:21]
        hidden = guard[25:32]
        with specops.backend(name):
            specops.expand_parallel_draft_inputs(**_call(query_start_loc=t32(qsl), input_ids=input_ids,
                                                         hidden_state_mapping=hidden))
        assert guard[:10].tolist() == [123] * 10 and guard[21:25].tolist() == [123] * 4, name
        assert guard[32:].tolist() == [123] * 8, name
