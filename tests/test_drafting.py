"""The drafting layer: a hand-computed step, every field against the ops and formulas,
the shared cache against building alone, what invalidates an entry, draft-index isolation,
sas_metadata reuse, device-to-host syncs, stable addresses, the fresh-cache paths, bad input,
and the public names (the README runs the draft-step example)."""

from __future__ import annotations

import dataclasses
import logging
import random

import pytest
import torch
from host_syncs import OpLog
from strategies import query_start_loc_of

import specops
from specops import drafting
from specops.drafting import (
    DRAFT_NAMESPACE,
    CommonDraftInputs,
    DraftAttnMetadata,
    DraftMetadataBuilder,
    GroupConfig,
    ModelConfig,
    StepCache,
    build_draft_attn_metadata,
)
from specops.drafting import naive

MAX_POSITION = 512
ROT_DIM = 8
MAX_NUM_REQS = 12
MAX_NUM_TOKENS = 160

SWA = GroupConfig("swa", block_size=16, storage_block_size=16, sliding_window=24)
FULL = GroupConfig("full", block_size=16, storage_block_size=16, sliding_window=None)
COMPRESSED = GroupConfig("c4", block_size=16, storage_block_size=4, sliding_window=None)
DSPARK = GroupConfig("dspark", block_size=8, storage_block_size=8, sliding_window=24, dspark=True)
SWA_OTHER_WINDOW = GroupConfig("swa8", block_size=16, storage_block_size=32, sliding_window=8)
ALL_GROUPS = (SWA, FULL, COMPRESSED, DSPARK, SWA_OTHER_WINDOW)


def make_model(num_speculative_tokens: int = 3, cp_size: int = 1, cp_rank: int = 0, *, head_dim: int = 64,
               cache: torch.Tensor | None = None, device: str = "cpu") -> ModelConfig:
    if cache is None:
        cache = torch.randn(MAX_POSITION, ROT_DIM, generator=torch.Generator().manual_seed(7)).to(device)
    return ModelConfig(num_heads_q=8, num_heads_kv=2, head_dim=head_dim, rope_cos_sin_cache=cache,
                       num_speculative_tokens=num_speculative_tokens, cp_size=cp_size, cp_rank=cp_rank,
                       num_cube_cores=4, num_vector_cores=8)


def make_builders(model: ModelConfig, groups, device: str = "cpu") -> list[DraftMetadataBuilder]:
    return [DraftMetadataBuilder(model, group, MAX_NUM_REQS, MAX_NUM_TOKENS, device=device) for group in groups]


