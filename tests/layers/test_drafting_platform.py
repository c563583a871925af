"""The drafting layer's core counts and SoC (issue 41): ModelConfig's num_cube_cores,
num_vector_cores and soc_version default to None, and each builder resolves them as the schedule
ops do (docs/sas_metadata.md, "Core counts and SoC"): what is given wins, what is left out is read
from the builder's NPU (once per device), and off the NPU it is an error naming the first one
missing, before anything is built. The NPU is a stand-in here: `stand_in_npu` (tests/
device_stand_in.py) for torch_npu's device properties, `assumed_npu` to make the CPU builder's
device an NPU."""

from __future__ import annotations

import dataclasses
import random
import types

import pytest
import torch
from device_stand_in import stand_in_npu
from draft_loop_cases import MAX_REQS, allocate_rows, make_setup, target_step
from torch.utils._python_dispatch import TorchDispatchMode

import specops
from specops.drafting import (
    CommonDraftInputs, DraftMetadataBuilder, GroupConfig, ModelConfig, build_draft_attn_metadata, naive)
from specops import ascend_platform as _ascend_platform
from specops.triton_kernels._launch import assumed_npu

KINDS = ["swa", "c4", "c128"]
NUM_STEPS = 2
MAX_MODEL_LEN = 60
ON_THE_DEVICE: dict = {}  # make_setup's platform: every one left to the builders' NPU
ASCEND910B4 = types.SimpleNamespace(name="Ascend910B4", cube_core_num=3, vector_core_num=6)
# No counts in its properties: the SoC table's row (32 / 64).
ASCEND950 = types.SimpleNamespace(name="Ascend950PR_958b")
SWA = GroupConfig("swa", block_size=16, storage_block_size=16, sliding_window=24)


@pytest.fixture
def npu(monkeypatch):
    table, reads = stand_in_npu(monkeypatch)
    _ascend_platform.clear_platform_cache()
    yield table, reads
    _ascend_platform.clear_platform_cache()


def _model(**platform) -> ModelConfig:
    return ModelConfig(num_heads_q=64, num_heads_kv=1, head_dim=64, rope_cos_sin_cache=torch.zeros(64, 8),
                       num_speculative_tokens=2, **platform)


def _schedules(platform: dict, **setup) -> tuple[list[DraftMetadataBuilder], list[torch.Tensor]]:
    """The builders of one setup and the schedules of one step: the per-pass path's (pass 1) and
    the DraftLoopPlan's (every pass), sas then indexer words of each group that has them."""
    mappings, builders, plan = make_setup(KINDS, num_steps=NUM_STEPS, max_model_len=MAX_MODEL_LEN,
                                          platform=platform, **setup)
    rng = random.Random(5)
    allocate_rows(mappings, rng, [1])
    step = target_step(mappings, rng, num_steps=NUM_STEPS, max_model_len=MAX_MODEL_LEN, num_reqs=MAX_REQS)
    qsl, seq_lens = step["qsl"], torch.tensor(step["seq_lens"], dtype=torch.int32)
    sizes = dict(num_reqs=step["num_reqs"], num_actual_tokens=step["num_tokens"], num_input_tokens=step["num_tokens"])
    common = mappings.draft_inputs(qsl, qsl, seq_lens, **sizes)
    passes = [build_draft_attn_metadata(builders, common, 1)]
    plan.plan_step(qsl, seq_lens, step["num_reqs"], step["num_tokens"], num_reqs_padded=step["num_reqs"])
    passes += [plan.metadata(k) for k in range(1, NUM_STEPS + 1)]
    words = [words.clone() for metas in passes for meta in metas
             for words in (meta.sas_metadata, meta.qli_metadata) if words is not None]
    assert len(words) == 4 * len(passes)  # three sas schedules and the C4 group's indexer schedule
    return builders, words


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------- off the NPU: required, by name


@pytest.mark.parametrize("missing", ["num_cube_cores", "num_vector_cores", "soc_version"])
def test_off_the_npu_a_builder_needs_each_of_the_three(missing):
    given = dict(num_cube_cores=4, num_vector_cores=8, soc_version="Ascend910B1")
    del given[missing]
    with pytest.raises(ValueError, match=rf"^{missing} must be given: the builder is on cpu, so there is no NPU"):
        DraftMetadataBuilder(_model(**given), SWA, 4, 16)


def test_a_cpu_builder_without_counts_names_num_cube_cores():
    with pytest.raises(ValueError, match="^num_cube_cores must be given: the builder is on cpu"):
        DraftMetadataBuilder(_model(), SWA, 4, 16)
    # The naive form reads the device its inputs are on, and says the same.
    common = CommonDraftInputs(
        query_start_loc=torch.zeros(1, dtype=torch.int32), query_start_loc_cpu=torch.zeros(1, dtype=torch.int32),
        seq_lens=torch.zeros(0, dtype=torch.int32), seq_lens_cpu=None, positions=torch.zeros(0, dtype=torch.int64),
        num_reqs=0, num_actual_tokens=0, num_input_tokens=0)
    with pytest.raises(ValueError, match="^num_cube_cores must be given: the builder is on cpu"):
        naive.draft_metadata(_model(), SWA, common)


