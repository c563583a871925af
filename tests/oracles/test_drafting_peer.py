"""The drafting layer's conventions that follow vllm-ascend's DSA draft metadata builders: the
decode / prefill split with is_prefilling, the zero padding rows of the local cos / sin, and the
peer's slot mapping format."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from drafting_cases import (
    COMPRESSED, FULL, ROT_DIM, SWA, assert_matches_definitions, make_builders, make_model, make_step)

from specops.drafting import CommonDraftInputs, GroupConfig, StepCache, build_draft_attn_metadata


def test_a_short_prefill_chunk_is_a_prefill():
    """vllm_ascend.attention.utils.split_decodes_and_prefills: with is_prefilling, a request
    still in its prompt is a prefill whatever its query length."""
    model = make_model(num_speculative_tokens=2)
    query_start_loc = torch.tensor([0, 2, 3, 9], dtype=torch.int32)
    seq_lens = torch.tensor([9, 2, 20], dtype=torch.int32)
    common = CommonDraftInputs(
        query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc.clone(), seq_lens=seq_lens,
        seq_lens_cpu=None, positions=torch.arange(9), num_reqs=3, num_actual_tokens=9, num_input_tokens=10,
        slot_mappings={"swa": torch.arange(9)}, is_prefilling=torch.tensor([False, True, False]))
    meta, = build_draft_attn_metadata(make_builders(model, [SWA]), common, draft_index=1)
    # Request 1 (one token, still prefilling) and request 2 (six tokens) are the prefills.
    assert (meta.num_decodes, meta.num_prefills, meta.num_decode_tokens, meta.num_prefill_tokens) == (1, 2, 2, 7)
    assert_matches_definitions(meta, model, SWA, common)
    common.is_prefilling = None
    meta, = build_draft_attn_metadata(make_builders(model, [SWA]), common, draft_index=1)
    assert (meta.num_decodes, meta.num_prefills, meta.num_decode_tokens, meta.num_prefill_tokens) == (2, 1, 3, 6)


def test_random_is_prefilling_matches_the_definition():
    rng = random.Random(28)
    model = make_model(2)
    builders = make_builders(model, [SWA, FULL])
    cache = StepCache()
    for _ in range(6):
        common = make_step(rng, [SWA, FULL], 2, num_reqs=rng.randint(1, 6))
        common.is_prefilling = torch.tensor([rng.random() < 0.4 for _ in range(common.num_reqs)], dtype=torch.bool)
        for group, meta in zip([SWA, FULL], build_draft_attn_metadata(builders, common, 1, cache=cache)):
            assert_matches_definitions(meta, model, group, common)
        # The flags are part of the cached entry's inputs: flipping one is seen.
        common.is_prefilling[0] = not bool(common.is_prefilling[0])
        for group, meta in zip([SWA, FULL], build_draft_attn_metadata(builders, common, 1, cache=cache)):
            assert_matches_definitions(meta, model, group, common)


def test_bad_is_prefilling_names_the_argument():
    model = make_model(2)
    common = make_step(random.Random(3), [SWA], 2, num_reqs=3)
    common.is_prefilling = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match="is_prefilling"):
        build_draft_attn_metadata(make_builders(model, [SWA]), common, 1)
    common.is_prefilling = torch.zeros(2, dtype=torch.bool)
    with pytest.raises(ValueError, match="is_prefilling"):
        build_draft_attn_metadata(make_builders(model, [SWA]), common, 1)


@pytest.mark.parametrize("cp_size", [1, 2, 3])
def test_local_cos_sin_padding_rows_are_zero(cp_size):
    """vllm-ascend's DSA draft metadata builders pad the local cos / sin with zero rows; the
    padded stream's cos / sin keep the RoPE cache's row 0."""
    rng = random.Random(cp_size)
    for cp_rank in range(cp_size):
        model = make_model(2, cp_size, cp_rank)
        common = make_step(rng, [SWA], 2, num_reqs=4)
        common.num_input_tokens = common.num_actual_tokens + 5
        meta, = build_draft_attn_metadata(make_builders(model, [SWA]), common, 1)
        assert_matches_definitions(meta, model, SWA, common)
        real = min(max(common.num_actual_tokens - meta.cp.local_start, 0), meta.cp.tokens_per_rank)
        assert real < meta.cp.tokens_per_rank or cp_rank < cp_size - 1
        assert not meta.local_cos[real:].any() and not meta.local_sin[real:].any()
        assert torch.equal(meta.cos[common.num_actual_tokens:],
                           model.rope_cos_sin_cache[0, :ROT_DIM // 2].expand(5, -1))


def test_slot_mapping_format_int32_actual_as_the_peer():
    """vllm-ascend's DSA draft builders hand the kernels an int32 slot mapping of the real tokens
    only; the default stays int64 [num_input_tokens, 2] with PAD rows."""
    peer = dataclasses.replace(COMPRESSED, name="c4_peer", slot_mapping_format="int32_actual")
    groups = [COMPRESSED, peer]
    rng = random.Random(5)
    model = make_model(2)
    builders = make_builders(model, groups)
    for _ in range(4):
        common = make_step(rng, groups, 2)
        common.slot_mappings["c4_peer"] = common.slot_mappings["c4"]
        default, actual = build_draft_attn_metadata(builders, common, 1)
        for group, meta in zip(groups, (default, actual)):
            assert_matches_definitions(meta, model, group, common)
        assert default.slot_mapping.dtype == torch.int64 and default.slot_mapping.shape == (common.num_input_tokens, 2)
        assert actual.slot_mapping.dtype == torch.int32 and actual.slot_mapping.shape == (common.num_actual_tokens, 2)
        assert torch.equal(actual.slot_mapping.long(), default.slot_mapping[:common.num_actual_tokens])
    with pytest.raises(ValueError, match="slot_mapping_format"):
        GroupConfig("bad", block_size=16, storage_block_size=16, sliding_window=None, slot_mapping_format="int16")
