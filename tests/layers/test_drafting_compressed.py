"""The drafting layer's compressed groups (GroupConfig.compress_ratio 4 / 128): every field
against the naive form on every backend, the shared cache against each group built alone over
many steps, the sharing of the sas / lightning-indexer schedules and the one compressor launch
per batch, the A5 variant, and bad configurations. The shared inputs are drafting_cases.py's."""

from __future__ import annotations

import random

import pytest
import torch
from docs_figures import assert_docs_say
from drafting_cases import (
    MAX_NUM_REQS,
    MAX_NUM_TOKENS,
    MAX_POSITION,
    ROT_DIM,
    SWA,
    assert_matches_definitions,
    assert_same_metadata,
    make_builders,
    make_step,
)
from golden_cases import golden_cases

from specops.launch_count import count_launches
from specops.drafting import (
    DraftMetadataBuilder,
    GroupConfig,
    ModelConfig,
    StepCache,
    build_draft_attn_metadata,
    naive,
)
from specops.drafting.compressed import row_bound

C4 = GroupConfig("c4", block_size=16, storage_block_size=4, sliding_window=24, compress_ratio=4)
C4_INDEXER = GroupConfig("c4_indexer", block_size=16, storage_block_size=8, sliding_window=24, compress_ratio=4)
C128 = GroupConfig("c128", block_size=16, storage_block_size=2, sliding_window=24, compress_ratio=128)
C4_OTHER = GroupConfig("c4b", block_size=16, storage_block_size=4, sliding_window=24, compress_ratio=4)
C128_OTHER = GroupConfig("c128b", block_size=16, storage_block_size=2, sliding_window=24, compress_ratio=128)
SWA_OTHER = GroupConfig("swa_b", block_size=16, storage_block_size=16, sliding_window=24)
DSPARK = GroupConfig("dspark", block_size=8, storage_block_size=8, sliding_window=24, dspark=True)
COMPRESSED_GROUPS = (SWA, C4, C4_INDEXER, C128, C4_OTHER, C128_OTHER, SWA_OTHER, DSPARK)


def compressed_model(num_speculative_tokens: int = 3, cp_size: int = 1, cp_rank: int = 0, *, variant: str = "a2a3",
                     own_tables: bool = True, device: str = "cpu") -> ModelConfig:
    """64 query heads (the A5 schedule takes 64 or 128), the compressed layers' own RoPE tables
    (a row of each holds its ratio, so a wrong table shows)."""
    generator = torch.Generator().manual_seed(7)
    cache = torch.randn(MAX_POSITION, ROT_DIM, generator=generator).to(device)
    tables = None
    if own_tables:
        tables = {ratio: (torch.randn(MAX_POSITION, ROT_DIM, generator=generator) + ratio).to(device)
                  for ratio in (4, 128)}
    soc = "Ascend950PR_9599" if variant == "a5" else "Ascend910B1"
    return ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=cache,
                       num_speculative_tokens=num_speculative_tokens, cp_size=cp_size, cp_rank=cp_rank,
                       num_cube_cores=4, num_vector_cores=8, soc_version=soc, compress_rope_cos_sin_caches=tables)


# ------------------------------------------------------ the fields against their definitions


