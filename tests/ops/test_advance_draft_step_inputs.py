"""advance_draft_step's token bookkeeping (model runner V2's speculator steps in the same launch
as every group's advance): worked first-step, later-step and last-step examples, random steps
against plain-Python expectations on every backend, opcheck, compile, and bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from step_expectations import draft_step as expected_step
from strategies import assert_rejected_without_writes

import specops

PAD = specops.PAD_SLOT_ID


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def rows_of(first: int, rows: int, cols: int, step: int = 10) -> torch.Tensor:
    return torch.tensor([[first + step * r + c for c in range(cols)] for r in range(rows)], dtype=torch.int32)


def _tables():
    # A clamp case: request-indexed, group 0 CP-sharded (CP 2, rank 1), group 1 not.
    return [rows_of(1, 3, 4, 4), rows_of(21, 3, 8)]


def _advance(**call):
    return specops.advance_draft_step(
        call.pop("positions"), call.pop("seq_lens"), _tables(), 8, max_model_len=64, past_max_model_len="clamp",
        idx_mapping=t32([2, 0, 1]), cp_sharded=[True, False], cp_world_size=2, cp_rank=1, **call)


def test_first_decode_step_reads_the_targets_seq_lens_and_the_first_drafts(backend):
    # prepare_decode_inputs + compute_slot_mappings of model runner V2, one call.
    positions, seq_lens = torch.tensor([9, 62, 63]), t32([7, 7, 7, 5])
    target_seq_lens = t32([12, 63, 64])
    draft_tokens = torch.tensor([[70, 71, 72], [80, 81, 82], [90, 91, 92], [5, 5, 5]])
    input_ids, sample_positions = t32([-1] * 5), torch.tensor([100, 200, 300, 7])
    query_start_loc = t32([9] * 5)
    step = _advance(positions=positions, seq_lens=seq_lens, target_seq_lens=target_seq_lens,
                    num_rejected_tokens=t32([2, 0, 0]), draft_tokens=draft_tokens, input_ids=input_ids,
                    sample_positions=sample_positions, query_start_loc=query_start_loc, num_reqs_padded=4,
                    num_tokens_padded=6)
    assert positions.tolist() == [10, 63, 63]
    assert seq_lens.tolist() == [11, 64, 64, 0]
    assert target_seq_lens.tolist() == [12, 63, 64]  # read only
    assert query_start_loc.tolist() == [0, 1, 2, 3, 3]
    assert step.slot_mappings[0].tolist() == [PAD, 39, 71, PAD, PAD, PAD]
    assert step.slot_mappings[1].tolist() == [338, 231, 311, PAD, PAD, PAD]
    assert input_ids.tolist() == [70, 80, 90, -1, -1]
    assert sample_positions.tolist() == [101, 201, 301, 7]
    assert draft_tokens[:, 0].tolist() == [70, 80, 90, 5]


def _later_step(step_index: int):
    positions, seq_lens = torch.tensor([10, 63, 63]), t32([11, 64, 64])
    draft_tokens = torch.tensor([[70, 0, 0], [80, 0, 0], [90, 0, 0]])
    hidden = torch.arange(8, dtype=torch.float32).view(4, 2) + 0.5
    call = dict(positions=positions, seq_lens=seq_lens, draft_tokens=draft_tokens,
                sampled_tokens=torch.tensor([17, 18, 19]), draft_step=torch.tensor(step_index), num_draft_steps=3,
                input_ids=t32([-1] * 4), sample_positions=torch.tensor([101, 201, 301]), hidden_states=hidden,
                next_hidden_states=torch.zeros(5, 2), slot_mappings=[torch.full((6,), 555), torch.full((6,), 555)])
    return call


def test_a_later_step_stores_the_sampled_tokens_and_advances(backend):
    # update_draft_inputs + the next step's compute_slot_mappings, one call.
    call = _later_step(1)
    step = _advance(**dict(call))
    assert call["draft_tokens"].tolist() == [[70, 17, 0], [80, 18, 0], [90, 19, 0]]
    assert call["input_ids"].tolist() == [17, 18, 19, -1]
    assert call["sample_positions"].tolist() == [102, 202, 302]
    assert torch.equal(call["next_hidden_states"][:3], call["hidden_states"][:3])
    assert call["next_hidden_states"][3:].eq(0).all()
    assert call["positions"].tolist() == [11, 63, 63] and call["seq_lens"].tolist() == [12, 64, 64]
    # Position 11 of request 0 (row 2): rank 1 holds it in group 0, local offset 5 of block 9.
    assert step.slot_mappings[0].tolist() == [77, 39, 71, PAD, PAD, PAD]
    assert step.slot_mappings[1].tolist() == [339, 231, 311, PAD, PAD, PAD]


def test_the_last_step_only_stores_the_sampled_tokens(backend):
    call = _later_step(2)
    before = {name: value.clone() for name, value in call.items() if isinstance(value, torch.Tensor)}
    slots_before = [s.clone() for s in call["slot_mappings"]]
    _advance(**dict(call))
    assert call["draft_tokens"].tolist() == [[70, 0, 17], [80, 0, 18], [90, 0, 19]]
    for name, value in before.items():
        if name != "draft_tokens":
            assert torch.equal(call[name], value), f"the last step wrote {name}"
    assert all(torch.equal(s, b) for s, b in zip(call["slot_mappings"], slots_before))


def test_without_num_draft_steps_every_step_advances(backend):
    call = _later_step(2)
    del call["num_draft_steps"]
    _advance(**dict(call))
    assert call["draft_tokens"][:, 2].tolist() == [17, 18, 19]
    assert call["positions"].tolist() == [11, 63, 63] and call["input_ids"].tolist() == [17, 18, 19, -1]


@st.composite
def bookkeeping(draw):
    num_reqs = draw(st.integers(0, 5))
    columns = draw(st.integers(1, 4))
    step = draw(st.integers(0, columns - 1))
    return dict(num_reqs=num_reqs, columns=columns, step=step, limit=draw(st.integers(1, 40)),
                num_draft_steps=draw(st.sampled_from([None, columns, step + 1, step + 2])),
                sampled=draw(st.booleans()), target=draw(st.booleans()), hidden=draw(st.integers(0, 40)),
                ids_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
                tokens_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
                hidden_dtype=draw(st.sampled_from([torch.float32, torch.bfloat16])),
                seed=draw(st.integers(0, 2**31 - 1)))


@settings(max_examples=examples(20))
@given(case=bookkeeping())
def test_random_bookkeeping_matches_plain_python(backend, case):
    g = torch.Generator().manual_seed(case["seed"])
    num_reqs, limit, step = case["num_reqs"], case["limit"], case["step"]
    rows, block_size = num_reqs + 1, 4
    table = torch.randint(0, 1000, (rows, -(-limit // block_size)), generator=g, dtype=torch.int32)
    positions = torch.randint(0, limit, (num_reqs,), generator=g)
    seq_lens = torch.randint(1, 50, (num_reqs + 1,), generator=g, dtype=torch.int32)
    target = torch.randint(1, 50, (num_reqs,), generator=g, dtype=torch.int32) if case["target"] else None
    drafts = torch.randint(0, 500, (num_reqs + 1, case["columns"]), generator=g).to(case["tokens_dtype"])
    sampled = torch.randint(0, 500, (num_reqs,), generator=g) if case["sampled"] else None
    hidden = torch.randn(num_reqs + 2, case["hidden"], generator=g).to(case["hidden_dtype"])
    next_hidden = torch.zeros(num_reqs + 1, case["hidden"], dtype=case["hidden_dtype"])
    input_ids = torch.full((num_reqs + 1,), -7, dtype=case["ids_dtype"])
    keys = torch.randint(0, 100, (num_reqs + 1,), generator=g)
    slots = torch.full((num_reqs + 1,), 555)
    old = dict(positions=positions.tolist(), seq_lens=seq_lens.tolist(), drafts=drafts.tolist(), keys=keys.tolist())
    specops.advance_draft_step(
        positions, seq_lens, [table], block_size, max_model_len=limit, past_max_model_len="clamp",
        slot_mappings=[slots], target_seq_lens=target, input_ids=input_ids, draft_tokens=drafts,
        sampled_tokens=sampled, draft_step=torch.tensor(step, dtype=torch.int32),
        num_draft_steps=case["num_draft_steps"], sample_positions=keys, hidden_states=hidden,
        next_hidden_states=next_hidden, num_reqs_padded=num_reqs)
    want_drafts = [list(row) for row in old["drafts"]]
    for r in range(num_reqs):
        if sampled is not None:
            want_drafts[r][step] = int(sampled[r])
    assert drafts.tolist() == want_drafts
    if case["num_draft_steps"] is not None and step >= case["num_draft_steps"] - 1:
        assert positions.tolist() == old["positions"] and seq_lens.tolist() == old["seq_lens"]
        assert input_ids.eq(-7).all() and keys.tolist() == old["keys"] and next_hidden.eq(0).all()
        assert slots.eq(555).all()
        return
    base = target.tolist() if target is not None else old["seq_lens"][:num_reqs]
    want_positions, want_seq_lens, want_slots = expected_step(
        old["positions"], base, [table.tolist()], [block_size], max_model_len=limit, rule="clamp")
    assert positions.tolist() == want_positions
    assert seq_lens.tolist() == want_seq_lens + old["seq_lens"][num_reqs:]
    assert slots.tolist() == want_slots[0] + [PAD]
    assert input_ids.tolist() == [want_drafts[r][step] for r in range(num_reqs)] + [-7]
    assert keys.tolist() == [k + 1 for k in old["keys"][:num_reqs]] + old["keys"][num_reqs:]
    assert torch.equal(next_hidden[:num_reqs], hidden[:num_reqs]) and next_hidden[num_reqs:].eq(0).all()


def _opcheck_args():
    call = _later_step(1)
    return (call["positions"], call["seq_lens"], _tables(), None, None, t32([2, 0, 1]), call["positions"],
            call["slot_mappings"], None, [], 64, 1, -1, -1, 2, 1, 1, [8, 8], [1, 1], [True, False], [True, True],
            t32([12, 63, 64]), call["input_ids"], call["draft_tokens"], call["sampled_tokens"], call["draft_step"], 3,
            call["sample_positions"], call["hidden_states"], call["next_hidden_states"])


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.advance_draft_step.default, _opcheck_args())


def test_compiles_without_graph_break():
    def step(positions, seq_lens, draft_tokens, draft_step):
        call = _later_step(1)
        call.update(positions=positions, seq_lens=seq_lens, draft_tokens=draft_tokens, draft_step=draft_step)
        result = _advance(**call)
        return result.positions + 1, result.slot_mappings[0] * 2, draft_tokens + 0, call["input_ids"] + 0

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    for step_index in (1, 2):
        call = _later_step(step_index)
        args = (call["positions"], call["seq_lens"], call["draft_tokens"], call["draft_step"])
        expected = step(*(a.clone() for a in args))
        actual = compiled(*(a.clone() for a in args))
        assert all(torch.equal(a, e) for a, e in zip(actual, expected)), step_index


def _bad(**change):
    call = _later_step(1)
    call.update(change)
    return dict(positions=call.pop("positions"), seq_lens=call.pop("seq_lens"), block_tables=_tables(),
                block_sizes=8, max_model_len=64, past_max_model_len="clamp", idx_mapping=t32([2, 0, 1]),
                cp_sharded=[True, False], cp_world_size=2, cp_rank=1, **call)


WRITTEN = ("positions", "seq_lens", "draft_tokens", "input_ids", "sample_positions", "next_hidden_states")


@pytest.mark.parametrize("change,argument", [
    (dict(target_seq_lens=t32([12, 63])), "target_seq_lens"),
    (dict(target_seq_lens=torch.tensor([12, 63, 64])), "target_seq_lens"),
    (dict(draft_tokens=torch.zeros(2, 3, dtype=torch.int64)), "draft_tokens"),
    (dict(draft_tokens=torch.zeros(3, 3)), "draft_tokens"),
    (dict(draft_tokens=torch.zeros(1, 3, dtype=torch.int64).expand(3, 3)), "draft_tokens"),
    (dict(sampled_tokens=torch.tensor([1, 2])), "sampled_tokens"),
    (dict(draft_tokens=None), "sampled_tokens"),
    (dict(sampled_tokens=None, draft_tokens=None), "input_ids"),
    (dict(input_ids=t32([0, 0])), "input_ids"),
    (dict(input_ids=torch.zeros(4)), "input_ids"),
    (dict(draft_step=torch.tensor([1])), "draft_step"),
    (dict(draft_step=torch.tensor(1.0)), "draft_step"),
    (dict(draft_step=None), "num_draft_steps"),
    (dict(num_draft_steps=0), "num_draft_steps"),
    (dict(num_draft_steps=2.5), "num_draft_steps"),
    (dict(sample_positions=torch.tensor([1, 2])), "sample_positions"),
    (dict(next_hidden_states=None), "hidden_states"),
    (dict(next_hidden_states=torch.zeros(5, 3)), "next_hidden_states"),
    (dict(next_hidden_states=torch.zeros(5, 2, dtype=torch.float16)), "next_hidden_states"),
    (dict(next_hidden_states=torch.zeros(2, 2)), "next_hidden_states"),
    (dict(hidden_states=torch.zeros(4)), "hidden_states"),
])
def test_bad_bookkeeping_names_the_argument(backend, change, argument):
    assert_rejected_without_writes(specops.advance_draft_step, _bad(**change), argument=argument,
                                   written=tuple(name for name in WRITTEN if _bad(**change).get(name) is not None))


def test_outputs_sharing_memory_are_rejected(backend):
    shared = _bad()
    shared["input_ids"] = shared["sample_positions"]
    assert_rejected_without_writes(specops.advance_draft_step, shared, argument="sample_positions",
                                   written=("positions", "seq_lens", "draft_tokens"))
    hidden = torch.zeros(6, 2)
    aliased = _bad(hidden_states=hidden[:4], next_hidden_states=hidden[2:])
    assert_rejected_without_writes(specops.advance_draft_step, aliased, argument="hidden_states",
                                   written=("positions", "seq_lens", "draft_tokens"))


def test_native_rejects_a_step_outside_the_drafts_and_writes_nothing():
    with specops.backend("native"):
        assert_rejected_without_writes(specops.advance_draft_step, _bad(draft_step=torch.tensor(3)),
                                       argument="draft_step", written=WRITTEN, errors=ValueError)


def test_the_device_paths_store_nothing_for_a_step_outside_the_drafts():
    from conftest import device_backends

    for name in device_backends():
        call = _bad(draft_step=torch.tensor(7), num_draft_steps=None)
        with specops.backend(name):
            specops.advance_draft_step(**call)
        assert call["draft_tokens"].tolist() == [[70, 0, 0], [80, 0, 0], [90, 0, 0]], name
        assert call["input_ids"].tolist() == [17, 18, 19, -1], name
