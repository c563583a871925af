"""The drafting layer's shared cache: it equals building alone, what invalidates an entry,
draft-index isolation, sas_metadata reuse, device-to-host syncs, stable addresses, steady-state
allocations and the fresh-cache paths. The shared inputs are in drafting_cases.py."""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest
import torch
from drafting_cases import (
    ALL_GROUPS,
    COMPRESSED,
    DSPARK,
    FULL,
    MAX_NUM_REQS,
    MAX_NUM_TOKENS,
    SWA,
    SWA_OTHER_WINDOW,
    _metadata_tensors,
    assert_matches_definitions,
    assert_same_metadata,
    make_builders,
    make_model,
    make_step,
)
from host_syncs import OpLog

import specops
from specops import drafting
from specops.drafting import (
    DRAFT_NAMESPACE,
    CommonDraftInputs,
    DraftMetadataBuilder,
    StepCache,
    build_draft_attn_metadata,
)
from specops.drafting import naive


# ---------------------------------------------------------------- the shared cache


def test_shared_cache_equals_building_alone():
    rng = random.Random(3)
    for step in range(40):
        cp_size = rng.choice([1, 2, 4])
        model = make_model(rng.randint(1, 4), cp_size, rng.randrange(cp_size))
        groups = rng.sample(ALL_GROUPS, rng.randint(3, len(ALL_GROUPS)))
        common = make_step(rng, groups, model.num_speculative_tokens)
        shared_builders, alone_builders = make_builders(model, groups), make_builders(model, groups)
        draft_index = rng.randint(1, model.num_speculative_tokens)
        cache = StepCache()
        shared = build_draft_attn_metadata(shared_builders, common, draft_index, cache=cache)
        alone = [builder.build_for_drafting(common, draft_index) for builder in alone_builders]
        # Without a runner's cache the step shares within itself: the same results again.
        own = build_draft_attn_metadata(make_builders(model, groups), common, draft_index)
        for group, with_cache, without, within in zip(groups, shared, alone, own):
            assert_same_metadata(with_cache, without, f"step {step} {group.name}")
            assert_same_metadata(within, without, f"step {step} {group.name}, the step's own cache")
        # Every later group hits the group-invariant entry; a group with a sliding window looks up
        # its sas_metadata, a hit when an earlier one has its window.
        windows = [naive.step_window(g, model.num_speculative_tokens, common.causal) for g in groups if g.sliding_window]
        sas_hits = sum(window in windows[:index] for index, window in enumerate(windows))
        assert (cache.hits, cache.misses) == (len(groups) - 1 + sas_hits, 1 + len(windows) - sas_hits)
        if step % 10 == 0:
            for group, meta in zip(groups, shared):
                assert_matches_definitions(meta, model, group, common)


def test_a_hit_shares_the_tensors():
    model = make_model()
    groups = [SWA, FULL, COMPRESSED, DSPARK]
    common = make_step(random.Random(0), groups, 3, num_reqs=8)
    common.causal = True
    first, full, compressed, dspark = build_draft_attn_metadata(make_builders(model, groups), common, 1)
    for later in (full, compressed, dspark):
        for name in ("input_positions", "cos", "sin", "cp", "local_cos", "local_sin", "start_pos", "seq_lens_cpu"):
            assert getattr(later, name) is getattr(first, name), name
        assert later.slot_mapping.data_ptr() != first.slot_mapping.data_ptr()
    assert compressed.sas_metadata is None and full.sas_metadata is None  # no sliding window
    assert dspark.sas_metadata is first.sas_metadata  # both (23, 0)
    # On a non-causal step DSpark sees its draft block past the window: (23 + 3, 0), its own.
    common.causal = False
    first, full, compressed, dspark = build_draft_attn_metadata(make_builders(model, groups), common, 1)
    assert dspark.cos is first.cos and dspark.window == (26, 0) and full.sas_metadata is None
    assert dspark.sas_metadata.data_ptr() != first.sas_metadata.data_ptr()


@pytest.mark.parametrize("changed", ["positions", "seq_lens", "query_start_loc", "query_start_loc_cpu",
                                     "seq_lens_cpu", "rope_cos_sin_cache", "num_input_tokens", "causal"])
