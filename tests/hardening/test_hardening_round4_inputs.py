"""Hardening round 4 (docs/changelog.md, "Fourth round"), the arguments' families: one family of
tests per defect (tests/hardening/test_hardening_round4.py has the first three).

6. PCPLayout.copy_to into buffers that share memory.
7. ModelConfig's index_topk (and index_n_heads) where the model meets a C4 group.
9. store_kv_block_metadata's reference on host tensors raises like the native op.
10. An optional output that its inputs do not turn on is None and not computed.
11. Bools where ints belong; an empty NumPy-made table; _C.items over a key list that changes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import BACKENDS, REPORT, examples
from hypothesis import given, settings
from hypothesis import strategies as st

import specops
from specops import MappingGroup, PersistentMappings

NULL = specops.NULL_BLOCK_ID
I32, I64 = torch.int32, torch.int64


def i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I32)


def i64(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=I64)


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
                       num_speculative_tokens=2, num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1",
                       **kwargs)


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
    with pytest.raises(ValueError, match=r"index_n_heads must be 64 for group 'c4'"):
        DraftMetadataBuilder(_model(index_n_heads=32), _c4_group(), max_num_reqs=2, max_num_tokens=8)
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
    """docs/step_bookkeeping.md, "Optional outputs": absent outputs get num_logits entries
    (default cu_num_logits[R]); the wrapper sized them by num_logits_padded (6 of 200 random
    calls)."""
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
    tests/hardening/test_bad_input_matrix.py puts True in every int argument of every op."""
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
