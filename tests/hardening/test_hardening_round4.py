"""Hardening round 4 (docs/changelog.md, "Fourth round"): one family of tests per defect found.

1. The fused op read its per-thread scratch unfilled when no row was corrected (an empty
   prev_positions): a fuzz of prepare_spec_decode_inputs and PersistentMappings.prepare_step
   mixing n = 0 and n > 0 calls on one thread, against the unfused sequence.
2. A refresh with int32 slots wrote group 0, then rejected group 1: every multi-group path,
   every layout, rejected before the first write and naming slot_mappings[g].
3. The int64 limit: every op that adds to a position, at an accepted position of 2^63 - 1.
Items 6, 7, 9, 10 and 11 (the arguments' families) are in tests/hardening/test_hardening_round4_inputs.py;
item 8 (sizes an op allocates from) is a row of tests/hardening/test_bad_input_matrix.py; item 5 (the NPU
route's x86 run) lives in tests/ascend and tests/tooling/test_kernel_compile.py.
"""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from spec_decode_cases import assert_same_step, clone_outputs, clone_step, fresh_outputs, run_fused, run_unfused
from strategies import CorrectionInputs, assert_same, make_spec_decode_step

import specops
from specops import MappingGroup, PersistentMappings
from specops.ops.registry import OPS
from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens as reference_correction

PAD, NULL = specops.PAD_SLOT_ID, specops.NULL_BLOCK_ID
I32, I64 = torch.int32, torch.int64
INT64_MAX = 2**63 - 1


def i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def i64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I64)


# ---------------------------------------------------------------- 1. empty and full corrections


def _without_correction(step):
    """The step as the first one after a reset sees it: nothing in flight (an empty
    prev_positions), the counts already the corrected ones (so the tables cover them)."""
    corrected = step.correction.clone()
    reference_correction(OPS["correct_num_computed_tokens"].arguments(*corrected.args()))
    step.correction = CorrectionInputs(corrected.num_computed_tokens, corrected.num_accepted_tokens,
                                       corrected.prev_positions[:0], corrected.valid_sampled_token_count,
                                       corrected.prev_num_draft_tokens, corrected.cpu_num_computed_tokens)
    return step


@settings(max_examples=examples(25))
@given(calls=st.lists(st.tuples(st.integers(0, 9), st.booleans(), st.integers(0, 2**16)), min_size=2, max_size=6),
       groups=st.lists(st.sampled_from([(16, 1, True), (4, 2, True), (8, 1, False), (1, 1, True)]), min_size=0,
                       max_size=3),
       cp=st.sampled_from([(1, 0, 1), (2, 1, 1), (2, 0, 2)]), int32_slots=st.booleans(),
       with_idx_mapping=st.booleans(), extra=st.integers(0, 9))
def test_the_fused_op_over_empty_and_full_corrections_on_one_thread(backend, calls, groups, cp, int32_slots,
                                                                     with_idx_mapping, extra):
    """Once: native prepare_spec_decode_inputs with an empty prev_positions and requests in the
    batch stored positions, seq_lens and slots from the counts an earlier call on the thread left
    in its scratch ([500, 501, 502] for num_computed_tokens [40]). Each call here is compared
    with the unfused ops on clones of its inputs, run first, so the scratch the fused call finds
    is what the previous fused call (often one with every row corrected) left."""
    cp_world_size, cp_rank, cp_interleave = cp
    # The interleave must divide the allocation block of every sharded group.
    assume(all((block_size * kv_blocks) % cp_interleave == 0 for block_size, kv_blocks, sharded in groups if sharded))
    for num_reqs, empty, seed in calls:
        step = make_spec_decode_step(torch.Generator().manual_seed(seed), num_reqs=num_reqs, num_prev_rows=num_reqs,
                                     max_query_len=4, groups=groups, cp_world_size=cp_world_size,
                                     with_idx_mapping=with_idx_mapping)
        if empty:
            step = _without_correction(step)
        slot_dtypes = [I32 if int32_slots and g % 2 == 0 else I64 for g in range(len(groups))]
        outputs = fresh_outputs(step, step.num_tokens + extra, num_reqs + extra % 3, slot_dtypes=slot_dtypes)
        padding = dict(num_tokens_padded=step.num_tokens + extra, num_reqs_padded=num_reqs + extra % 3)
        unfused_step, unfused = clone_step(step), clone_outputs(outputs)
        run_unfused(unfused_step, unfused, cp_world_size, cp_rank, cp_interleave, **padding)
        run_fused(step, outputs, cp_world_size, cp_rank, cp_interleave, **padding)
        assert_same_step(step, outputs, unfused_step, unfused, f"{backend} n = {0 if empty else num_reqs}")


