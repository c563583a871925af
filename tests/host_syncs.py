"""Counting device-to-host reads: a TorchDispatchMode that logs every aten op a block runs."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _devices(values) -> list[torch.device]:
    return [v.device for v in values if isinstance(v, torch.Tensor)]


class OpLog(TorchDispatchMode):
    """Records (op, tensor argument devices, target device) of every op run inside the block,
    and the shapes of the tensors the ops return."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, list[torch.device], torch.device | None]] = []
        self.result_shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = kwargs.get("device")
        self.calls.append((str(func.overloadpacket.__name__), _devices(args), target))
        result = func(*args, **kwargs)
        for value in result if isinstance(result, (tuple, list)) else [result]:
            if isinstance(value, torch.Tensor):
                self.result_shapes.append(tuple(value.shape))
        return result

    def op_names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def scalar_reads(self) -> list[str]:
        """Every read of a tensor value into a Python scalar (.item(), int(t), .tolist())."""
        return [name for name, _, _ in self.calls if name == "_local_scalar_dense"]

    def device_to_host(self) -> list[str]:
        """Scalar reads of non-CPU tensors and copies from a non-CPU tensor to the host."""
        found = []
        for name, devices, target in self.calls:
            off_host = [d for d in devices if d.type != "cpu"]
            if name == "_local_scalar_dense" and off_host:
                found.append(name)
            elif name in ("_to_copy", "to") and off_host and target is not None and torch.device(target).type == "cpu":
                found.append(name)
            elif name == "copy_" and len(devices) >= 2 and devices[0].type == "cpu" and devices[1].type != "cpu":
                found.append(name)
        return found
