"""The drafting layer: a hand-computed step, every field against the ops and formulas, DSpark
steps, widths and draft indices, bad input, and the public names (the README runs the draft-step
example). The shared cache and the sync / address / allocation checks are in
test_drafting_cache.py; the shared inputs in drafting_cases.py."""

from __future__ import annotations

import dataclasses
import random
import warnings

import pytest
import torch
from drafting_cases import (
    ALL_GROUPS,
    COMPRESSED,
    DSPARK,
    FIELDS,
    FULL,
    MAX_NUM_REQS,
    MAX_NUM_TOKENS,
    MAX_POSITION,
    ROT_DIM,
    SWA,
    _metadata_tensors,
    assert_matches_definitions,
    make_builders,
    make_model,
    make_step,
)
from host_syncs import OpLog

import specops
from specops import _fastpath, drafting
from specops.drafting import (
    CommonDraftInputs,
    DraftMetadataBuilder,
    GroupConfig,
    ModelConfig,
    build_draft_attn_metadata,
)


# ---------------------------------------------------------------- a step worked by hand


def test_hand_computed_step():
    # Position p of the cache holds cos = (p, p + 0.5) and sin = (-p, -p - 0.5).
    p = torch.arange(64, dtype=torch.float32)[:, None]
    cache = torch.cat([p, p + 0.5, -p, -p - 0.5], dim=1)
    model = ModelConfig(num_heads_q=4, num_heads_kv=1, head_dim=128, rope_cos_sin_cache=cache,
                        num_speculative_tokens=1, cp_size=2, cp_rank=1, num_cube_cores=2, num_vector_cores=4,
                        soc_version="Ascend910B1")
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
        num_vector_cores=8, soc_version="Ascend910B1"))
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


# row_views as the layer gets it (specops._fastpath): the native helper and its plain twin.
ROW_VIEWS = [pytest.param(_fastpath.plain_row_views, id="plain")]
if "native" in specops.available_backends():
    ROW_VIEWS.append(pytest.param(specops._C.row_views, id="native"))


@pytest.mark.parametrize("row_views", ROW_VIEWS)
def test_row_views_are_slices_that_share_storage_and_version(row_views):
    """The layer's views come from one row_views call (specops._fastpath): each equals the slice,
    sits in the same storage, and shares the buffer's version counter, so an in-place write
    through it is seen wherever versions are compared."""
    buffer = torch.arange(40, dtype=torch.int64).view(10, 4)
    columns = buffer[:, 2:]
    views = row_views([buffer, columns, buffer[0]], [2, 5, 7, 10, 1, 3])
    for view, expected in zip(views, (buffer[2:5], columns[7:10], buffer[0][1:3])):
        assert view.shape == expected.shape and view.stride() == expected.stride()
        assert view.data_ptr() == expected.data_ptr() and torch.equal(view, expected)
    version = buffer._version
    views[1].fill_(-1)
    assert buffer._version == version + 1 and (buffer[7:, 2:] == -1).all()
    with pytest.raises(ValueError, match=r"tensors\[0\].*start <= end <= 10"):
        row_views([buffer], [3, 11])
    with pytest.raises(ValueError, match="bounds"):
        row_views([buffer], [0])
    with pytest.raises(TypeError, match=r"bounds\[1\] must be an int"):
        row_views([buffer], [0, 2.0])
    with pytest.raises(ValueError, match=r"tensors\[1\] must be a tensor"):
        row_views((buffer, "buffer"), (0, 1, 0, 1))
    with pytest.raises(TypeError, match="tensors must be a sequence"):
        row_views(5, [0, 1])
    with pytest.raises(TypeError, match="2 positional arguments"):
        row_views([buffer])


@pytest.mark.parametrize("row_views", ROW_VIEWS)
def test_row_views_of_every_kind_of_base(row_views):
    """A plain dense buffer's alias is made as aten's view kernels make one, anything else (here
    a quantized tensor, whose TensorImpl is a subclass carrying its quantizer) through a detached
    copy: each view equals the slice, in the base's storage, with its dtype and kind, and an
    inference tensor's view is one too (it has no version counter to share)."""
    with torch.inference_mode():
        inference = torch.arange(12, dtype=torch.int32).view(6, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized tensors are deprecated, and still a TensorImpl subclass
        quantized = torch.quantize_per_tensor(torch.linspace(0, 1, 12).view(6, 2), 0.1, 3, torch.quint8)
    bases = [torch.arange(24, dtype=torch.float64).view(4, 3, 2), torch.ones(5, dtype=torch.bool), inference,
             torch.arange(10).as_strided((5,), (2,)), quantized]
    spans = [(1, 3), (0, 5), (2, 6), (1, 4), (2, 5)]
    views = row_views(bases, [bound for span in spans for bound in span])
    for view, base, (start, end) in zip(views, bases, spans):
        expected = base[start:end]
        assert view.shape == expected.shape and view.stride() == expected.stride() and view.dtype == base.dtype
        assert view.data_ptr() == expected.data_ptr() and view.is_inference() == base.is_inference()
        assert torch.equal(view.int_repr(), expected.int_repr()) if base.is_quantized else torch.equal(view, expected)
    assert views[4].q_scale() == 0.1 and views[4].q_zero_point() == 3
    version = bases[0]._version
    views[0].zero_()
    assert bases[0]._version == version + 1 and not bases[0][1:3].any()


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
    """A step builds each metadata with configs.group_metadata, which passes the shared fields
    as DraftAttnMetadata's leading fields and the group's own after them; the compressed groups'
    fields, last, default to None and are set on compressed groups only."""
    shared = drafting.configs.SharedFields._fields
    assert shared == tuple(FIELDS[:len(shared)])
    assert FIELDS[len(shared):] == ["sas_metadata", "slot_mapping", "dspark_swa_indices", "dspark_swa_lens", "window",
                                    "qli_metadata", "compress_cos", "compress_sin", "compress_slot_mapping"]
    defaults = {f.name: f.default for f in dataclasses.fields(drafting.DraftAttnMetadata)}
    assert all(defaults[name] is None for name in FIELDS[-4:])
    values = {name: object() for name in FIELDS[:-4]}
    made = drafting.configs.group_metadata(drafting.configs.SharedFields(**{name: values[name] for name in shared}),
                                           **{name: values[name] for name in FIELDS[len(shared):-4]})
    assert all(getattr(made, name) is values[name] for name in values)
