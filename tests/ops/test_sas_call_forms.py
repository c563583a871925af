"""The call forms Ascend runners write for the sas schedule, and the platform arguments.

- sgl-kernel-npu's `torch.ops.npu.sparse_attn_sharedkv_metadata_host` as
  `specops.sparse_attn_sharedkv_metadata_host`: its argument names, order and defaults, and on
  every golden case the words of `specops.sas_metadata` for the same call (the kernel's own words
  where the form drops nothing the kernel reads), through the host-planned device form too.
- num_cube_cores / num_vector_cores / soc_version: from the NPU the schedule is for (a stand-in
  `torch.npu` here), cached per device; otherwise required, by name.
- `PersistentMappings.draft_inputs` on a device takes host copies only.
"""

from __future__ import annotations

import importlib
import inspect
import types

import pytest
import torch
from device_stand_in import DeviceStandIn, device_words, on_device, stand_in_npu
from golden_cases import SAS_TENSORS, golden_cases, tensor_call
from test_sas_metadata import _KERNEL_MESSAGE_ARGUMENT

import specops
from specops import ascend_platform as _ascend_platform
from specops.persistent.staging import StagedBlockWrites
from specops.triton_kernels import _sas_family
from specops.triton_kernels._launch import assumed_npu

GOLDEN = golden_cases("sas_metadata.jsonl")

# torch.ops.npu.sparse_attn_sharedkv_metadata_host's schema (sgl-kernel-npu, csrc/pytorch_extensions.cpp):
# every argument in order, with its default (REQUIRED: none).
REQUIRED = object()
PORT_SCHEMA = [
    ("num_heads_q", REQUIRED), ("num_heads_kv", REQUIRED), ("head_dim", REQUIRED), ("layout_q", REQUIRED),
    ("layout_kv", REQUIRED), ("cu_seqlens_q", None), ("seqused_kv", None), ("batch_size", 0), ("cmp_topk", 0),
    ("cmp_ratio", -1), ("ori_mask_mode", 4), ("cmp_mask_mode", 3), ("ori_win_left", 127), ("ori_win_right", 0),
    ("has_ori_kv", True), ("has_cmp_kv", True),
]
# What the form does not take, and the value sas_metadata gets for it.
NOT_TAKEN = {"cu_seqlens_ori_kv": None, "cu_seqlens_cmp_kv": None, "seqused_q": None, "max_seqlen_q": 0,
             "max_seqlen_kv": 0, "ori_topk": 0}
PLATFORM = ("num_cube_cores", "num_vector_cores", "soc_version")