def test_the_reported_case_a_request_after_a_step_of_500():
    """The issue's numbers: after a step whose corrected count was 500, a request with
    num_computed_tokens [40] and nothing in flight gets positions [40, 41, 42], seq_lens [43]."""
    table = torch.arange(1, 41, dtype=I32).view(1, 40)
    with specops.backend("native"):
        specops.prepare_spec_decode_inputs(i32(400), i32(0), i32(0), i32(100), i32(0), i32(0), i32(0, 3), [table],
                                           16)
        result = specops.prepare_spec_decode_inputs(i32(40), i32(0), i32(), i32(), i32(), i32(40), i32(0, 3),
                                                    [table], 16)
    assert result.positions.tolist() == [40, 41, 42]
    assert result.seq_lens.tolist() == [43]
    assert result.slot_mappings[0].tolist() == [3 * 16 + 8, 3 * 16 + 9, 3 * 16 + 10]


def _step_mappings(slot_dtype: torch.dtype) -> PersistentMappings:
    """Two mapped groups and one without slots; every request row holds blocks for 96 positions."""
    groups = [MappingGroup(16), MappingGroup(4, blocks_per_kv_block=2), MappingGroup(8, slot_mapping_enabled=False)]
    mappings = PersistentMappings(groups, max_num_reqs=8, max_num_blocks_per_req=[6, 24, 12], max_num_tokens=48,
                                  slot_dtype=slot_dtype)
    for row in range(8):
        mappings.append_blocks(row, [[100 * row + c for c in range(6)], [200 * row + c for c in range(24)],
                                     [300 * row + c for c in range(12)]])
    mappings.apply_staged()
    return mappings


@settings(max_examples=examples(20))
@given(calls=st.lists(st.tuples(st.integers(0, 6), st.booleans(), st.integers(0, 2**16)), min_size=2, max_size=6),
       slot_dtype=st.sampled_from([I64, I32]))
def test_prepare_step_over_empty_and_full_corrections_against_the_unfused_sequence(calls, slot_dtype):
    """PersistentMappings.prepare_step (the fused op, then the gathers) after steps with and
    without rows in flight, against correct_num_computed_tokens, prepare_positions_and_seq_lens
    and a twin mappings' refresh, on the native backend (whose scratch this is about)."""
    with specops.backend("native"):
        mappings, twin = _step_mappings(slot_dtype), _step_mappings(slot_dtype)
        for num_reqs, empty, seed in calls:
            generator = torch.Generator().manual_seed(seed)
            rows = torch.randperm(8, generator=generator)[:num_reqs].to(I32)
            query_lens = torch.randint(1, 5, (num_reqs,), generator=generator)
            qsl = torch.cat([torch.zeros(1, dtype=I64), query_lens.cumsum(0)]).to(I32)
            # Counts below 80, so every corrected position lies in the rows' blocks.
            counts = torch.randint(0, 60, (num_reqs + 1,), dtype=I32, generator=generator)
            accepted = torch.randint(0, 4, (num_reqs + 1,), dtype=I32, generator=generator)
            host = torch.randint(60, 75, (num_reqs + 1,), dtype=I32, generator=generator)
            n = 0 if empty else num_reqs
            prev = torch.randint(-1, num_reqs + 1, (n,), dtype=I32, generator=generator)
            valid = torch.randint(0, 4, (num_reqs,), dtype=I32, generator=generator)
            drafts = torch.randint(0, 3, (num_reqs,), dtype=I32, generator=generator)
            inputs = [counts, accepted, prev, valid, drafts, host]
            twin_inputs = [t.clone() for t in inputs]
            padded = dict(num_reqs_padded=num_reqs + 1, num_tokens_padded=int(qsl[-1]) + 3)
            step = mappings.prepare_step(*inputs, qsl, rows, **padded)
            specops.correct_num_computed_tokens(*twin_inputs)
            specops.prepare_positions_and_seq_lens(twin_inputs[0], qsl, positions=twin.positions,
                                                   seq_lens=twin.seq_lens, **padded)
            twin.refresh(rows, qsl, twin.positions, **padded)
            what = f"n = {n}, R = {num_reqs}"
            for actual, expected in zip(inputs[:2], twin_inputs[:2]):
                assert_same(actual, expected, f"{what}: counts")
            assert_same(step.positions, twin.positions[: padded["num_tokens_padded"]], f"{what}: positions")
            assert_same(step.seq_lens, twin.seq_lens[: padded["num_reqs_padded"]], f"{what}: seq_lens")
            for g in range(3):
                assert_same(mappings.slot_mappings[g], twin.slot_mappings[g], f"{what}: slot_mappings[{g}]")
                assert_same(mappings.block_tables[g], twin.block_tables[g], f"{what}: block_tables[{g}]")