@pytest.mark.parametrize("variant", ["a2a3", "a5"])
def test_every_compressed_field_matches_its_definition(backend, variant):
    rng = random.Random(5 if variant == "a2a3" else 6)
    # The interpreted Triton kernels and the reference's schedule are slow: fewer steps there.
    steps = {"native": 6, "reference": 3}.get(backend, 1)
    for step in range(steps):
        cp_size = rng.choice([1, 3])
        model = compressed_model(rng.randint(1, 3), cp_size, rng.randrange(cp_size), variant=variant,
                                 own_tables=rng.random() < 0.7)
        groups = rng.sample(COMPRESSED_GROUPS, 4) + [C4]
        groups = list(dict.fromkeys(groups))
        common = make_step(rng, groups, model.num_speculative_tokens, num_reqs=rng.choice([0, 1, 4, 8]))
        metas = build_draft_attn_metadata(make_builders(model, groups), common, draft_index=1, cache=StepCache())
        for group, meta in zip(groups, metas):
            assert_matches_definitions(meta, model, group, common)
            if group.compress_ratio > 1:
                rows = row_bound(common.num_actual_tokens, common.num_reqs, group.compress_ratio)
                assert meta.compress_cos.shape == (rows, 1, 1, ROT_DIM // 2)
                assert meta.compress_slot_mapping.shape == ((rows,) if variant == "a5" else (rows, 2))
            else:
                assert meta.compress_cos is meta.compress_sin is meta.compress_slot_mapping is None
            assert (meta.qli_metadata is None) == (group.compress_ratio != 4)


def test_a_hand_computed_compressor_step():
    """Two requests, ratio 4: request 0 at start 6 with 5 tokens (positions 6..10) completes
    compressed position 1 (positions 4..7): (6 + 5) // 4 - 6 // 4 = 1 row; request 1 at start 0
    with 8 tokens completes positions 0 and 1. N = min(13, 13 // 4 + 2) = 5: 3 rows, 2 invalid."""
    model = compressed_model(num_speculative_tokens=7)
    group = GroupConfig("c4", block_size=4, storage_block_size=4, sliding_window=8, compress_ratio=4)
    query_start_loc = torch.tensor([0, 5, 13], dtype=torch.int32)
    seq_lens = torch.tensor([11, 8], dtype=torch.int32)
    table = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]], dtype=torch.int32)
    common = make_step(random.Random(0), [group], 7, num_reqs=0)
    common.query_start_loc, common.query_start_loc_cpu, common.seq_lens = query_start_loc, query_start_loc.clone(), \
        seq_lens
    common.seq_lens_cpu, common.positions = None, torch.tensor([6, 7, 8, 9, 10, 0, 1, 2, 3, 4, 5, 6, 7])
    common.num_reqs, common.num_actual_tokens, common.num_input_tokens = 2, 13, 16
    common.block_tables, common.slot_mappings = {"c4": table}, {"c4": torch.arange(13)}
    for other in ([], [C4_OTHER]):
        common.block_tables.update({g.name: table.flip(0) for g in other})
        common.slot_mappings.update({g.name: torch.arange(13) for g in other})
        builders = [DraftMetadataBuilder(model, g, 4, 32) for g in (group, *other)]
        meta = build_draft_attn_metadata(builders, common, 1)[0]
        # Compressed position 1 of request 0: block 1 // 4 = 0 of its table, offset 1, RoPE row
        # 1 * 4; positions 0 and 1 of request 1: block 20, offsets 0 and 1, RoPE rows 0 and 4.
        assert meta.compress_slot_mapping.tolist() == [[10, 1], [20, 0], [20, 1], [-1, 3], [-1, 3]]
        rope = model.compress_rope_cos_sin_caches[4]
        assert torch.equal(meta.compress_cos[:3, 0, 0], rope[[4, 0, 4], :ROT_DIM // 2])
        assert torch.equal(meta.compress_sin[:3, 0, 0], rope[[4, 0, 4], ROT_DIM // 2:])
        assert torch.equal(meta.compress_cos[3:], torch.ones(2, 1, 1, ROT_DIM // 2))
        assert torch.equal(meta.compress_sin[3:], torch.zeros(2, 1, 1, ROT_DIM // 2))


# ---------------------------------------------------------------- the shared cache over many steps


@pytest.mark.parametrize("variant", ["a2a3", "a5"])
def test_shared_cache_equals_building_each_group_alone_over_many_steps(backend, variant):
    rng = random.Random(17)
    steps = {"native": 30, "reference": 6}.get(backend, 2)
    model = compressed_model(3, variant=variant)
    groups = list(COMPRESSED_GROUPS)
    shared_builders, alone_builders, own_builders = (make_builders(model, groups) for _ in range(3))
    cache = StepCache()
    common = None
    for step in range(steps):
        # One cache for every step (entries of earlier inputs must never be served), and now and
        # then the same inputs again (every schedule served from the cache, the compressor rerun).
        repeat = common is not None and step % 3 == 2
        if not repeat:
            common = make_step(rng, groups, model.num_speculative_tokens)
            draft_index = rng.randint(1, model.num_speculative_tokens)
        misses = cache.misses
        shared = build_draft_attn_metadata(shared_builders, common, draft_index, cache=cache)
        if repeat:
            assert cache.misses == misses
        alone = [builder.build_for_drafting(common, draft_index) for builder in alone_builders]
        own = build_draft_attn_metadata(own_builders, common, draft_index)
        for group, with_cache, without, within in zip(groups, shared, alone, own):
            assert_same_metadata(with_cache, without, f"step {step} {group.name}")
            assert_same_metadata(within, without, f"step {step} {group.name}, the step's own cache")
        if step % 10 == 0:
            for group, meta in zip(groups, shared):
                assert_matches_definitions(meta, model, group, common)


def test_the_later_c4_groups_hit_the_one_indexer_schedule():
    model = compressed_model()
    groups = [SWA, C4, C128, C4_OTHER, C4_INDEXER]
    common = make_step(random.Random(2), groups, 3, num_reqs=5)
    common.causal = True
    cache = StepCache()
    metas = build_draft_attn_metadata(make_builders(model, groups), common, 1, cache=cache)
    assert metas[1].qli_metadata is metas[3].qli_metadata is metas[4].qli_metadata
    assert metas[1].sas_metadata is metas[3].sas_metadata is metas[4].sas_metadata
    assert len({id(m.sas_metadata) for m in metas}) == 3
    # Hits: 4 later groups share the invariant entry, 2 later C4 groups the C4 sas and the
    # indexer schedule; misses: the invariant entry, three sas schedules, one indexer schedule.
    assert (cache.hits, cache.misses) == (4 + 2 + 2, 1 + 3 + 1)


# ---------------------------------------------------------------- launches


def _launches(groups, model, common):
    builders = make_builders(model, groups)
    step = lambda: build_draft_attn_metadata(builders, common, 1, cache=StepCache())  # noqa: E731
    step()  # the first call allocates the buffers
    return count_launches(step)


@pytest.mark.parametrize("variant", ["a2a3", "a5"])
@pytest.mark.parametrize("causal", [True, False])
def test_two_groups_of_each_kind_launch_what_one_of_each_does(variant, causal):
    """The acceptance figure: 2 SWA, 2 C4 and 2 C128 groups, one launch count with 1 of each."""
    model = compressed_model(variant=variant)
    six = [SWA, SWA_OTHER, C4, C4_OTHER, C128, C128_OTHER]
    common = make_step(random.Random(4), six, 3, num_reqs=6)
    common.causal = causal
    one, two = _launches([SWA, C4, C128], model, common), _launches(six, model, common)
    assert (one.specops, one.aten) == (two.specops, two.aten)
    sas_op = "kv_quant_sas_metadata" if variant == "a5" else "sas_metadata"
    by_name = {str(name).split(".")[1]: count for name, count in two.by_op.items() if "specops" in str(name)}
    # Three sas schedules (SWA, C4 with top-k, C128), one indexer schedule, one compressor
    # launch per ratio, one format.
    assert by_name[sas_op] == 3 and by_name["lightning_indexer_metadata"] == 1
    assert by_name["compressor_metadata"] == 2 and by_name["format_slot_mapping_blocks_multi"] == 1
    if causal:
        builders = make_builders(model, six)
        alone = lambda: [builder.build_for_drafting(common, 1) for builder in builders]  # noqa: E731
        alone()
        each = count_launches(alone)
        assert_docs_say("drafting.md", f"{two.specops} specops + {two.aten} aten launches for the six groups (and for "
                                       f"three), against {each.specops} specops + {each.aten} aten when each of the "
                                       f"six builds alone")


def test_tables_of_two_widths_still_match_each_group_alone():
    """A batch whose groups' tables differ in width runs one compressor launch per width."""
    model = compressed_model()
    groups = [C4, C4_OTHER]
    common = make_step(random.Random(9), groups, 3, num_reqs=5)
    common.block_tables = dict(common.block_tables, c4b=common.block_tables["c4b"][:, :7].contiguous())
    metas = build_draft_attn_metadata(make_builders(model, groups), common, 1)
    for group, meta in zip(groups, metas):
        assert_matches_definitions(meta, model, group, common)


# ---------------------------------------------------------------- the A5 variant and bad configs


def test_the_variant_follows_the_soc_as_device_operator_picks_it():
    cache = torch.zeros(8, 4)
    assert ModelConfig(64, 1, 64, cache, 1, soc_version="Ascend910B1").sas_variant == "a2a3"
    # No SoC given: each builder picks it from its device's (tests/layers/test_drafting_platform.py).
    assert ModelConfig(64, 1, 64, cache, 1).sas_variant is None
    assert ModelConfig(64, 1, 64, cache, 1, soc_version="Ascend950PR_9599").sas_variant == "a5"
    assert ModelConfig(64, 1, 64, cache, 1, sas_variant="a2a3", soc_version="Ascend950PR_9599").sas_variant == "a2a3"
    model = compressed_model(variant="a5")
    common = make_step(random.Random(1), [C4], 3, num_reqs=3)
    counts = _launches([C4], model, common)
    names = {str(name).split(".")[1] for name in counts.by_op if "specops" in str(name)}
    assert "kv_quant_sas_metadata" in names and "sas_metadata" not in names
    assert naive.draft_metadata(model, C4, common).compress_slot_mapping.dim() == 1  # flat slots on A5


@pytest.mark.parametrize("make, argument", [
    (lambda: GroupConfig("c", 16, 16, 8, compress_ratio=2), "compress_ratio"),
    (lambda: GroupConfig("c", 16, 16, None, compress_ratio=4), "sliding_window"),
    (lambda: GroupConfig("c", 16, 16, 8, dspark=True, compress_ratio=128), "dspark"),
    (lambda: GroupConfig("c", 16, 16, 8, compress_ratio=4.0), "compress_ratio"),
    (lambda: ModelConfig(8, 1, 64, torch.zeros(8, 4), 1, sas_variant="a5"), "num_heads_q"),
    (lambda: ModelConfig(64, 1, 64, torch.zeros(8, 4), 1, sas_variant="a7"), "sas_variant"),
    (lambda: ModelConfig(64, 1, 64, torch.zeros(8, 4), 1, index_topk=-1), "index_topk"),  # 0: no top-k
    (lambda: ModelConfig(64, 1, 64, torch.zeros(8, 4), 1, compress_rope_cos_sin_caches={4: torch.zeros(8, 6)}),
     "compress_rope_cos_sin_caches[4]"),
    (lambda: ModelConfig(64, 1, 64, torch.zeros(8, 4), 1, compress_rope_cos_sin_caches={16: torch.zeros(8, 4)}),
     "compress_rope_cos_sin_caches"),
])
def test_bad_compressed_configs_name_the_argument(make, argument):
    with pytest.raises(ValueError, match=rf"^{argument.replace('[', '.').replace(']', '.')}"):
        make()


def test_a_bad_block_table_is_rejected_before_any_write():
    model = compressed_model()
    groups = [SWA, C4]
    builders = make_builders(model, groups)
    common = make_step(random.Random(3), groups, 3, num_reqs=4)
    before = build_draft_attn_metadata(builders, common, 1)
    snapshot = [t.clone() for t in (before[0].input_positions, before[1].compress_slot_mapping)]
    bad = make_step(random.Random(8), groups, 3, num_reqs=4)
    bad.block_tables = dict(bad.block_tables, c4=bad.block_tables["c4"].long())
    with pytest.raises(ValueError, match=r"^block_tables\['c4'\] must be a 2-D int32 tensor"):
        build_draft_attn_metadata(builders, bad, 1)
    assert torch.equal(before[0].input_positions, snapshot[0])
    assert torch.equal(before[1].compress_slot_mapping, snapshot[1])


def test_max_sizes_bound_the_compressor_rows():
    builder = DraftMetadataBuilder(compressed_model(), C128, MAX_NUM_REQS, MAX_NUM_TOKENS)
    common = make_step(random.Random(12), [C128], 3, num_reqs=MAX_NUM_REQS)
    meta = builder.build_for_drafting(common, 1)
    assert meta.compress_cos.size(0) == row_bound(common.num_actual_tokens, MAX_NUM_REQS, 128)


# ---------------------------------------------------------------- a step without requests, as the kernels answer it


def _golden_words(file_name: str, label_start: str) -> list[int]:
    cases = [param.values[0] for param in golden_cases(file_name)]
    if cases[0] is None:
        pytest.fail(f"{file_name} not found: {golden_cases(file_name)[0].values[1]}")
    return next(case["words"] for case in cases if case["label"].startswith(label_start))


@pytest.mark.parametrize("variant", ["a2a3", "a5"])
def test_a_step_without_requests_gets_the_kernels_empty_schedules(variant):
    """No requests: the A5 schedule from cu_seqlens_q [0] and a one-entry seqused_kv, the indexer
    schedule from BSND without tensors: the words the kernels' own code gives for those calls
    (golden "no batch" cases), and no compressor rows."""
    soc = "Ascend950PR_9599" if variant == "a5" else "Ascend910B1"
    model = ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=512, rope_cos_sin_cache=torch.zeros(64, ROT_DIM),
                        num_speculative_tokens=1, num_cube_cores=24, num_vector_cores=48, soc_version=soc)
    group = GroupConfig("c4", block_size=16, storage_block_size=16, sliding_window=128, compress_ratio=4)
    common = make_step(random.Random(0), [group], 1, num_reqs=0)
    meta = build_draft_attn_metadata([DraftMetadataBuilder(model, group, 4, 16)], common, 1)[0]
    if variant == "a5":
        assert meta.sas_metadata.tolist() == _golden_words("kv_quant_sas_metadata.jsonl", "no batch")
    else:
        assert meta.qli_metadata.tolist() == _golden_words("lightning_indexer_metadata.jsonl", "no batch")
    assert meta.compress_cos.shape[0] == meta.compress_slot_mapping.shape[0] == 0


def test_compressor_metadata_false_leaves_only_the_compressor_out():
    """GroupConfig(compressor_metadata=False): the compressed group keeps its sas and indexer
    schedules and every other field, its compress_* fields are None, and no compressor launch
    runs (a runner that computes the compressor metadata elsewhere: vllm-ascend's forward)."""
    import dataclasses

    rng = random.Random(11)
    model = compressed_model()
    groups = [SWA, C4, C128]
    without = [dataclasses.replace(g, compressor_metadata=False) if g.compress_ratio > 1 else g for g in groups]
    common = make_step(rng, groups, model.num_speculative_tokens, num_reqs=4)
    full = build_draft_attn_metadata(make_builders(model, groups), common, draft_index=1, cache=StepCache())
    builders = make_builders(model, without)
    lean = []
    launches = count_launches(lambda: lean.extend(build_draft_attn_metadata(builders, common, draft_index=1,
                                                                            cache=StepCache())))
    assert not any("compressor_metadata" in name for name in launches.by_op)
    assert any("compressor_metadata" in name for name in count_launches(
        lambda: build_draft_attn_metadata(make_builders(model, groups), common, draft_index=1)).by_op)
    for group, a, b in zip(without, full, lean):
        assert (b.compress_cos, b.compress_sin, b.compress_slot_mapping) == (None, None, None)
        assert torch.equal(a.sas_metadata, b.sas_metadata) if a.sas_metadata is not None else b.sas_metadata is None
        assert (a.qli_metadata is None) == (b.qli_metadata is None)
        if a.qli_metadata is not None:
            assert torch.equal(a.qli_metadata, b.qli_metadata)
        assert torch.equal(a.slot_mapping, b.slot_mapping) and torch.equal(a.cos, b.cos)
        assert_matches_definitions(b, model, group, common)