def make_step(rng: random.Random, groups, num_speculative_tokens: int, *, num_reqs: int | None = None,
              host_seq_lens: bool | None = None, oversized: bool | None = None) -> CommonDraftInputs:
    """A random draft step: decodes of 1 .. 1 + k tokens, some short prefills, some empty
    requests, padding tokens, a block table and a slot mapping (with PAD) per group. With
    `oversized`, the tensors are longer than R / T, like a runner's persistent buffers."""
    if num_reqs is None:
        num_reqs = rng.randint(0, MAX_NUM_REQS)
    query_lens = []
    for _ in range(num_reqs):
        kind = rng.random()
        if kind < 0.1:
            query_lens.append(0)
        elif kind < 0.8:
            query_lens.append(rng.randint(1, 1 + num_speculative_tokens))
        else:
            query_lens.append(rng.randint(2 + num_speculative_tokens, 12))
    num_tokens = sum(query_lens)
    while num_tokens > MAX_NUM_TOKENS - 8:
        num_tokens -= query_lens.pop()
    num_reqs = len(query_lens)
    context = [rng.randint(0, 300) for _ in query_lens]
    seq_lens = torch.tensor([c + q for c, q in zip(context, query_lens)], dtype=torch.int32)
    query_start_loc = query_start_loc_of(query_lens)
    positions = torch.tensor([c + i for c, q in zip(context, query_lens) for i in range(q)], dtype=torch.int64)
    num_input_tokens = num_tokens + rng.randint(0, 8)
    generator = torch.Generator().manual_seed(rng.randint(0, 2**31))
    block_tables, slot_mappings = {}, {}
    for group in groups:
        cols = -(-MAX_POSITION // group.block_size)
        block_tables[group.name] = torch.randint(0, 1 << 12, (num_reqs, cols), dtype=torch.int32, generator=generator)
        slots = torch.randint(0, 1 << 20, (num_tokens,), generator=generator)
        slots[torch.rand(num_tokens, generator=generator) < 0.1] = specops.PAD_SLOT_ID
        slot_mappings[group.name] = slots
    if host_seq_lens is None:
        host_seq_lens = rng.random() < 0.5
    if oversized is None:
        oversized = rng.random() < 0.3
    if oversized:
        query_start_loc = torch.cat([query_start_loc, torch.full((3,), num_tokens, dtype=torch.int32)])
        seq_lens = torch.cat([seq_lens, torch.zeros(3, dtype=torch.int32)])
        positions = torch.cat([positions, torch.zeros(5, dtype=torch.int64)])
        block_tables = {name: torch.cat([t, t[:1].clone() if t.size(0) else torch.zeros_like(t[:0])])
                        for name, t in block_tables.items()}
        slot_mappings = {name: torch.cat([t, torch.full((4,), -1, dtype=torch.int64)])
                         for name, t in slot_mappings.items()}
    return CommonDraftInputs(
        query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc.clone(), seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone() if host_seq_lens else None, positions=positions, num_reqs=num_reqs,
        num_actual_tokens=num_tokens, num_input_tokens=num_input_tokens, causal=rng.random() < 0.8,
        block_tables=block_tables, slot_mappings=slot_mappings,
    )


FIELDS = [field.name for field in dataclasses.fields(DraftAttnMetadata)]
CP_FIELDS = [field.name for field in dataclasses.fields(specops.CPLocalMetadata)]


def _assert_value(actual, expected, what: str) -> None:
    """Tensors: dtype, shape, device and values (a meta tensor, standing in for a device tensor,
    has only dtype and shape to compare); anything else: type and value."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), what
        assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
            f"{what}: {actual.dtype} {tuple(actual.shape)} != {expected.dtype} {tuple(expected.shape)}"
        if actual.device.type != "meta" and expected.device.type != "meta":
            assert actual.device == expected.device, what
            assert torch.equal(actual, expected), f"{what}: {actual} != {expected}"
    else:
        assert type(actual) is type(expected) and actual == expected, f"{what}: {actual!r} != {expected!r}"


def assert_same_metadata(actual: DraftAttnMetadata, expected: DraftAttnMetadata, what: str = "") -> None:
    """Field by field: tensors equal in dtype, shape and values; host ints equal; None alike."""
    for name in FIELDS:
        a, e = getattr(actual, name), getattr(expected, name)
        if name == "cp":
            for cp_name in CP_FIELDS:
                _assert_value(getattr(a, cp_name), getattr(e, cp_name), f"{what} cp.{cp_name}")
        else:
            _assert_value(a, e, f"{what} {name}")


def _metadata_tensors(meta: DraftAttnMetadata) -> dict[str, torch.Tensor]:
    tensors = {name: getattr(meta, name) for name in FIELDS if isinstance(getattr(meta, name), torch.Tensor)}
    tensors.update({f"cp.{name}": getattr(meta.cp, name) for name in CP_FIELDS
                    if isinstance(getattr(meta.cp, name), torch.Tensor)})
    return tensors


def assert_matches_definitions(meta: DraftAttnMetadata, model: ModelConfig, group: GroupConfig,
                               common: CommonDraftInputs) -> None:
    """Every field against the layer's naive form (specops.drafting.naive: plain Python and
    direct op calls, one group at a time)."""
    expected = naive.draft_metadata(model, group, common)
    for name in FIELDS:
        if name == "cp":
            for cp_name in CP_FIELDS:
                _assert_value(getattr(meta.cp, cp_name), getattr(expected.cp, cp_name), f"{group.name} cp.{cp_name}")
        elif getattr(expected, name) is None:
            assert getattr(meta, name) is None, name
        else:
            _assert_value(getattr(meta, name), getattr(expected, name), f"{group.name} {name}")


# ---------------------------------------------------------------- a step worked by hand


def test_hand_computed_step():
    # Position p of the cache holds cos = (p, p + 0.5) and sin = (-p, -p - 0.5).
    p = torch.arange(64, dtype=torch.float32)[:, None]
    cache = torch.cat([p, p + 0.5, -p, -p - 0.5], dim=1)
    model = ModelConfig(num_heads_q=4, num_heads_kv=1, head_dim=128, rope_cos_sin_cache=cache,
                        num_speculative_tokens=1, cp_size=2, cp_rank=1, num_cube_cores=2, num_vector_cores=4)
    group = GroupConfig("swa", block_size=4, storage_block_size=4, sliding_window=8)
    builder = DraftMetadataBuilder(model, group, max_num_reqs=4, max_num_tokens=16)
    # Request 0: a decode of 2 tokens at positions 10, 11; request 1: 3 tokens at 20..22 (a
    # prefill: 3 > 1 + num_speculative_tokens); one padding token. CP 2: ranks hold 3 tokens each.
    query_start_loc = torch.tensor([0, 2, 5], dtype=torch.int32)
    seq_lens = torch.tensor([12, 23], dtype=torch.int32)
    common = CommonDraftInputs(
        query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc, seq_lens=seq_lens, seq_lens_cpu=None,
        positions=torch.tensor([10, 11, 20, 21, 22]), num_reqs=2, num_actual_tokens=5, num_input_tokens=6,
        block_tables={"swa": torch.zeros(2, 8, dtype=torch.int32)},
        slot_mappings={"swa": torch.tensor([41, 42, 83, 84, -1])},
    )
    meta = builder.build_for_drafting(common, draft_index=1)
    assert (meta.num_decodes, meta.num_prefills, meta.num_decode_tokens, meta.num_prefill_tokens) == (1, 1, 2, 3)
    assert meta.input_positions.tolist() == [10, 11, 20, 21, 22, 0]
    assert meta.cos.tolist() == [[10, 10.5], [11, 11.5], [20, 20.5], [21, 21.5], [22, 22.5], [0, 0.5]]
    assert meta.sin[:, 0].tolist() == [-10, -11, -20, -21, -22, 0]
    assert meta.local_cos[:, 0].tolist() == [21, 22, 0]  # rank 1 holds tokens 3, 4 and the padding token
    # The padding token's row is zero (vllm_ascend DSA draft builders pad local cos / sin with zeros).
    assert meta.local_sin[:, 1].tolist() == [-21.5, -22.5, 0.0]
    assert (meta.cp.num_tokens_pad, meta.cp.tokens_per_rank, meta.cp.local_start, meta.cp.local_end) == (6, 3, 3, 6)
    assert meta.cp.local_query_start_loc.tolist() == [0, 0, 2]
    assert meta.cp.local_seq_lens.tolist() == [0, 23]
    assert (meta.cp.max_local_query_len, meta.cp.max_local_seq_len) == (2, 23)
    assert meta.start_pos.tolist() == [10, 20]
    assert meta.seq_lens_cpu.tolist() == [12, 23] and meta.seq_lens_cpu.device.type == "cpu"
    assert meta.slot_mapping.tolist() == [[10, 1], [10, 2], [20, 3], [21, 0], [-1, 3], [-1, 3]]
    assert meta.window == (7, 0)
    assert meta.dspark_swa_indices is None and meta.dspark_swa_lens is None
    # sas_metadata of the local batches [0, 0, 2] / [0, 23], window (7, 0), 4 heads, 2 cores:
    # batch 0 has no query; batch 1's tokens sit at positions 21 and 22 and see 8 tokens each,
    # a tile of 6 * ceil(4 / 16) + 10 * ceil(8 / 64) = 16. Limit max(32 // 2, 16) = 16: core 0
    # passes batch 0, batch 1 (32 > 16 + 8) is cut after its tile 0; core 1 takes the rest.
    assert meta.sas_metadata.tolist() == [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 2, 0, 0, 0] + [0] * 1008


def test_group_window():
    assert SWA.window == (23, 0) and FULL.window == (-1, 0) and DSPARK.window == (23, 0)
    # A non-causal step is DSpark parallel drafting: a DSpark group sees the window and the draft block.
    assert DSPARK.step_window(False, 3) == (26, 0) and DSPARK.step_window(True, 3) == (23, 0)
    assert SWA.step_window(False, 3) == (23, 0) and FULL.step_window(False, 3) == (-1, 0)


@pytest.mark.parametrize("causal", [True, False])
def test_window_and_sas_metadata_of_each_group(causal):
    model = make_model(num_speculative_tokens=3)
    groups = [SWA, FULL, DSPARK]
    common = make_step(random.Random(21), groups, 3, num_reqs=5)
    common.causal = causal
    swa, full, dspark = build_draft_attn_metadata(make_builders(model, groups), common, 1)
    assert full.sas_metadata is None and full.window == (-1, 0)
    assert dspark.window == ((23, 0) if causal else (26, 0))
    # The same arguments share one result; a different window computes its own.
    assert (dspark.sas_metadata is swa.sas_metadata) == causal
    for group, meta in ((SWA, swa), (DSPARK, dspark)):
        assert_matches_definitions(meta, model, group, common)


# ------------------------------------------------------ the fields against their definitions


@pytest.mark.parametrize("cp_size", [1, 3])
def test_every_field_matches_its_definition(backend, cp_size):
    rng = random.Random(11 + cp_size)
    steps = 2 if backend == "triton" else 6
    for step in range(steps):
        cp_rank = rng.randrange(cp_size)
        model = make_model(rng.randint(1, 3), cp_size, cp_rank)
        groups = rng.sample(ALL_GROUPS, 3)
        common = make_step(rng, groups, model.num_speculative_tokens, num_reqs=rng.randint(0, 6))
        for group, meta in zip(groups, build_draft_attn_metadata(make_builders(model, groups), common, draft_index=1)):
            assert_matches_definitions(meta, model, group, common)


# ---------------------------------------------------------------- DSpark steps, widths, draft indices


def _dspark_step(causal: bool) -> tuple[ModelConfig, CommonDraftInputs]:
    """Two requests, num_speculative_tokens = 2: request 0 has 2 draft tokens and seq_len 9,
    request 1 has 1 token and seq_len 4; one padding token."""
    model = make_model(num_speculative_tokens=2)
    query_start_loc = torch.tensor([0, 2, 3], dtype=torch.int32)
    seq_lens = torch.tensor([9, 4], dtype=torch.int32)
    block_table = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]], dtype=torch.int32)
    common = CommonDraftInputs(
        query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc.clone(), seq_lens=seq_lens,
        seq_lens_cpu=None, positions=torch.tensor([7, 8, 3]), num_reqs=2, num_actual_tokens=3, num_input_tokens=4,
        causal=causal, block_tables={"swa3": block_table, "dspark3": block_table},
        slot_mappings={"swa3": torch.tensor([0, 1, 2]), "dspark3": torch.tensor([0, 1, 2])})
    return model, common


SWA_3 = GroupConfig("swa3", block_size=4, storage_block_size=4, sliding_window=3)
DSPARK_3 = GroupConfig("dspark3", block_size=4, storage_block_size=4, sliding_window=3, dspark=True)


def test_dspark_indices_only_on_non_causal_steps():
    model, common = _dspark_step(causal=True)
    builders = make_builders(model, [SWA_3, DSPARK_3])
    swa, dspark = build_draft_attn_metadata(builders, common, 1)
    # Causal: no indices, the causal window (3 - 1, 0), and so swa's sas_metadata.
    assert dspark.dspark_swa_indices is None and dspark.dspark_swa_lens is None
    assert dspark.window == swa.window == (2, 0) and dspark.sas_metadata is swa.sas_metadata

    common.causal = False
    swa, dspark = build_draft_attn_metadata(builders, common, 1)
    assert swa.dspark_swa_indices is None and swa.window == (2, 0)
    # Non-causal: the window widens by the draft block, (3 + 2 - 1, 0), with its own sas_metadata.
    assert dspark.window == (4, 0)
    assert dspark.sas_metadata.data_ptr() != swa.sas_metadata.data_ptr()
    # The draft builders' arguments: TND queries [0, 2, 3], paged KV lengths [9, 4], one KV head.
    assert torch.equal(dspark.sas_metadata, specops.sas_metadata(
        8, 1, 64, cu_seqlens_q=torch.tensor([0, 2, 3], dtype=torch.int32),
        seqused_kv=torch.tensor([9, 4], dtype=torch.int32), batch_size=2, max_seqlen_q=2, max_seqlen_kv=9,
        cmp_ratio=1, ori_win_left=4, ori_win_right=0, layout_q="TND", has_cmp_kv=False, num_cube_cores=4,
        num_vector_cores=8))
    # Request 0 sees positions max(9 - 2 - 3, 0) = 4 .. 8 (block 11 holds 4..7, block 12 holds 8);
    # request 1 sees positions 0 .. 3 (block 20). Rows are 3 + 2 rounded up to 128 wide.
    row_0 = [44, 45, 46, 47, 48] + [-1] * 123
    row_1 = [80, 81, 82, 83] + [-1] * 124
    assert dspark.dspark_swa_indices.shape == (4, 1, 128)
    assert dspark.dspark_swa_indices[:, 0].tolist() == [row_0, row_0, row_1, [-1] * 128]
    assert dspark.dspark_swa_lens.tolist() == [5, 5, 4, 0]


def test_dspark_index_width_default_and_override():
    assert DraftMetadataBuilder(make_model(3), DSPARK, 4, 16).dspark_width == 128  # 24 + 3 -> 128
    wide = GroupConfig("d", block_size=8, storage_block_size=8, sliding_window=126, dspark=True)
    assert DraftMetadataBuilder(make_model(3), wide, 4, 16).dspark_width == 256  # 126 + 3 -> 256
    assert DraftMetadataBuilder(make_model(2), wide, 4, 16).dspark_width == 128  # 126 + 2 -> 128
    model, common = _dspark_step(causal=False)
    narrow = dataclasses.replace(DSPARK_3, dspark_index_width=6)
    (meta,) = build_draft_attn_metadata(make_builders(model, [narrow]), common, 1)
    assert meta.dspark_swa_indices[:, 0].tolist() == [[44, 45, 46, 47, 48, -1]] * 2 + [[80, 81, 82, 83, -1, -1],
                                                                                     [-1] * 6]
    with pytest.raises(ValueError, match="dspark_index_width"):
        DraftMetadataBuilder(model, dataclasses.replace(DSPARK_3, dspark_index_width=4), 4, 16)  # < 3 + 2
    with pytest.raises(ValueError, match="dspark_index_width"):
        GroupConfig("swa", block_size=4, storage_block_size=4, sliding_window=3, dspark_index_width=128)


def test_a_request_wider_than_the_row_names_request_query_window_and_width():
    """A draft pass with a long prefill chunk: request 1 has 20 query tokens after 40 computed,
    so it sees 20 + 24 = 44 positions, more than the 40 set for the group; nothing is written."""
    model = make_model(3)
    group = dataclasses.replace(DSPARK, dspark_index_width=40)
    builders = make_builders(model, [SWA, group])
    good = make_step(random.Random(21), [SWA, group], 3, num_reqs=3, oversized=False)
    good.causal = False
    metas = build_draft_attn_metadata(builders, good, 1)
    before = [{name: t.clone() for name, t in _metadata_tensors(meta).items()} for meta in metas]
    query_start_loc = torch.tensor([0, 2, 22], dtype=torch.int32)
    seq_lens = torch.tensor([50, 60], dtype=torch.int32)
    bad = dataclasses.replace(
        good, query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc.clone(), seq_lens=seq_lens,
        seq_lens_cpu=None, positions=torch.arange(22), num_reqs=2, num_actual_tokens=22, num_input_tokens=24,
        slot_mappings={"swa": torch.arange(22), "dspark": torch.arange(22)})
    inputs = {name: getattr(bad, name).clone() for name in ("query_start_loc", "seq_lens", "positions")}
    with pytest.raises(ValueError, match=r"request 1 .*query length 20, sliding window 24.* sees 44 tokens.*"
                                         r"index width 40.*dspark_index_width >= 44"):
        build_draft_attn_metadata(builders, bad, 1)
    for meta, values in zip(metas, before):
        for name, tensor in _metadata_tensors(meta).items():
            assert torch.equal(tensor, values[name]), f"a rejected step wrote {name}"
    for name, tensor in inputs.items():
        assert torch.equal(getattr(bad, name), tensor)
    # Seen on causal steps it is no error: they build no DSpark indices.
    bad.causal = True
    build_draft_attn_metadata(builders, bad, 1)


@pytest.mark.parametrize("draft_index", [0, -1, 4])
def test_draft_index_must_be_in_one_to_num_speculative_tokens(draft_index):
    builders = make_builders(make_model(3), [SWA, DSPARK])
    common = make_step(random.Random(22), [SWA, DSPARK], 3, num_reqs=2)
    with pytest.raises(ValueError, match=r"draft_index must be in \[1, num_speculative_tokens = 3\]"):
        build_draft_attn_metadata(builders, common, draft_index)
    with pytest.raises(ValueError, match="draft_index"):
        builders[1].build_for_drafting(common, draft_index)
    build_draft_attn_metadata(builders, common, 3)


def test_padding_is_rezeroed_when_the_token_count_shrinks(backend):
    """Two steps at the same padded size: when the real tokens shrink from 20 to 9, the rows
    between them become padding again (position 0, cache row 0, PAD pairs, empty DSpark rows)."""
    model = make_model(3)
    groups = [SWA, COMPRESSED, DSPARK]
    builders = make_builders(model, groups)
    rng = random.Random(23)
    for num_reqs, num_tokens in ((6, 20), (3, 9)):
        common = make_step(rng, groups, 3, num_reqs=num_reqs, oversized=False)
        while common.num_actual_tokens != num_tokens:  # the batch of this size
            common = make_step(rng, groups, 3, num_reqs=num_reqs, oversized=False)
        common.num_input_tokens, common.causal = 24, False
        metas = build_draft_attn_metadata(builders, common, 1)
    pad = slice(num_tokens, 24)
    for group, meta in zip(groups, metas):
        assert meta.input_positions.numel() == 24 and (meta.input_positions[pad] == 0).all()
        assert (meta.cos[pad] == model.rope_cos_sin_cache[0, :ROT_DIM // 2]).all()
        assert (meta.sin[pad] == model.rope_cos_sin_cache[0, ROT_DIM // 2:]).all()
        assert meta.slot_mapping[pad].tolist() == [[-1, group.storage_block_size - 1]] * (24 - num_tokens)
        assert_matches_definitions(meta, model, group, common)
    dspark = metas[2]
    assert (dspark.dspark_swa_indices[pad] == -1).all() and (dspark.dspark_swa_lens[pad] == 0).all()


@pytest.mark.parametrize("causal", [True, False])
def test_one_launch_formats_every_group_and_one_builds_every_dspark_group(causal):
    """A step's op launches do not grow with the groups that share arguments: a step over
    swa, full, DSpark and their copies (another storage block size, another block table)
    launches exactly what a step over one group of each kind does."""
    model = make_model(3)
    kinds = [SWA, FULL, DSPARK]
    copies = [GroupConfig("swa_b", block_size=16, storage_block_size=8, sliding_window=24),
              GroupConfig("full_b", block_size=16, storage_block_size=4, sliding_window=None),
              GroupConfig("dspark_b", block_size=16, storage_block_size=16, sliding_window=24, dspark=True)]
    common = make_step(random.Random(24), kinds + copies, 3, num_reqs=5, host_seq_lens=True)
    common.causal = causal
    launches = {}
    for name, groups in (("kinds", kinds), ("all", kinds + copies)):
        builders = make_builders(model, groups)
        build_draft_attn_metadata(builders, common, 1)
        with specops.backend("native"), OpLog() as log:
            metas = build_draft_attn_metadata(builders, common, 1)
        launches[name] = [op for op in log.op_names() if op not in ("slice", "cp_local_max_lens")]
        for group, meta in zip(groups, metas):
            assert_matches_definitions(meta, model, group, common)
    assert launches["all"] == launches["kinds"]
    assert launches["all"].count("format_slot_mapping_blocks_multi") == 1
    assert launches["all"].count("dspark_swa_indices_multi") == (0 if causal else 1)
    assert "format_slot_mapping_blocks" not in launches["all"] and "dspark_swa_indices" not in launches["all"]


def test_a_new_batch_shape_allocates_nothing():
    """Buffers are allocated at the builder's maximum on a draft index's first step; a step at
    a shape never seen before only takes views of them."""
    groups = [SWA, FULL, DSPARK]
    builders = make_builders(make_model(3, 2, 1), groups)
    rng = random.Random(25)
    build_draft_attn_metadata(builders, make_step(rng, groups, 3, num_reqs=2), 1)
    for num_reqs in (4, 7, 10):
        common = make_step(rng, groups, 3, num_reqs=num_reqs, host_seq_lens=True)
        common.causal = num_reqs != 7
        with specops.backend("native"), OpLog() as log:
            build_draft_attn_metadata(builders, common, 1)
        assert log.ops and log.allocations() == [], log.allocations()


@pytest.mark.skipif("native" not in specops.available_backends(), reason="native extension not built")
def test_row_views_are_slices_that_share_storage_and_version():
    """The layer's views come from one native call (specops._C.row_views): each equals the slice,
    sits in the same storage, and shares the buffer's version counter, so an in-place write
    through it is seen wherever versions are compared."""
    buffer = torch.arange(40, dtype=torch.int64).view(10, 4)
    columns = buffer[:, 2:]
    views = specops._C.row_views([buffer, columns, buffer[0]], [2, 5, 7, 10, 1, 3])
    for view, expected in zip(views, (buffer[2:5], columns[7:10], buffer[0][1:3])):
        assert view.shape == expected.shape and view.stride() == expected.stride()
        assert view.data_ptr() == expected.data_ptr() and torch.equal(view, expected)
    version = buffer._version
    views[1].fill_(-1)
    assert buffer._version == version + 1 and (buffer[7:, 2:] == -1).all()
    with pytest.raises(ValueError, match=r"tensors\[0\].*start <= end <= 10"):
        specops._C.row_views([buffer], [3, 11])
    with pytest.raises(ValueError, match="bounds"):
        specops._C.row_views([buffer], [0])


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


# ---------------------------------------------------------------- bad input


def test_bad_configs_name_the_argument():
    cache = torch.zeros(16, 4)
    with pytest.raises(ValueError, match="rope_cos_sin_cache"):
        ModelConfig(num_heads_q=8, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=torch.zeros(16, 3),
                    num_speculative_tokens=1)
    with pytest.raises(ValueError, match="num_heads_q"):
        ModelConfig(num_heads_q=6, num_heads_kv=4, head_dim=64, rope_cos_sin_cache=cache, num_speculative_tokens=1)
    with pytest.raises(ValueError, match="cp_rank"):
        ModelConfig(num_heads_q=8, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=cache, num_speculative_tokens=1,
                    cp_size=2, cp_rank=2)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        ModelConfig(num_heads_q=8, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=cache, num_speculative_tokens=-1)
    with pytest.raises(ValueError, match="sliding_window"):
        GroupConfig("d", block_size=16, storage_block_size=16, sliding_window=None, dspark=True)
    with pytest.raises(ValueError, match="storage_block_size"):
        GroupConfig("g", block_size=16, storage_block_size=0, sliding_window=None)
    model = make_model()
    with pytest.raises(ValueError, match="max_num_tokens"):
        DraftMetadataBuilder(model, SWA, max_num_reqs=4, max_num_tokens=0)
    with pytest.raises(ValueError, match="rope_cos_sin_cache"):
        DraftMetadataBuilder(model, SWA, max_num_reqs=4, max_num_tokens=8, device="meta")


@pytest.mark.parametrize("problem, argument", [
    ("num_reqs", "num_reqs"), ("num_input_tokens", "num_input_tokens"), ("num_actual_tokens", "num_actual_tokens"),
    ("slot_mappings", "slot_mappings"), ("block_tables", "block_tables"), ("host_copy", "query_start_loc_cpu"),
    # Once accepted: a phantom prefill request, a real token's position zeroed, stale slot rows.
    ("num_reqs past query_start_loc", "query_start_loc"), ("num_reqs past seq_lens", "seq_lens"),
    ("num_actual_tokens below the batch", "num_actual_tokens"), ("positions shorter than T", "positions"),
    ("a slot mapping shorter than T", "slot_mappings"), ("a position past the RoPE cache", "rope_cos_sin_cache"),
])
def test_bad_steps_name_the_argument(problem, argument):
    groups = [SWA, DSPARK]
    common = make_step(random.Random(16), groups, 3, num_reqs=4, oversized=False)
    builders = make_builders(make_model(), groups)
    if problem == "num_reqs":
        common.num_reqs = MAX_NUM_REQS + 1
    elif problem == "num_input_tokens":
        common.num_input_tokens = MAX_NUM_TOKENS + 1
    elif problem == "num_actual_tokens":
        common.num_actual_tokens = common.num_input_tokens + 1
    elif problem == "host_copy":
        common.query_start_loc_cpu = common.query_start_loc_cpu.to("meta")
    elif problem == "num_reqs past query_start_loc":
        common.num_reqs += 1  # query_start_loc has num_reqs + 1 entries, not num_reqs + 2
    elif problem == "num_reqs past seq_lens":
        common.seq_lens = common.seq_lens[:-1]
    elif problem == "num_actual_tokens below the batch":
        common.num_actual_tokens -= 1
    elif problem == "positions shorter than T":
        common.positions = common.positions[:-1]
    elif problem == "a slot mapping shorter than T":
        common.slot_mappings["dspark"] = common.slot_mappings["dspark"][:-1]
    elif problem == "a position past the RoPE cache":
        common.positions[0] = MAX_POSITION
    else:
        getattr(common, problem).pop("dspark")
    with pytest.raises(ValueError, match=argument):
        build_draft_attn_metadata(builders, common, 1)


def test_public_names():
    assert set(drafting.__all__) >= {"ModelConfig", "GroupConfig", "DraftMetadataBuilder", "CommonDraftInputs",
                                     "DraftAttnMetadata", "StepCache", "build_draft_attn_metadata"}
    assert specops.drafting is drafting


def test_shared_fields_are_the_metadata_fields_in_order():
    """A step builds each metadata as DraftAttnMetadata(*shared, <the group's own fields>)."""
    shared = drafting.configs.SharedFields._fields
    assert shared == tuple(FIELDS[:len(shared)])
    assert FIELDS[len(shared):] == ["sas_metadata", "slot_mapping", "dspark_swa_indices", "dspark_swa_lens", "window"]