# ---------------------------------------------------------------- 2. int32 refreshes, all or nothing

BIG = 2**28  # a block id whose slots (block size 16) pass 2^31 - 1


def _int32_mappings(kinds: tuple[str, ...]) -> PersistentMappings:
    """Groups of the given kinds; the group of kind "big" holds block ids past what int32 slots
    reach, every row blocks for positions below 32."""
    make = {"full": lambda g: MappingGroup(16, name=f"g{g}"), "big": lambda g: MappingGroup(16, name=f"g{g}"),
            "swa": lambda g: MappingGroup(8, sliding_window_reach=4, name=f"g{g}"),
            "off": lambda g: MappingGroup(16, slot_mapping_enabled=False, name=f"g{g}")}
    groups = [make[kind](g) for g, kind in enumerate(kinds)]
    mappings = PersistentMappings(groups, max_num_reqs=3, max_num_blocks_per_req=4, max_num_tokens=8,
                                  slot_dtype=I32)
    for row in range(3):
        mappings.append_blocks(row, [[BIG + row, BIG + 5] if kind == "big" else
                                     [10 * row + 1, 10 * row + 2, 10 * row + 3, 10 * row + 4][: 32 // group.block_size]
                                     for kind, group in zip(kinds, groups)])
    mappings.apply_staged()
    return mappings


def _owned(mappings: PersistentMappings) -> list[torch.Tensor]:
    return [t.clone() for t in (*mappings.source_block_tables, *mappings.num_blocks, *mappings.block_tables,
                                *mappings.slot_mappings, mappings.positions, mappings.seq_lens,
                                mappings.draft_positions)]


def _unchanged(mappings: PersistentMappings, before: list[torch.Tensor]) -> bool:
    return all(torch.equal(a, b) for a, b in zip(_owned(mappings), before))


INT32_LAYOUTS = [("full", "big"), ("off", "full", "big"), ("big", "full"), ("swa", "full", "big"), ("swa", "big"),
                 ("big",), ("off", "big"), ("full", "off", "big", "swa")]


def _refresh(mappings, windowed):
    extra = dict(num_computed_tokens=i32(4, 9, 0)) if windowed else {}
    mappings.refresh(i32(2, 0), i32(0, 3, 5), i64(4, 5, 6, 9, 10), num_reqs_padded=3, num_tokens_padded=6, **extra)


def _prepare_step(mappings, windowed):
    mappings.prepare_step(i32(4, 9), i32(0, 0), i32(), i32(), i32(), i32(4, 9), i32(0, 3, 5), i32(2, 0),
                          num_reqs_padded=3, num_tokens_padded=6)


def _draft_step(mappings, windowed):
    mappings.advance_draft_step(i32(2, 0), max_model_len=64)  # from draft_positions [7, 20]


PATHS = {"refresh": _refresh, "refresh with windows": lambda m, w: _refresh(m, True), "prepare_step": _prepare_step,
         "advance_draft_step": _draft_step}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("kinds", INT32_LAYOUTS, ids=["-".join(k) for k in INT32_LAYOUTS])
def test_an_int32_slot_past_2_31_is_rejected_before_any_group_is_written(path, kinds):
    """Once: refresh with int32 slots rewrote group 0's slot mapping, then rejected group 1
    (naming compute_slot_mapping's `out`), and the gathers never ran. Every path that writes
    several groups now checks every group's slots first and names the group's slot mapping."""
    with specops.backend("native"):
        mappings = _int32_mappings(kinds)
        mappings.slot_mappings[0].fill_(77)  # stale values a half-done call would overwrite
        mappings.block_tables[-1].fill_(66)
        mappings.draft_positions[:2] = i64(7, 20)
        before = _owned(mappings)
        big = kinds.index("big")
        with pytest.raises(ValueError, match=rf"slot_mappings\[{big}\] is int32") as error:
            PATHS[path](mappings, False)
        assert "out" not in str(error.value).split(), str(error.value)
        assert _unchanged(mappings, before), f"{path} {kinds} wrote before it rejected: {error.value}"


@pytest.mark.parametrize("backend_name", device_backends())
def test_device_paths_write_pad_for_such_a_slot(backend_name):
    with specops.backend(backend_name):
        mappings = _int32_mappings(("full", "big"))
        _refresh(mappings, False)
    assert (mappings.slot_mappings[1][:5] == PAD).all()
    assert mappings.slot_mappings[0][:5].tolist() == [16 * 21 + 4, 16 * 21 + 5, 16 * 21 + 6, 16 * 1 + 9, 16 * 1 + 10]


# ---------------------------------------------------------------- 3. positions at the int64 limit


@pytest.mark.parametrize("rule,position,seq_len", [("reset", 0, 1), ("clamp", 99, 100)])
@pytest.mark.parametrize("gathered", [False, True])
def test_advance_draft_step_at_the_last_int64_position(backend, rule, position, seq_len, gathered):
    """Once: -2^63 on every backend (the +1 wrapped), under both rules; the rules
    (docs/step_bookkeeping.md, "advance_draft_step") give 0 ("reset": seq_len 1, slot PAD) and
    L - 1 ("clamp": its slot), as for any p >= L."""
    table = torch.arange(1, 15, dtype=I32).view(2, 7)  # row 1: blocks 8..14
    positions = i64(INT64_MAX, 5) if not gathered else i64(3, INT64_MAX, 8)
    extra = dict(token_indices=i32(1, 2)) if gathered else {}
    seq_lens = i32(50, 6)
    step = specops.advance_draft_step(positions, seq_lens, [table], 16, max_model_len=100, past_max_model_len=rule,
                                      **extra)
    after = 9 if gathered else 6
    assert step.positions.tolist() == [position, after]
    assert seq_lens.tolist() == [seq_len if rule == "reset" else 51, 7]
    slot = PAD if rule == "reset" else 7 * 16 + 99 % 16  # position 99: column 6, block id 7
    assert step.slot_mappings[0].tolist() == [slot, 8 * 16 + after]


def test_expand_parallel_draft_inputs_at_the_last_int64_position(backend):
    """Once: native UBSan abort (start + nv + S - 1, the last kept position's bound). Positions
    past 2^63 - 1 exist in no backend's output: every backend writes the int64 add's wrapped value
    alike, and their slots are PAD (at or past max_model_len)."""
    call = dict(target_token_ids=i32(11), target_positions=i64(INT64_MAX), next_token_ids=i32(14),
                query_start_loc=i32(0, 1), block_tables=[torch.arange(1, 5, dtype=I32).view(1, 4)], block_sizes=16,
                slots_per_request=3, max_model_len=64, parallel_drafting_token_id=999, seq_lens=i32(10))
    result = specops.expand_parallel_draft_inputs(**call)
    wrapped = [INT64_MAX, -(2**63), -(2**63) + 1]
    assert result.positions.tolist() == wrapped
    assert result.slot_mappings[0].tolist() == [PAD] * 3
    assert result.input_ids.tolist() == [14, 999, 999]


def test_expand_rejects_positions_that_cannot_be_consecutive_at_the_limit():
    """start + j past int64 is no int64 position: the host op says which, without overflowing."""
    call = dict(target_token_ids=i32(11, 12), target_positions=i64(INT64_MAX, -(2**63)), next_token_ids=i32(14),
                query_start_loc=i32(0, 2), block_tables=[torch.arange(1, 5, dtype=I32).view(1, 4)], block_sizes=16,
                slots_per_request=3, max_model_len=64, parallel_drafting_token_id=999)
    with specops.backend("native"), pytest.raises(ValueError, match=r"must be 9223372036854775808: the positions"):
        specops.expand_parallel_draft_inputs(**call)


def test_pcp_local_inputs_at_the_last_int64_position(backend):
    """Once: native UBSan abort (last + 1 for the seq_len). seq_lens keep the low 32 bits of the
    sum on every backend, as for any int64 position past int32."""
    result = specops.pcp_local_inputs(i32(5, 6), i64(3, INT64_MAX), torch.tensor([0, 1]), i32(0, 1, 2),
                                      num_local_tokens=2)
    assert result.positions.tolist() == [3, INT64_MAX]
    assert result.seq_lens.tolist() == [4, 0]


def test_compute_slot_mapping_rejects_the_last_int64_position():
    with specops.backend("native"), pytest.raises(ValueError, match="positions"):
        specops.compute_slot_mapping(i32(0, 1), i64(INT64_MAX), i32(1, 2).view(1, 2), 16)