def test_an_input_changed_between_groups_forces_recomputation(changed):
    """A runner advances positions (and seq_lens) in place for the next draft step; a group
    built after that must not read the entry of the old values."""
    model = make_model()
    groups = [SWA, DSPARK, COMPRESSED]
    common = make_step(random.Random(5), groups, 3, num_reqs=8, host_seq_lens=True)
    builders = make_builders(model, groups)
    cache = StepCache()
    first = builders[0].build_for_drafting(common, 1, cache)
    first_values = {name: t.clone() for name, t in _metadata_tensors(first).items()}
    if changed == "num_input_tokens":
        common.num_input_tokens += 1
    elif changed == "causal":
        common.causal = not common.causal
    elif changed == "rope_cos_sin_cache":
        model.rope_cos_sin_cache.mul_(2)
    elif changed in ("query_start_loc", "query_start_loc_cpu"):
        getattr(common, changed).mul_(1)  # same values, new _version: the cache cannot tell, so it recomputes
    else:
        getattr(common, changed).add_(1)
    hits, misses = cache.hits, cache.misses
    later = [builder.build_for_drafting(common, 1, cache) for builder in builders[1:]]
    # DSpark recomputes the invariant and its sas (the window of swa, stored for the old inputs);
    # c4 shares DSpark's new invariant and has no sas_metadata.
    assert (cache.hits - hits, cache.misses - misses) == (1, 2)
    for builder, meta in zip(builders[1:], later):
        assert_same_metadata(meta, make_builders(model, [builder.group])[0].build_for_drafting(common, 1), builder.group.name)
    # The first group's metadata keeps the values it was built from (seq_lens_cpu is the runner's own tensor).
    for name, tensor in _metadata_tensors(first).items():
        if not (name == "seq_lens_cpu" and changed == "seq_lens_cpu"):
            assert torch.equal(tensor, first_values[name]), name


def test_the_stale_data_check_sees_a_cache_that_ignores_versions(monkeypatch):
    """Break the fingerprint on purpose (it ignores in-place changes): the group built after
    positions advanced then reads the stale entry, and the comparison catches it."""
    model = make_model()
    common = make_step(random.Random(5), [SWA, COMPRESSED], 3, num_reqs=8)
    first, second = make_builders(model, [SWA, COMPRESSED])
    monkeypatch.setattr(drafting.step, "fingerprint", lambda common, rope_cache: (common.num_reqs,))
    cache = StepCache()
    first.build_for_drafting(common, 1, cache)
    common.positions.add_(1)
    stale = second.build_for_drafting(common, 1, cache)
    fresh = make_builders(model, [COMPRESSED])[0].build_for_drafting(common, 1)
    with pytest.raises(AssertionError, match="input_positions"):
        assert_same_metadata(stale, fresh)


def test_an_input_rewritten_by_a_specops_op_between_groups_forces_recomputation(backend):
    """Once served stale: specops ops did not bump the version of what they wrote, so positions and
    seq_lens rewritten by prepare_positions_and_seq_lens between two groups looked unchanged."""
    model = make_model()
    groups = [SWA, COMPRESSED]
    common = make_step(random.Random(5), groups, 3, num_reqs=8, host_seq_lens=False, oversized=False)
    first, second = make_builders(model, groups)
    cache = StepCache()
    first.build_for_drafting(common, 1, cache)
    num_computed_tokens = common.seq_lens - (common.query_start_loc[1:] - common.query_start_loc[:-1]) + 1
    specops.prepare_positions_and_seq_lens(num_computed_tokens, common.query_start_loc, positions=common.positions,
                                           seq_lens=common.seq_lens)  # every position and seq_len one later
    misses = cache.misses
    later = second.build_for_drafting(common, 1, cache)
    assert cache.misses > misses
    assert_same_metadata(later, make_builders(model, [COMPRESSED])[0].build_for_drafting(common, 1))


def test_a_numpy_write_is_invisible_until_the_cache_is_invalidated():
    """A write through a NumPy view bypasses the version counter: the fingerprint cannot see it
    (documented), and invalidate() is the remedy."""
    model = make_model()
    groups = [SWA, COMPRESSED]
    common = make_step(random.Random(5), groups, 3, num_reqs=8, oversized=False)
    first, second = make_builders(model, groups)
    cache = StepCache()
    first.build_for_drafting(common, 1, cache)
    common.positions.numpy()[:] += 1
    fresh = make_builders(model, [COMPRESSED])[0].build_for_drafting(common, 1)
    with pytest.raises(AssertionError, match="input_positions"):
        assert_same_metadata(second.build_for_drafting(common, 1, cache), fresh)
    cache.invalidate()
    assert len(cache) == 0
    assert_same_metadata(second.build_for_drafting(common, 1, cache), fresh)


