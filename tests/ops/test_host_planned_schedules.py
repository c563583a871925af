"""The sas family's host-planned form (docs/sas_metadata.md, "On a device"): host length
tensors, a device output, the words computed on the host and copied once, without a wait, from
pinned staging; nothing read back.

No device exists here: `DeviceStandIn` (tests/device_stand_in.py) is the device tensor. It takes
a specops op to the op's device kernel through the dispatcher and fails any read of its values
on the host, so each test below fails if the route reads a device value. The pinned staging is
the one thing a CPU-only torch cannot allocate: `pinned_words` is replaced by a recorder, and
`test_the_staging_asks_for_pinned_memory` checks what the real one asks for. The device check
(`specops.devtools.host_planned.check_host_planned_copies`) covers the stream order and the
staging's reuse on a device.
"""

from __future__ import annotations

import pytest
import torch
from device_stand_in import DeviceRead, DeviceStandIn, device_words, on_device
from op_table import OP_TABLE
from schedule_launches import launched  # noqa: F401 (a fixture)
from torch.utils._python_dispatch import TorchDispatchMode

import specops
from specops.triton_kernels import _sas_family
from specops.triton_kernels._launch import assumed_npu

FAMILY = ("sas_metadata", "kv_quant_sas_metadata", "lightning_indexer_metadata")
SPECS = {op.name: op for op in OP_TABLE if op.name in FAMILY}
LENGTHS = {
    "sas_metadata": ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv"),
    "kv_quant_sas_metadata": ("cu_seqlens_q", "cu_seqlens_ori_kv", "cu_seqlens_cmp_kv", "seqused_q", "seqused_kv"),
    "lightning_indexer_metadata": ("actual_seq_lengths_query", "actual_seq_lengths_key"),
}
BACKENDS = ("native", "triton")


@pytest.fixture(autouse=True)
def staging(monkeypatch) -> list[torch.Tensor]:
    """The staging blocks the route asked for (host memory here: no pinned allocator exists)."""
    DeviceStandIn.reset_log()
    blocks: list[torch.Tensor] = []

    def recorded() -> torch.Tensor:
        blocks.append(torch.empty(1024, dtype=torch.int32))
        return blocks[-1]

    monkeypatch.setattr(_sas_family, "pinned_words", recorded)
    return blocks


def _host_words(name: str, call: dict) -> torch.Tensor:
    expected = {key: value.clone() if isinstance(value, torch.Tensor) else value for key, value in call.items()}
    with specops.backend("native"):
        SPECS[name].wrapper(**expected)
    return expected["out"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FAMILY)
def test_host_lengths_and_a_device_out_copy_once_and_read_nothing(name, backend, staging, launched):
    call = SPECS[name].valid_call()
    expected = _host_words(name, call)
    call["out"] = on_device(call["out"])
    with specops.backend(backend):
        SPECS[name].wrapper(**call)
    assert DeviceStandIn.reads == [] and launched == []
    assert len(staging) == 1 and len(DeviceStandIn.uploads) == 1
    upload = DeviceStandIn.uploads[0]
    assert upload.non_blocking, "the copy to the device must not wait"
    assert torch.equal(upload.words, expected) and torch.equal(device_words(call["out"]), expected)


@pytest.mark.parametrize("name", FAMILY)
def test_the_same_on_the_npu_route(name, staging, launched):
    call = SPECS[name].valid_call()
    expected = _host_words(name, call)
    call["out"] = on_device(call["out"])
    with assumed_npu(), specops.backend("native"):
        SPECS[name].wrapper(**call)
    assert DeviceStandIn.reads == [] and launched == [] and len(staging) == 1
    assert torch.equal(device_words(call["out"]), expected)


@pytest.mark.parametrize("name", FAMILY)
def test_device_allocates_the_output_there(name, staging):
    call = SPECS[name].valid_call()
    expected = _host_words(name, call)
    del call["out"]
    # device= takes a torch.device of the out it allocates: "meta" is the stand-in's device, and
    # a meta output is what the dispatcher sends to the fake kernel (the check, no words).
    out = SPECS[name].wrapper(**call, device="meta")
    assert out.device.type == "meta" and DeviceStandIn.reads == [] and staging == []
    assert expected.shape == out.shape


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FAMILY)
def test_device_lengths_on_the_npu_are_refused_naming_the_host_copy(name, backend, staging, launched):
    call = SPECS[name].valid_call()
    given = [key for key in LENGTHS[name] if isinstance(call[key], torch.Tensor) and call[key].numel()]
    for key in LENGTHS[name]:
        call[key] = on_device(call[key])
    call["out"] = on_device(call["out"])
    before = device_words(call["out"])
    with assumed_npu(), specops.backend(backend), pytest.raises(ValueError, match=f"{given[0]} is on .*host copy"):
        SPECS[name].wrapper(**call)
    assert DeviceStandIn.reads == [] and DeviceStandIn.uploads == [] and staging == [] and launched == []
    assert torch.equal(device_words(call["out"]), before)


