"""A device tensor on a machine without a device, for the tests that must prove a path reads no
device value on the host (the sas family's host-planned route, the drafting layer on top).

`DeviceStandIn` is a tensor subclass whose values live in a host tensor (`inner`) that only its
own dispatch can reach. It reports the `meta` device: every torch build has it, it holds no data
(so no kernel can compute on it behind the subclass's back), and a meta tensor has the device
guard a wrapper subclass needs, which a `cuda` or `npu` one lacks on a CPU-only build. What a
real device tensor does is kept where it matters:
- a specops op called with one goes to the op's device kernel (the PrivateUse1 key, the one an
  NPU tensor reaches; CUDA's runs the same Python), through the dispatcher as on a device;
- an op that runs on the device (a fill, a copy into it, a view) runs on `inner` and stays a
  stand-in;
- an op that brings a value to the host is refused and logged: `_local_scalar_dense` (`.item()`,
  `int(t)`, `.tolist()`), a copy or `.to()` onto the CPU, an op whose result's shape or value
  needs the host to see the data (`nonzero`, `equal`, ...), anything else returning a host value.
  The refusal is a `DeviceRead` (an AssertionError), so a path that reads fails its test;
  `.tolist()` and `.numpy()` refuse a tensor subclass before any dispatch (a RuntimeError).
Copies into a stand-in from the host are logged (`uploads`: the words and whether the copy was
non-blocking), so a test can count them and check what reached the "device".

`stand_in_npu` stands in torch_npu's device properties, where the sas family and the drafting
layer read the core counts and SoC of an NPU; with `specops.triton_kernels._launch.assumed_npu`
any device is then an NPU with those properties.
"""

from __future__ import annotations

import types
from typing import NamedTuple

import torch
from torch.utils._pytree import tree_map

# Ops that need the data on the host (their result's shape or value depends on it): a sync on a
# device even when their result stays there (as tests/host_syncs.py counts them).
_VALUE_DEPENDENT = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_consecutive",
                    "unique_dim", "equal", "is_nonzero", "repeat_interleave"}


class DeviceRead(AssertionError):
    """A device tensor's value was asked for on the host."""


class Upload(NamedTuple):
    words: torch.Tensor  # a host copy of what was copied in
    non_blocking: bool


class DeviceStandIn(torch.Tensor):
    """A device tensor whose values are `inner` (a host tensor); see the module docstring."""

    reads: list[str] = []  # every refused read, all stand-ins together (reset by `reset_log`)
    uploads: list[Upload] = []

    @staticmethod
    def __new__(cls, inner: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, strides=inner.stride(),
                                                   storage_offset=inner.storage_offset(), device=torch.device("meta"))

    def __init__(self, inner: torch.Tensor):
        self.inner = inner

    def __repr__(self) -> str:
        return f"DeviceStandIn(shape={list(self.shape)}, dtype={self.dtype})"

    @classmethod
    def reset_log(cls) -> None:
        cls.reads.clear()
        cls.uploads.clear()

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func.namespace == "specops":
            # The op's device kernel, as a device tensor reaches it.
            keys = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
            return func.redispatch(keys, *args, **kwargs)
        name = func.overloadpacket.__name__
        if name == "copy_" and isinstance(args[0], DeviceStandIn) and not isinstance(args[1], DeviceStandIn):
            non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
            cls.uploads.append(Upload(args[1].detach().clone(), bool(non_blocking)))
            args[0].inner.copy_(args[1])
            return args[0]
        if name in _VALUE_DEPENDENT or name in ("_to_copy", "to") and _to_host(args, kwargs) or \
                name == "copy_" and not isinstance(args[0], DeviceStandIn):
            cls.reads.append(str(func))
            raise DeviceRead(f"{func} read a device tensor's values on the host")
        result = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        for value in result if isinstance(result, (tuple, list)) else [result]:
            if not isinstance(value, torch.Tensor):
                cls.reads.append(str(func))
                raise DeviceRead(f"{func} returned a host value computed from a device tensor")
        if func._schema.returns and func._schema.returns[0].alias_info is not None:
            return _aliased_result(func, args, result)
        return tree_map(lambda value: DeviceStandIn(value) if isinstance(value, torch.Tensor) else value, result)


def _unwrap(value):
    return value.inner if isinstance(value, DeviceStandIn) else value


def _to_host(args, kwargs) -> bool:
    target = kwargs.get("device")
    return target is not None and torch.device(target).type == "cpu"


def _aliased_result(func, args, result):
    """An in-place op (fill_, zero_) returns its first argument: the stand-in itself. A view
    returns a new stand-in over the view of `inner`."""
    if func._schema.returns[0].alias_info.is_write:
        return args[0]
    return DeviceStandIn(result)


def on_device(tensor: torch.Tensor | None) -> DeviceStandIn | None:
    """A stand-in holding a copy of `tensor` (None stays None)."""
    return None if tensor is None else DeviceStandIn(tensor.clone())


def device_words(tensor: DeviceStandIn) -> torch.Tensor:
    """What the stand-in holds, for the test's own check after the call (not a device read of
    the code under test: the test reads `inner`, as it would synchronize on a device)."""
    return tensor.inner.clone()


def stand_in_npu(monkeypatch) -> tuple[dict[int, types.SimpleNamespace], list[int]]:
    """A stand-in torch_npu (`torch.npu`, undone with `monkeypatch`): device i reports the
    properties in `table[i]` (name, and cube_core_num / vector_core_num where the test gives
    them), the current device is 0, and each read appends its index to `reads`. The caller
    clears specops' per-device platform cache around its test (specops.ascend_platform)."""
    table: dict[int, types.SimpleNamespace] = {}
    reads: list[int] = []

    def get_device_properties(index):
        reads.append(index)
        return table[index]

    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(
        current_device=lambda: 0, is_available=lambda: True, get_device_properties=get_device_properties),
        raising=False)
    return table, reads