def test_an_entry_whose_buffers_were_rewritten_is_not_served():
    """A dummy run between two groups of a real step rewrites the first group's buffers; the
    second group must recompute rather than share them."""
    model = make_model()
    groups = [SWA, COMPRESSED, DSPARK]
    rng = random.Random(9)
    real, dummy = make_step(rng, groups, 3, num_reqs=8), make_step(rng, groups, 3, num_reqs=5)
    builders = make_builders(model, groups)
    cache = StepCache()
    first = builders[0].build_for_drafting(common=real, draft_index=1, shared=cache)
    build_draft_attn_metadata(builders, dummy, 1, dummy_run=True)
    later = builders[1].build_for_drafting(real, 1, cache)
    assert_same_metadata(later, make_builders(model, [COMPRESSED])[0].build_for_drafting(real, 1))
    assert later.cos.data_ptr() != first.cos.data_ptr()  # its own buffers, not the rewritten ones


def test_draft_indices_never_share_entries():
    model = make_model()
    groups = [SWA, FULL, DSPARK]
    common = make_step(random.Random(2), groups, 3, num_reqs=8, host_seq_lens=True)
    common.causal = True  # DSpark then shares swa's sas_metadata
    builders = make_builders(model, groups)
    cache = StepCache()  # one cache for the whole step, every draft index
    first_index = build_draft_attn_metadata(builders, common, 1, cache=cache)
    snapshot = [{name: t.clone() for name, t in _metadata_tensors(meta).items()} for meta in first_index]
    hits = cache.hits
    common.positions.add_(1)
    common.seq_lens.add_(1)
    second_index = build_draft_attn_metadata(builders, common, 2, cache=cache)
    assert cache.hits == hits + (len(groups) - 1) + 1  # its own group loop only: DSpark reuses swa's sas
    assert {key[0] for key in cache.keys()} == {(DRAFT_NAMESPACE, 1), (DRAFT_NAMESPACE, 2)}
    for one, two, values in zip(first_index, second_index, snapshot):
        assert one.cos.data_ptr() != two.cos.data_ptr()
        assert one.sas_metadata is None or one.sas_metadata.data_ptr() != two.sas_metadata.data_ptr()
        for name, tensor in _metadata_tensors(one).items():
            assert torch.equal(tensor, values[name]), f"draft index 2 rewrote draft index 1's {name}"
    for builder, meta in zip(builders, second_index):
        assert_same_metadata(meta, make_builders(model, [builder.group])[0].build_for_drafting(common, 2))


@pytest.mark.parametrize("differs", ["head_dim", "window", "heads"])
def test_sas_metadata_is_reused_only_for_the_same_heads_head_dim_and_window(differs):
    cache_tensor = make_model().rope_cos_sin_cache
    base = make_model(cache=cache_tensor)
    other_model, other_group = base, SWA
    if differs == "head_dim":
        other_model = make_model(cache=cache_tensor, head_dim=192)
    elif differs == "heads":
        other_model = dataclasses.replace(base, num_heads_q=16)
    else:
        other_group = SWA_OTHER_WINDOW
    common = make_step(random.Random(4), [SWA, other_group], 3, num_reqs=10)
    common.causal = True
    first = DraftMetadataBuilder(base, SWA, MAX_NUM_REQS, MAX_NUM_TOKENS)
    second = DraftMetadataBuilder(other_model, other_group, MAX_NUM_REQS, MAX_NUM_TOKENS)
    same = DraftMetadataBuilder(base, SWA, MAX_NUM_REQS, MAX_NUM_TOKENS)
    cache = StepCache()
    a = first.build_for_drafting(common, 1, cache)
    b = second.build_for_drafting(common, 1, cache)
    c = same.build_for_drafting(common, 1, cache)
    assert b.cos is a.cos  # the group-invariant part is shared
    assert b.sas_metadata is not a.sas_metadata
    assert_same_metadata(b, DraftMetadataBuilder(other_model, other_group, MAX_NUM_REQS, MAX_NUM_TOKENS)
                         .build_for_drafting(common, 1))
    assert c.sas_metadata is a.sas_metadata
    assert (cache.hits, cache.misses) == (3, 3)


