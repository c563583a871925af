"""Hardening round 4 (docs/hardening.md, "Fourth round"): one family of tests per defect found.

1. The fused op read its per-thread scratch unfilled when no row was corrected (an empty
   prev_positions): a fuzz of prepare_spec_decode_inputs and PersistentMappings.prepare_step
   mixing n = 0 and n > 0 calls on one thread, against the unfused sequence.
2. A refresh with int32 slots wrote group 0, then rejected group 1: every multi-group path,
   every layout, rejected before the first write and naming slot_mappings[g].
3. The int64 limit: every op that adds to a position, at an accepted position of 2^63 - 1.
6. PCPLayout.copy_to into buffers that share memory.
7. ModelConfig's index_topk.
9. store_kv_block_metadata's reference on host tensors raises like the native op.
10. An optional output that its inputs do not turn on is None and not computed.
11. Bools where ints belong; an empty NumPy-made table; _C.items over a key list that changes.

Item 8 (sizes an op allocates from) is a row of tests/test_bad_input_matrix.py; item 5 (the NPU
route's x86 run) lives in tests/ascend.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import BACKENDS, REPORT, device_backends, examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from spec_decode_cases import assert_same_step, clone_outputs, clone_step, fresh_outputs, run_fused, run_unfused
from strategies import CorrectionInputs, assert_same, make_spec_decode_step

import specops
from specops import MappingGroup, PersistentMappings
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
    reference_correction(*corrected.args())
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
    """Once: -2^63 on every backend (the +1 wrapped), under both rules; SPEC 3.7.5's formulas give
    0 ("reset": seq_len 1, slot PAD) and L - 1 ("clamp": its slot), as for any p >= L."""
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


# ---------------------------------------------------------------- 6. copy_to into shared memory


def _layout():
    return specops.pcp_partition(i32(7), i32(0), torch.tensor([True]), 2)


@pytest.mark.parametrize("share", ["gather over restore", "restore over gather", "mask inside gather",
                                   "a layout tensor"])
def test_pcp_layout_copy_to_rejects_buffers_that_share_memory(share):
    """Once: one buffer for padded_gather_idx and hidden_restore_idx, and the restore index
    overwrote the gather index, silently."""
    layout = _layout()
    buffer = torch.full((20,), -5, dtype=I64)
    given = {"gather over restore": dict(padded_gather_idx=buffer[:8], hidden_restore_idx=buffer[4:11]),
             "restore over gather": dict(padded_gather_idx=buffer[2:10], hidden_restore_idx=buffer[:7]),
             "mask inside gather": dict(padded_gather_idx=buffer[:8],
                                        gathered_kv_write_mask=buffer.view(torch.bool)[8:16]),
             "a layout tensor": dict(padded_gather_idx=buffer[:8], hidden_restore_idx=layout.padded_gather_idx[:7])}
    call = given[share]
    names = [name for name in call]
    before = buffer.clone(), layout.padded_gather_idx.clone(), layout.hidden_restore_idx.clone()
    with pytest.raises(ValueError, match="must not share memory") as error:
        layout.copy_to("cpu", **call)
    assert any(name in str(error.value) for name in names)
    assert all(torch.equal(a, b) for a, b in zip(before, (buffer, layout.padded_gather_idx, layout.hidden_restore_idx)))
    apart = layout.copy_to("cpu", padded_gather_idx=buffer[:8], hidden_restore_idx=buffer[8:15])
    assert apart.padded_gather_idx.tolist() == layout.padded_gather_idx.tolist()
    assert apart.hidden_restore_idx.tolist() == layout.hidden_restore_idx.tolist()


# ---------------------------------------------------------------- 7. index_topk


def _model(**kwargs):
    from specops.drafting import ModelConfig

    return ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=torch.zeros(64, 64),
                       num_speculative_tokens=2, **kwargs)


def _c4_group():
    from specops.drafting import GroupConfig

    return GroupConfig(name="c4", block_size=16, storage_block_size=128, sliding_window=128, compress_ratio=4)


def test_index_topk_is_checked_where_the_model_meets_a_c4_group():
    """Once: index_topk=256 with a C4 group passed configuration and the first build failed naming
    cmp_topk, which the caller never passed; index_topk=0 (the kernels' "no top-k") was rejected."""
    from specops.drafting import DraftMetadataBuilder

    for topk in (0, 512, 1024):
        DraftMetadataBuilder(_model(index_topk=topk), _c4_group(), max_num_reqs=2, max_num_tokens=8)
    with pytest.raises(ValueError, match=r"index_topk must be one of \[0, 512, 1024\] for group 'c4'"):
        DraftMetadataBuilder(_model(index_topk=256), _c4_group(), max_num_reqs=2, max_num_tokens=8)
    _model(index_topk=2048)  # the indexer's own (DeepSeek-V3.2) value: no C4 group reads it
    for topk in (-1, 2**31, True, 512.0):
        with pytest.raises(ValueError, match="index_topk"):
            _model(index_topk=topk)


# ---------------------------------------------------------------- 9. store_kv_block_metadata's host checks

HOST_BACKENDS = [name for name in ("native", "reference") if REPORT[name] == "usable"]


@pytest.mark.parametrize("slots,capacity,name", [([14, 15, 16, 40, 41, 42], 2, "group_len"),
                                                 ([14, 2**31 - 1, 16], 3, r"slot_mapping\[1\]")])
def test_store_kv_block_metadata_rejects_alike_on_host_tensors(slots, capacity, name):
    """Once: the reference wrote the first `capacity` runs and returned where the native op
    raises (101 of 800 random calls against the AI-CPU kernel's code)."""
    messages = {}
    for backend_name in HOST_BACKENDS:
        outputs = [torch.full((capacity,), 7, dtype=I32) for _ in range(3)]
        with specops.backend(backend_name), pytest.raises(ValueError, match=name) as error:
            specops.store_kv_block_metadata(torch.tensor(slots, dtype=I32), *outputs, block_size=16)
        assert all((out == 7).all() for out in outputs), f"{backend_name} wrote before it rejected"
        messages[backend_name] = str(error.value)
    assert len(set(messages.values())) == 1, messages


@settings(max_examples=examples(60))
@given(slots=st.lists(st.integers(-2, 40), min_size=1, max_size=24), capacity=st.integers(1, 12),
       block_size=st.sampled_from([1, 4, 16]))
def test_store_kv_block_metadata_native_and_reference_agree_on_every_capacity(slots, capacity, block_size):
    results = {}
    for backend_name in HOST_BACKENDS:
        outputs = [torch.full((capacity,), 7, dtype=I32) for _ in range(3)]
        try:
            with specops.backend(backend_name):
                specops.store_kv_block_metadata(torch.tensor(slots, dtype=I32), *outputs, block_size=block_size)
            results[backend_name] = [out.tolist() for out in outputs]
        except ValueError as error:
            results[backend_name] = str(error)
    assert len({repr(result) for result in results.values()}) == 1, results


# ---------------------------------------------------------------- 10. optional outputs not turned on


def _expand_call(**change):
    call = dict(target_token_ids=i32(11, 12, 13), target_positions=i64(7, 8, 9), next_token_ids=i32(14),
                query_start_loc=i32(0, 3), block_tables=[torch.arange(1, 5, dtype=I32).view(1, 4)], block_sizes=16,
                slots_per_request=3, max_model_len=64, parallel_drafting_token_id=999)
    call.update(change)
    return call


def test_expand_leaves_out_seq_lens_without_seq_lens(backend):
    """Once: `out_seq_lens needs seq_lens` when a runner passed its persistent out_seq_lens on a
    step without seq_lens (20 of 150 random calls against vLLM's kernels)."""
    buffer = i32(5, 5, 5)
    result = specops.expand_parallel_draft_inputs(**_expand_call(out_seq_lens=buffer))
    assert result.seq_lens is None and buffer.tolist() == [5, 5, 5]
    with_lens = specops.expand_parallel_draft_inputs(**_expand_call(out_seq_lens=buffer, seq_lens=i32(10)))
    assert with_lens.seq_lens is buffer and buffer.tolist() == [12, 0, 0]  # padded to its end
    assert result.positions.tolist() == with_lens.positions.tolist()


def test_expand_leaves_out_hidden_state_mapping_without_the_shift(backend):
    buffer = torch.full((3,), 5, dtype=I32)
    result = specops.expand_parallel_draft_inputs(**_expand_call(hidden_state_mapping=buffer, shift_input_ids=False))
    assert result.hidden_state_mapping is None and buffer.tolist() == [5, 5, 5]
    assert result.input_ids.tolist()[:5] == [11, 12, 13, 14, 999]


def test_prepare_next_token_ids_leaves_out_the_padded_outputs_without_drafts(backend):
    rejected, indices = torch.full((2,), 5, dtype=I32), torch.full((2,), 5, dtype=I32)
    result = specops.prepare_next_token_ids(i32(3, 4, 9, 9).view(2, 2), 8, backup_next_token_ids=i32(1, 2),
                                            num_rejected_tokens=rejected, token_indices_to_sample=indices)
    assert result.num_rejected_tokens is None and result.token_indices_to_sample is None
    assert rejected.tolist() == [5, 5] and indices.tolist() == [5, 5]
    assert result.next_token_ids.tolist() == [4, 2]


def _input_ids_call(**change):
    call = dict(input_ids=torch.zeros(4, dtype=I32), idx_mapping=i32(0, 1), query_start_loc=i32(0, 2, 4),
                num_computed_tokens=i32(30, 40), prefill_len=i32(5, 5), last_sampled_tokens=i64(7, 8),
                draft_tokens=i64(21, 22, 31, 32).view(2, 2), cu_num_logits=i32(0, 2, 4), num_new_sampled_tokens=0)
    call.update(change)
    return call


@pytest.mark.parametrize("num_logits,num_logits_padded,size", [(None, None, 4), (6, None, 6), (6, 5, 6), (None, 4, 4)])
def test_prepare_input_ids_sizes_absent_logits_outputs_by_num_logits(backend, num_logits, num_logits_padded, size):
    """SPEC 3.7.1: absent outputs get num_logits entries (default cu_num_logits[R]); the wrapper
    sized them by num_logits_padded (6 of 200 random calls)."""
    result = specops.prepare_input_ids(**_input_ids_call(num_logits=num_logits, num_logits_padded=num_logits_padded))
    for out in result:
        assert out.numel() == size
    assert result.logits_indices.tolist()[:4] == [0, 1, 2, 3]
    padded = num_logits_padded or size  # the padding stops at num_logits_padded
    assert result.expanded_idx_mapping.tolist()[4:padded] == [-1] * (padded - 4)


# ---------------------------------------------------------------- 11. bools, empty tables, key lists


@pytest.mark.parametrize("value", [True, False, np.bool_(True), torch.tensor(True)], ids=repr)
def test_a_bool_is_not_an_int_on_any_path(backend, value):
    """Once: advance_draft_step(max_model_len=True) ran as max_model_len 1, on every backend (and
    PersistentMappings.advance_draft_step reused the sizes it had cached for 1: True hashes as 1).
    tests/test_bad_input_matrix.py puts True in every int argument of every op."""
    with pytest.raises(ValueError, match="max_model_len must be an int"):
        specops.advance_draft_step(i64(5), i32(6), [i32(1, 2).view(1, 2)], 16, max_model_len=value)
    with specops.backend("native" if "native" in BACKENDS else backend):
        mappings = PersistentMappings([MappingGroup(16)], max_num_reqs=2, max_num_blocks_per_req=2, max_num_tokens=4)
        mappings.advance_draft_step(i32(0), max_model_len=1)
        with pytest.raises(ValueError, match="max_model_len must be an int"):
            mappings.advance_draft_step(i32(0), max_model_len=value)
    with pytest.raises(ValueError, match="block_size"):
        MappingGroup(value)


def test_the_native_fast_path_rejects_a_bool_int_in_its_words(backend):
    """FastOp (the wrappers' native entry) and checked_int (the Python backends') say the same."""
    with pytest.raises(ValueError, match="block_size must be an int, got bool True"):
        specops.compute_slot_mapping(i32(0, 1), i64(3), i32(1, 2).view(1, 2), True)


@pytest.mark.parametrize("shape", [(0, 4), (0, 0), (4, 0)])
def test_an_empty_numpy_table_is_taken(backend, shape):
    """NumPy makes empty arrays with strides [0, 0]; such a table holds no element to lay out and
    is taken as any empty table (it was rejected as not contiguous)."""
    table = torch.from_numpy(np.empty(shape, dtype=np.int32))
    assert table.stride() == (0, 0)
    out = specops.compute_slot_mapping(i32(0, 0), torch.zeros(0, dtype=I64), table, 16)
    assert out.numel() == 0
    rows = shape[0]
    gathered = torch.full((2, shape[1]), 9, dtype=I32) if shape[1] else torch.zeros((2, 0), dtype=I32)
    specops.gather_block_tables(table, torch.zeros(max(rows, 1), dtype=I32)[:rows], i32(-1, -1), gathered)
    assert (gathered == NULL).all()


class _Key(str):
    """A key whose hash runs Python that clears the key list being looked up."""

    victims: list = []

    def __hash__(self):
        for victim in self.victims:
            victim.clear()
            victim.extend([_Key("x")] * 1000)
        return str.__hash__(self)


@pytest.mark.skipif(not specops.EXTENSION.loaded, reason="the C-API lookups need the extension")
def test_item_lookups_survive_a_key_list_that_changes_under_them():
    """_C.items / items_each read the key list's item array while a lookup runs Python (a key's
    __hash__, a mapping's __getitem__), which could resize or free that array. They read a tuple
    of the keys now: the lookups see the keys as the call found them."""
    from specops import _C

    mapping = {"a": 1, "b": 2, "x": 3}
    keys = [_Key("a"), _Key("b"), _Key("a")]
    _Key.victims = [keys]
    assert _C.items(mapping, keys) == [1, 2, 1]
    key_lists = [[_Key("b"), _Key("a")], [_Key("a")]]
    _Key.victims = [key_lists, key_lists[0]]
    assert _C.items_each(mapping, key_lists) == [[2, 1], [1]]
    _Key.victims = []
    assert _C.items(mapping, ("a", "b")) == [1, 2]
    with pytest.raises(KeyError):
        _C.items(mapping, ["a", "missing"])