class _Operations(TorchDispatchMode):
    """Every aten op run while it is active (an allocation, a fill, a copy)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_the_error_leaves_nothing_built(npu, monkeypatch):
    """Refused off the NPU, and on an NPU whose counts cannot be read (no torch_npu): no tensor
    made or written, the config as given (no sas_variant picked into it), no device read."""
    _, reads = npu
    model = _model()
    fields = dict(vars(model))
    c4 = GroupConfig("c4", block_size=16, storage_block_size=4, sliding_window=24, compress_ratio=4)
    with _Operations() as operations:
        for group in (SWA, c4):
            with pytest.raises(ValueError, match="^num_cube_cores must be given: the builder is on cpu"):
                DraftMetadataBuilder(model, group, 4, 16)
    assert operations.ops == [] and reads == []
    monkeypatch.delattr(torch, "npu")
    with _Operations() as operations, assumed_npu():
        with pytest.raises(ValueError, match="^num_cube_cores must be given: torch_npu is not loaded"):
            DraftMetadataBuilder(model, c4, 4, 16)
    assert operations.ops == [] and model.sas_variant is None
    with _Operations() as operations:  # the recorder sees what a builder makes
        DraftMetadataBuilder(_model(num_cube_cores=4, num_vector_cores=8, soc_version="Ascend910B1"), c4, 4,
                             16).buffers(1)
    assert "aten.zeros.default" in operations.ops
    assert vars(model).keys() == fields.keys() and all(vars(model)[name] is value for name, value in fields.items())


# ---------------------------------------------------------------- on the NPU: read from the device


def test_on_the_npu_the_builders_take_the_devices_counts_and_soc(npu):
    table, reads = npu
    table[0] = ASCEND910B4
    with assumed_npu(), specops.backend("native"):
        builders, words = _schedules(ON_THE_DEVICE)
        assert reads == [0]  # once for every builder: cached per device
        _, given = _schedules(dict(num_cube_cores=3, num_vector_cores=6, soc_version="Ascend910B4"))
        _, other = _schedules(dict(num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1"))
    assert all(b.platform == (3, 6, "Ascend910B4", "a2a3") for b in builders)
    assert all(b.model.num_cube_cores is None and b.model.sas_variant is None for b in builders)
    assert _equal(words, given)
    assert not _equal(words, other)  # the counts matter to these schedules: the old default was wrong here
    assert reads == [0]


def test_a_device_on_ascend950_gives_the_a5_variant(npu):
    table, _ = npu
    table[0] = ASCEND950
    with assumed_npu(), specops.backend("native"):
        builders, words = _schedules(ON_THE_DEVICE)
        _, given = _schedules(dict(num_cube_cores=32, num_vector_cores=64, soc_version="Ascend950PR_958b"))
        _, kept = _schedules(ON_THE_DEVICE, sas_variant="a2a3")
        a2a3_builders, a2a3 = _schedules(dict(num_cube_cores=32, num_vector_cores=64, soc_version="Ascend950PR_958b"),
                                         sas_variant="a2a3")
    assert all(b.platform == (32, 64, "Ascend950PR_958b", "a5") for b in builders)
    assert builders[0].sas_arguments[True].a5 and builders[0].model.sas_variant is None
    assert _equal(words, given) and not _equal(words, a2a3)
    # A given variant is kept whatever the device's SoC.
    assert a2a3_builders[0].platform.sas_variant == "a2a3" and _equal(kept, a2a3)


def test_the_a5_variant_picked_from_the_device_flattens_the_compressor_slots(npu):
    table, _ = npu
    table[0] = ASCEND950
    with assumed_npu(), specops.backend("native"):
        mappings, builders, _ = make_setup(["c4"], num_steps=1, max_model_len=40, platform=ON_THE_DEVICE)
        rng = random.Random(2)
        allocate_rows(mappings, rng, [1])
        step = target_step(mappings, rng, num_steps=1, max_model_len=40, num_reqs=3)
        qsl = step["qsl"]
        common = mappings.draft_inputs(qsl, qsl, torch.tensor(step["seq_lens"], dtype=torch.int32),
                                       num_reqs=3, num_actual_tokens=step["num_tokens"],
                                       num_input_tokens=step["num_tokens"])
        meta = build_draft_attn_metadata(builders, common, 1)[0]
        expected = naive.draft_metadata(builders[0].model, builders[0].group, common)
    assert meta.compress_slot_mapping.dim() == 1  # flat slots on A5
    assert torch.equal(meta.compress_slot_mapping, expected.compress_slot_mapping)
    assert torch.equal(meta.sas_metadata, expected.sas_metadata)


def test_a5_heads_are_checked_when_the_device_picks_the_variant(npu):
    table, _ = npu
    table[0] = ASCEND950
    model = dataclasses.replace(_model(), num_heads_q=8)  # fine for A2/A3, so the config takes it
    with assumed_npu(), pytest.raises(ValueError, match="^num_heads_q must be 64 or 128 with sas_variant 'a5' "
                                                        r"\(picked for cpu's SoC 'Ascend950PR_958b'\), got 8"):
        DraftMetadataBuilder(model, SWA, 4, 16)


def test_given_counts_win_over_the_devices(npu):
    table, reads = npu
    table[0] = ASCEND910B4
    with assumed_npu():
        assert DraftMetadataBuilder(_model(num_cube_cores=5), SWA, 4, 16).platform == (5, 6, "Ascend910B4", "a2a3")
        assert DraftMetadataBuilder(_model(soc_version="Ascend950PR_958b"), SWA, 4, 16).platform \
            == (3, 6, "Ascend950PR_958b", "a5")
        assert reads == [0]
        _ascend_platform.clear_platform_cache()
        given = _model(num_cube_cores=7, num_vector_cores=9, soc_version="Ascend910B1")
        assert DraftMetadataBuilder(given, SWA, 4, 16).platform == (7, 9, "Ascend910B1", "a2a3")
    assert reads == [0]  # all three given: the device is not read
