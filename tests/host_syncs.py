"""Counting device-to-host reads and allocations: TorchDispatchModes that log the aten ops a
block runs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def _devices(values) -> list[torch.device]:
    return [v.device for v in values if isinstance(v, torch.Tensor)]


def _is_device_to_host(name: str, devices: list[torch.device], target) -> bool:
    off_host = [d for d in devices if d.type != "cpu"]
    if name == "_local_scalar_dense":
        return bool(off_host)
    if name in ("_to_copy", "to"):
        return bool(off_host) and target is not None and torch.device(target).type == "cpu"
    if name == "copy_":
        return len(devices) >= 2 and devices[0].type == "cpu" and devices[1].type != "cpu"
    return False


class OpLog(TorchDispatchMode):
    """Records (op, tensor argument devices, target device) of every op run inside the block,
    and the shapes of the tensors the ops return.

    device_values: for meta tensors standing in for device tensors (they hold no data), the
    host values a device-to-host read of a given source tensor returns; the read is logged
    and answered from them instead of failing.
    """

    def __init__(self, device_values: Callable[[torch.Tensor], torch.Tensor] | None = None):
        super().__init__()
        self.calls: list[tuple[str, list[torch.device], torch.device | None]] = []
        self.result_shapes: list[tuple[int, ...]] = []
        self.device_values = device_values

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = kwargs.get("device")
        name = str(func.overloadpacket.__name__)
        devices = _devices(args)
        self.calls.append((name, devices, target))
        if self.device_values is not None and _is_device_to_host(name, devices, target):
            result = self._answer_read(name, args)
        else:
            result = func(*args, **kwargs)
        for value in result if isinstance(result, (tuple, list)) else [result]:
            if isinstance(value, torch.Tensor):
                self.result_shapes.append(tuple(value.shape))
        return result

    def _answer_read(self, name: str, args):
        if name == "copy_":
            return args[0].copy_(self.device_values(args[1]))
        values = self.device_values(args[0])
        return values.item() if name == "_local_scalar_dense" else values.clone()

    def op_names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def scalar_reads(self) -> list[str]:
        """Every read of a tensor value into a Python scalar (.item(), int(t), .tolist())."""
        return [name for name, _, _ in self.calls if name == "_local_scalar_dense"]

    def device_to_host(self) -> list[str]:
        """Scalar reads of non-CPU tensors and copies from a non-CPU tensor to the host."""
        return [name for name, devices, target in self.calls if _is_device_to_host(name, devices, target)]


class AllocationCounter(TorchDispatchMode):
    """Records every op and the ones whose outputs live in newly allocated storage (views,
    in-place and out= ops share an input's storage and do not count)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self.allocating: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        self.ops.append(str(func))
        if any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs for t in tree_leaves(result)):
            self.allocating.append(str(func))
        return result