def test_the_form_has_the_ports_arguments_order_and_defaults():
    parameters = list(inspect.signature(specops.sparse_attn_sharedkv_metadata_host).parameters.values())
    positional = [p for p in parameters if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert [(p.name, REQUIRED if p.default is inspect.Parameter.empty else p.default) for p in positional] \
        == PORT_SCHEMA
    assert [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY] == [*PLATFORM, "device"]


def _form_call(args: dict) -> tuple[dict, bool]:
    """The form's arguments for a golden case, and whether the kernel read nothing else: of what
    the form does not take, the case gives only what the kernel does not read there
    (docs/sas_metadata.md, "Batches and lengths": cu_seqlens_cmp_kv and ori_topk never, the
    maxima only without the tensors of their side)."""
    form = {name: args[name] for name, _ in PORT_SCHEMA}
    form.update({name: args[name] for name in PLATFORM})
    query_read = args["layout_q"] == "TND" or args["max_seqlen_q"] == 0
    if args["seqused_kv"] is not None:
        kv_read = True
    else:
        kv_read = args["cu_seqlens_ori_kv"] is None and args["max_seqlen_kv"] == 0
    return form, args["seqused_q"] is None and query_read and kv_read


@pytest.mark.parametrize("case,source", GOLDEN)
def test_golden_cases_through_the_sgl_form(case, source):
    assert case is not None, source
    args = tensor_call(case["args"], SAS_TENSORS)
    form, exact = _form_call(args)
    same_call = {**{name: args[name] for name in args if name not in NOT_TAKEN}, **NOT_TAKEN}
    try:
        expected = specops.sas_metadata(**same_call)
    except ValueError as error:
        with pytest.raises(ValueError) as raised:
            specops.sparse_attn_sharedkv_metadata_host(**form, device="cpu")
        assert str(raised.value) == str(error)
        if exact:
            assert "error" in case
        return
    words = specops.sparse_attn_sharedkv_metadata_host(**form, device="cpu")
    assert words.device.type == "cpu" and torch.equal(words, expected)
    if exact:
        assert words.tolist() == case["words"]


def test_some_golden_cases_are_exact_in_the_sgl_form():
    """The test above compares with the kernel's words, not only with sas_metadata, on these."""
    exact = [p.values[0] for p in GOLDEN if p.values[0] is not None and _form_call(p.values[0]["args"])[1]]
    assert len([case for case in exact if "words" in case]) >= 10 and any("error" in case for case in exact)


@pytest.mark.parametrize("case,source", [p for p in GOLDEN if p.values[0] is None or "words" in p.values[0]])
def test_golden_cases_in_the_host_planned_device_form(case, source, monkeypatch):
    """vllm-ascend's call form (sas_metadata's keywords, out on the device), host lengths: the
    kernel's words reach the device by one non-blocking copy, nothing is read back."""
    assert case is not None, source
    monkeypatch.setattr(_sas_family, "pinned_words", lambda: torch.empty(1024, dtype=torch.int32))
    DeviceStandIn.reset_log()
    out = on_device(torch.full((1024,), -1, dtype=torch.int32))
    with assumed_npu():
        specops.sas_metadata(**tensor_call(case["args"], SAS_TENSORS), out=out)
    assert DeviceStandIn.reads == [] and [upload.non_blocking for upload in DeviceStandIn.uploads] == [True]
    assert device_words(out).tolist() == case["words"]


def test_the_form_departs_from_the_port_where_the_kernel_does():
    """B comes from cu_seqlens_q for a TND query (the port takes batch_size), and the kernel's
    rejections stand (the port accepts mask mode 1)."""
    cu, kv = torch.tensor([0, 1, 2, 3], dtype=torch.int32), torch.tensor([700, 80, 9000], dtype=torch.int32)
    platform = dict(num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1")
    words = specops.sparse_attn_sharedkv_metadata_host(64, 1, 512, "TND", "PA_ND", cu, kv, 1, 0, 4, 4, 3, 127, 0,
                                                        True, False, **platform, device="cpu")
    ends = [words[8 * c + 4].item() for c in range(24) if words[8 * c] == 1]
    assert ends[-1] == 3, "every one of the 3 batches of cu_seqlens_q is scheduled"
    with pytest.raises(ValueError, match="ori_mask_mode"):
        specops.sparse_attn_sharedkv_metadata_host(64, 1, 512, "TND", "PA_ND", cu, kv, 3, ori_mask_mode=1,
                                                    **platform, device="cpu")


# ---------------------------------------------------------------- the platform arguments

def _decode_call(**extra) -> dict:
    return dict(num_heads_q=64, num_heads_kv=1, head_dim=512, cu_seqlens_q=torch.tensor([0, 1], dtype=torch.int32),
                seqused_kv=torch.tensor([5000], dtype=torch.int32), batch_size=1, layout_q="TND", has_cmp_kv=False,
                **extra)


@pytest.mark.parametrize("missing", PLATFORM)
def test_off_the_npu_each_platform_argument_is_required(missing):
    given = dict(num_cube_cores=24, num_vector_cores=48, soc_version="Ascend910B1")
    del given[missing]
    with pytest.raises(ValueError, match=rf"^{missing} must be given: the output is on cpu"):
        specops.sas_metadata(**_decode_call(**given))
    with pytest.raises(ValueError, match=rf"^{missing} must be given"):
        specops.sparse_attn_sharedkv_metadata_host(64, 1, 512, "TND", "PA_ND", **{
            k: v for k, v in _decode_call(**given).items() if k in ("cu_seqlens_q", "seqused_kv") or k in given},
            has_cmp_kv=False, device="cpu")


@pytest.fixture
def npu_properties(monkeypatch):
    """A stand-in torch_npu: device i reports the properties in `table[i]`; reads are counted."""
    table, reads = stand_in_npu(monkeypatch)
    _ascend_platform.clear_platform_cache()
    yield table, reads
    _ascend_platform.clear_platform_cache()


def test_the_npu_gives_the_counts_and_soc_once_per_device(npu_properties):
    table, reads = npu_properties
    table[0] = types.SimpleNamespace(name="Ascend910B4", cube_core_num=20, vector_core_num=40)
    with assumed_npu():
        words = specops.sas_metadata(**_decode_call())
        again = specops.sas_metadata(**_decode_call())
    expected = specops.sas_metadata(**_decode_call(num_cube_cores=20, num_vector_cores=40, soc_version="Ascend910B4"))
    assert torch.equal(words, expected) and torch.equal(again, expected) and reads == [0]
    # What is given wins; only the missing ones are read.
    with assumed_npu():
        mixed = specops.sas_metadata(**_decode_call(num_cube_cores=3))
    assert torch.equal(mixed, specops.sas_metadata(**_decode_call(num_cube_cores=3, num_vector_cores=40,
                                                                  soc_version="Ascend910B4")))
    assert reads == [0]


def test_properties_without_counts_use_the_soc_table(npu_properties):
    table, _ = npu_properties
    table[0] = types.SimpleNamespace(name="Ascend910B1")
    assert _ascend_platform.device_platform(torch.device("cpu")) == (24, 48, "Ascend910B1")
    _ascend_platform.clear_platform_cache()
    table[0] = types.SimpleNamespace(name="Ascend310P3")
    with assumed_npu(), pytest.raises(ValueError, match="^num_cube_cores must be given: .*'Ascend310P3'"):
        specops.lightning_indexer_metadata(64, 1, 128, 0, 0, actual_seq_lengths_query=torch.tensor([1]),
                                           actual_seq_lengths_key=torch.tensor([10]), batch_size=1)


def test_without_torch_npu_the_counts_are_asked_for(monkeypatch):
    monkeypatch.delattr(torch, "npu", raising=False)
    with assumed_npu(), pytest.raises(ValueError, match="^num_cube_cores must be given: torch_npu is not loaded"):
        specops.kv_quant_sas_metadata(64, 1, 512, 1, **{k: v for k, v in _decode_call().items()
                                                         if k not in ("num_heads_q", "num_heads_kv", "head_dim")})


def test_the_sgl_form_goes_to_the_current_npu(npu_properties, monkeypatch):
    """device=None: the port's output device, the current NPU (here a stand-in: where the wrapper
    would allocate on "npu", the test hands it a device stand-in)."""
    table, _ = npu_properties
    table[0] = types.SimpleNamespace(name="Ascend910B2", cube_core_num=24, vector_core_num=48)
    form = importlib.import_module("specops.ops.sparse_attn_sharedkv_metadata_host")
    monkeypatch.setattr(form, "_current_npu", lambda: torch.device("meta"))
    with assumed_npu():
        words = specops.sparse_attn_sharedkv_metadata_host(64, 1, 512, "TND", "PA_ND",
                                                            torch.tensor([0, 2], dtype=torch.int32),
                                                            torch.tensor([300], dtype=torch.int32), 1,
                                                            has_cmp_kv=False)
    assert words.device.type == "meta"


# ---------------------------------------------------------------- PersistentMappings.draft_inputs

def test_draft_inputs_on_a_device_take_host_copies_only(monkeypatch):
    # The staging's pinned buffer cannot be allocated here: host memory stands in for it.
    through_copy = StagedBlockWrites.stage_through_copy
    monkeypatch.setattr(StagedBlockWrites, "stage_through_copy", lambda self, pin_memory: through_copy(self, False))
    mappings = specops.PersistentMappings([specops.MappingGroup(block_size=16)], max_num_reqs=4,
                                          max_num_blocks_per_req=8, max_num_tokens=16, device="meta")
    qsl, qsl_cpu = torch.zeros(5, dtype=torch.int32, device="meta"), torch.tensor([0, 1, 2, 2, 2], dtype=torch.int32)
    seq_lens_cpu = torch.tensor([7, 9], dtype=torch.int32)
    sizes = dict(num_reqs=2, num_actual_tokens=2, num_input_tokens=4)
    with pytest.raises(ValueError, match="^seq_lens_cpu must be the runner's host copy .* got NoneType"):
        mappings.draft_inputs(qsl, qsl_cpu, None, **sizes)
    with pytest.raises(ValueError, match="^query_start_loc_cpu must be the runner's host copy .* got meta"):
        mappings.draft_inputs(qsl, qsl, seq_lens_cpu, **sizes)
    common = mappings.draft_inputs(qsl, qsl_cpu, seq_lens_cpu, **sizes)
    assert common.seq_lens_cpu is seq_lens_cpu and common.query_start_loc_cpu is qsl_cpu


def test_draft_inputs_on_the_cpu_keep_none():
    mappings = specops.PersistentMappings([specops.MappingGroup(block_size=16)], max_num_reqs=4,
                                          max_num_blocks_per_req=8, max_num_tokens=16)
    qsl = torch.tensor([0, 1, 2], dtype=torch.int32)
    common = mappings.draft_inputs(qsl, qsl, None, num_reqs=2, num_actual_tokens=2, num_input_tokens=4)
    assert common.seq_lens_cpu is None