# ---------------------------------------------------------------- syncs, addresses, allocations


def _on_meta(common: CommonDraftInputs) -> CommonDraftInputs:
    """The step with every device tensor on the meta device (no data: any read of one fails)."""
    return dataclasses.replace(
        common, query_start_loc=common.query_start_loc.to("meta"), seq_lens=common.seq_lens.to("meta"),
        positions=common.positions.to("meta"),
        block_tables={k: v.to("meta") for k, v in common.block_tables.items()},
        slot_mappings={k: v.to("meta") for k, v in common.slot_mappings.items()},
    )


@pytest.mark.parametrize("host_seq_lens", [False, True])
def test_at_most_one_device_to_host_sync_per_step(host_seq_lens):
    groups = [SWA, FULL, COMPRESSED, DSPARK]
    rng = random.Random(6)
    host_model = make_model(3, 2, 1)
    model = dataclasses.replace(host_model, rope_cos_sin_cache=host_model.rope_cos_sin_cache.to("meta"))
    builders = make_builders(model, groups, device="meta")
    for step in range(3):
        common = make_step(rng, groups, 3, num_reqs=rng.randint(1, 10), host_seq_lens=host_seq_lens, oversized=False)
        expected = build_draft_attn_metadata(make_builders(host_model, groups), common, 1)
        device_common = _on_meta(common)
        with OpLog(device_values=lambda source: common.seq_lens[:source.numel()]) as log:
            metas = build_draft_attn_metadata(builders, device_common, 1)
        assert log.device_to_host() == ([] if host_seq_lens else ["copy_"])
        assert log.scalar_reads() == []
        for meta, host in zip(metas, expected):
            assert meta.cos.device.type == "meta"
            assert_same_metadata(meta, host)  # meta tensors: dtypes and shapes; host ints and seq_lens_cpu: values


def test_an_int64_host_seq_lens_is_accepted():
    """A runner's int64 host copy of seq_lens (vllm-ascend keeps int64 ones) gives the same
    metadata as an int32 one, device inputs included (meta tensors: no read of them)."""
    groups = [SWA, FULL, DSPARK]
    rng = random.Random(12)
    host_model = make_model(3, 2, 1)
    model = dataclasses.replace(host_model, rope_cos_sin_cache=host_model.rope_cos_sin_cache.to("meta"))
    common = make_step(rng, groups, 3, num_reqs=6, host_seq_lens=True, oversized=False)
    expected = build_draft_attn_metadata(make_builders(host_model, groups), common, 1)
    wide = dataclasses.replace(_on_meta(common), seq_lens_cpu=common.seq_lens_cpu.long())
    with OpLog() as log:
        metas = build_draft_attn_metadata(make_builders(model, groups, device="meta"), wide, 1)
    assert log.device_to_host() == []
    for meta, host in zip(metas, expected):
        assert (meta.cp.max_local_query_len, meta.cp.max_local_seq_len) == (host.cp.max_local_query_len,
                                                                            host.cp.max_local_seq_len)
        assert meta.seq_lens_cpu.dtype == torch.int64 and meta.seq_lens_cpu.tolist() == host.seq_lens_cpu.tolist()


def test_a_sync_counter_sees_a_device_read():
    with OpLog(device_values=lambda source: torch.ones(source.shape, dtype=source.dtype)) as log:
        value = int(torch.zeros(2, device="meta").sum())
        host = torch.zeros(3).copy_(torch.zeros(3, device="meta"))
    assert (value, host.tolist()) == (1, [1.0, 1.0, 1.0])  # answered from device_values
    assert log.device_to_host() == ["_local_scalar_dense", "copy_"]


def test_buffer_addresses_are_stable_across_100_steps():
    groups = [SWA, FULL, COMPRESSED, DSPARK]
    model = make_model(3, 2, 0)
    builders = make_builders(model, groups)
    rng = random.Random(8)
    storages: dict[tuple, int] = {}
    first_rows: dict[tuple, int] = {}
    for step in range(100):
        common = make_step(rng, groups, 3)
        for draft_index in (1, 2):
            metas = build_draft_attn_metadata(builders, common, draft_index)
            for group, meta in zip(groups, metas):
                for name, tensor in _metadata_tensors(meta).items():
                    if name == "seq_lens_cpu":
                        continue  # host inputs: the runner's own tensor, shared rather than copied
                    # A DSpark group's sas_metadata is its own on non-causal steps (another
                    # window), swa's on causal ones: stable per kind of step.
                    key = (group.name, draft_index, name) + ((common.causal,) if name == "sas_metadata" else ())
                    assert storages.setdefault(key, tensor.untyped_storage().data_ptr()) == \
                        tensor.untyped_storage().data_ptr(), f"step {step}: {key} moved"
                    # local_cos/sin start at this step's local_start; an empty view has no address.
                    if name not in ("local_cos", "local_sin") and tensor.numel():
                        assert first_rows.setdefault(key, tensor.data_ptr()) == tensor.data_ptr(), f"step {step}: {key}"
    assert len(storages) > 4 * 2 * 10