@pytest.mark.parametrize("name", FAMILY)
def test_off_the_npu_device_lengths_go_to_the_kernel(name, staging, launched):
    call = SPECS[name].valid_call()
    for key in LENGTHS[name]:
        call[key] = on_device(call[key])
    call["out"] = on_device(call["out"])
    SPECS[name].wrapper(**call)
    assert launched == [name] and DeviceStandIn.reads == [] and staging == []


@pytest.mark.parametrize("name", FAMILY)
def test_host_and_device_lengths_together_are_refused(name, staging, launched):
    call = SPECS[name].valid_call()
    given = [key for key in LENGTHS[name] if isinstance(call[key], torch.Tensor) and call[key].numel()]
    call[given[-1]] = on_device(call[given[-1]])
    call["out"] = on_device(call["out"])
    with pytest.raises(ValueError, match=f"{given[-1]} is on .* but {given[0]} is on the host"):
        SPECS[name].wrapper(**call)
    assert DeviceStandIn.reads == [] and DeviceStandIn.uploads == [] and launched == []


def test_empty_device_placeholders_beside_host_lengths(staging):
    """vllm-ascend's builders keep an empty float32 seqused_q (and cu_seqlens_ori_kv) on the device:
    empty, they hold nothing to read, beside host lengths."""
    cu, kv = torch.tensor([0, 3, 4], dtype=torch.int32), torch.tensor([900, 70], dtype=torch.int32)
    arguments = dict(cu_seqlens_q=cu, seqused_kv=kv, batch_size=2, max_seqlen_q=3, max_seqlen_kv=900,
                     ori_win_left=127, layout_q="TND", has_cmp_kv=False, num_cube_cores=8, num_vector_cores=16,
                     soc_version="Ascend910B1")
    expected = specops.sas_metadata(64, 1, 512, **arguments)
    out = on_device(torch.full((1024,), 7, dtype=torch.int32))
    with assumed_npu():
        specops.sas_metadata(64, 1, 512, **arguments, seqused_q=on_device(torch.tensor([])),
                             cu_seqlens_ori_kv=on_device(torch.tensor([])), out=out)
    assert DeviceStandIn.reads == [] and len(DeviceStandIn.uploads) == 1
    assert torch.equal(device_words(out), expected)


def test_the_stand_in_fails_a_read():
    """The harness itself: each way of reading a device value fails."""
    tensor = on_device(torch.tensor([3, 4], dtype=torch.int32))
    for read in (lambda: tensor[1].item(), lambda: int(tensor[0]), lambda: tensor.cpu(), lambda: tensor.to("cpu"),
                 lambda: torch.empty(2, dtype=torch.int32).copy_(tensor), lambda: tensor.nonzero(),
                 lambda: bool(tensor.sum() > 0)):
        with pytest.raises(DeviceRead):
            read()
    assert len(DeviceStandIn.reads) == 7
    # .tolist() and .numpy() refuse a tensor subclass before any dispatch: a failure all the same.
    for read in (tensor.tolist, tensor.numpy):
        with pytest.raises(RuntimeError, match="subclass"):
            read()
    tensor.fill_(5)  # device work stays on the device
    assert device_words(tensor).tolist() == [5, 5]


class _PinnedRequests(TorchDispatchMode):
    """Answers a pinned allocation with a host one (none can be pinned here), noting the request."""

    def __init__(self):
        super().__init__()
        self.requests: list[bool] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.ops.aten.empty.memory_format:
            self.requests.append(bool(kwargs.pop("pin_memory", False)))
        return func(*args, **kwargs)


def test_the_staging_asks_for_pinned_memory(monkeypatch):
    monkeypatch.undo()  # the real pinned_words
    with _PinnedRequests() as mode:
        words = _sas_family.pinned_words()
    assert mode.requests == [True] and words.dtype == torch.int32 and words.numel() == 1024