def test_steady_state_allocates_no_tensor():
    groups = [SWA, FULL, DSPARK]
    builders = make_builders(make_model(3, 2, 1), groups)
    rng = random.Random(12)
    steps = [make_step(rng, groups, 3, num_reqs=6, host_seq_lens=True, oversized=False) for _ in range(5)]
    for common in steps:  # warm-up: buffers and views of every shape
        build_draft_attn_metadata(builders, common, 1)
    with specops.backend("native"), OpLog() as counter:
        for common in steps:
            build_draft_attn_metadata(builders, common, 1)
    assert counter.ops and counter.allocations() == []



# ---------------------------------------------------------------- fresh-cache paths


def test_dummy_run_equals_building_alone_and_keeps_the_runner_cache_clean():
    groups = [SWA, FULL, DSPARK]
    model = make_model()
    rng = random.Random(13)
    real, dummy = make_step(rng, groups, 3, num_reqs=7), make_step(rng, groups, 3, num_reqs=3)
    dummy.causal = real.causal  # a graph is captured for the kind of step it replays
    builders = make_builders(model, groups)
    runner_cache = StepCache()
    real_metas = build_draft_attn_metadata(builders, real, 1, cache=runner_cache)
    entries, counters = runner_cache.keys(), (runner_cache.hits, runner_cache.misses)
    dummy_metas = build_draft_attn_metadata(builders, dummy, 1, cache=runner_cache, dummy_run=True)
    assert runner_cache.keys() == entries and (runner_cache.hits, runner_cache.misses) == counters
    for group, meta in zip(groups, dummy_metas):
        assert_same_metadata(meta, make_builders(model, [group])[0].build_for_drafting(dummy, 1), group.name)
    # The dummy run shares across groups like a real step: a graph captured from it reads the
    # addresses a real step writes.
    for meta, real_meta in zip(dummy_metas, real_metas):
        assert meta.cos.data_ptr() == real_meta.cos.data_ptr()
        assert (meta.sas_metadata is None) == (real_meta.sas_metadata is None)
        assert meta.sas_metadata is None or meta.sas_metadata.data_ptr() == real_meta.sas_metadata.data_ptr()


def test_per_group_inputs_build_each_group_alone():
    groups = [SWA, FULL, DSPARK]
    model = make_model()
    rng = random.Random(14)
    base = make_step(rng, groups, 3, num_reqs=6)
    per_group = [dataclasses.replace(base, positions=base.positions + shift) for shift in range(len(groups))]
    metas = build_draft_attn_metadata(make_builders(model, groups), per_group, 1)
    for group, inputs, meta in zip(groups, per_group, metas):
        assert_same_metadata(meta, make_builders(model, [group])[0].build_for_drafting(inputs, 1), group.name)
    assert metas[0].cos.data_ptr() != metas[1].cos.data_ptr()
    with pytest.raises(ValueError, match="common"):
        build_draft_attn_metadata(make_builders(model, groups), per_group[:2], 1)


def test_counters_and_a_debug_line_per_hit(caplog):
    groups = [SWA, FULL, COMPRESSED]
    common = make_step(random.Random(15), groups, 3, num_reqs=4)
    cache = StepCache()
    with caplog.at_level(logging.DEBUG, logger="specops.drafting"):
        build_draft_attn_metadata(make_builders(make_model(), groups), common, 3, cache=cache)
    hits = [r for r in caplog.records if r.name == "specops.drafting" and "StepCache hit" in r.getMessage()]
    assert (cache.hits, cache.misses) == (2, 2) and len(hits) == 2  # invariant x2; only swa has a sas_metadata
    assert all(f"('{DRAFT_NAMESPACE}', 3)" in r.getMessage() for r in hits)
