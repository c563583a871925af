"""Which tensors stand for device tensors, and what a step costs on the device: kernel launches
(every tensor op with a device operand, each custom op and specops op, each Triton launch) and
device-to-host reads, on a host where every tensor is a CPU tensor; a read inside one of the
plugin's adapters (instruments.watch_adapters marks them) is a host sync in that adapter.

The model runner's instruments (tests/vllm_integration/instruments.py) count Triton and specops
launches and take every tensor for a device one. The DSA-CP metadata builders work mostly with
tensor ops, on device tensors and on the runner's host copies alike (`query_start_loc_cpu`,
`seq_lens_cpu`), so here each storage is classified:

- device: the tensors the driver registers (the runner's buffers, the builders' own), the
  outputs of factory ops asked for on `DEVICE` (`torch.device("cpu", 0)`: the drivers' device,
  a CPU device the dispatcher tells apart from `"cpu"`), the buffers specops allocates on its
  builders' device (a tensor reports `cpu` for `cpu:0`, so specops' drafting builders hold
  `cpu`: a specops line that names `device=` allocates a device buffer, its host staging blocks
  name none), and the outputs of any op with a device operand;
- host: everything else (the host copies, numpy views, tensors made on `"cpu"`).

An op with a device operand is one launch (on an NPU each is a kernel), views excepted. A
device-to-host read is `_local_scalar_dense` of a device tensor (`.item()`, `int(t)`), a copy
(`copy_`, `_to_copy`) from a device tensor into a host one, and `Tensor.tolist` / `numpy` /
`cpu` of a device tensor (`.cpu()` returns a host copy: the same values, a storage of its own).
Custom ops (`torch.ops._C_ascend.*`, specops' ops) count one launch each however they are
implemented: the mode does not see inside them.
"""

from __future__ import annotations

import collections
import functools
import linecache
import sys
from pathlib import Path

import torch
from instruments import _in_adapter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

DEVICE = torch.device("cpu", 0)
_TORCH = str(Path(torch.__file__).parent)


def _specops_device_allocation() -> bool:
    """Whether the factory op running now was called from a line of specops that names device=."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH) or
                                 frame.f_code.co_filename == __file__):
        frame = frame.f_back
    if frame is None or "/specops/" not in frame.f_code.co_filename:
        return False
    return "device=" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
_SYNC_TO_HOST = ("aten::_local_scalar_dense",)


def _storage(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except RuntimeError:
        return 0


class Costs:
    def __init__(self):
        self.launches = collections.Counter()  # op name -> launches
        self.d2h = collections.Counter()  # what read the device -> count
        self.adapter_d2h = collections.Counter()  # "point: what" -> reads inside the plugin's adapters
        self.host_ops = 0

    def read(self, what: str) -> None:
        self.d2h[what] += 1
        point = _in_adapter.get()
        if point is not None:
            self.adapter_d2h[f"{point}: {what}"] += 1

    def as_dict(self) -> dict:
        return {"launches": sum(self.launches.values()), "by_op": dict(self.launches), "d2h": sum(self.d2h.values()),
                "d2h_by": dict(self.d2h), "adapter_d2h": dict(self.adapter_d2h), "host_ops": self.host_ops}


class DeviceModel(TorchDispatchMode):
    """Classifies storages and counts a step's launches and device-to-host reads."""

    def __init__(self):
        super().__init__()
        self.device_storages: set[int] = set()
        self.costs = Costs()
        self._wrapped = []

    # What the driver declares.
    def register(self, *tensors) -> None:
        for t in tensors:
            if isinstance(t, torch.Tensor) and _storage(t):
                self.device_storages.add(_storage(t))

    def register_attributes(self, owner) -> None:
        """Every tensor attribute of an object (and in its lists and dicts) is a device tensor."""
        for value in vars(owner).values():
            items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            self.register(*[v for v in items if isinstance(v, torch.Tensor)])

    def is_device(self, t: torch.Tensor) -> bool:
        return _storage(t) in self.device_storages

    def step_costs(self) -> Costs:
        costs, self.costs = self.costs, Costs()
        return costs

    def _mark(self, outputs, device: bool) -> None:
        for out in tree_flatten(outputs)[0]:
            if isinstance(out, torch.Tensor) and _storage(out):
                if device:
                    self.device_storages.add(_storage(out))
                else:
                    self.device_storages.discard(_storage(out))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        name = func.name()
        on_device = [t for t in inputs if self.is_device(t)]
        out = func(*args, **kwargs)
        if func._schema.is_mutable or name in ("aten::copy_",):
            # In place: the written tensor keeps its side; a copy from a device operand into a host
            # tensor is a device-to-host read.
            written = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if name == "aten::copy_" and written is not None and not self.is_device(written) and on_device:
                self.costs.read("copy_ to host")
                return out
            if written is not None and self.is_device(written):
                self.costs.launches[name] += 1
                return out
        if name in _SYNC_TO_HOST:
            if on_device:
                self.costs.read(name)
            return out
        if name == "aten::_to_copy" and on_device and kwargs.get("device") == torch.device("cpu"):
            self.costs.read("to host")
            self._mark(out, device=False)
            return out
        factory_device = kwargs.get("device")
        device = bool(on_device) or (not inputs and (factory_device == DEVICE or (
            factory_device is not None and _specops_device_allocation()))) or (
            name == "aten::_to_copy" and factory_device == DEVICE)
        if func.is_view or name in ("aten::lift_fresh", "aten::alias"):
            return out
        if device:
            self.costs.launches[name] += 1
        else:
            self.costs.host_ops += 1
        self._mark(out, device=device)
        return out

    def __enter__(self):
        model = self
        for name in ("tolist", "numpy", "__array__", "cpu"):
            original = getattr(torch.Tensor, name)

            @functools.wraps(original)
            def read(tensor, *args, _name=name, _original=original, **kwargs):
                if model.is_device(tensor):
                    model.costs.read(f"Tensor.{_name}")
                    if _name == "cpu":
                        with torch.utils._python_dispatch._disable_current_modes():
                            return tensor.clone()
                return _original(tensor, *args, **kwargs)

            setattr(torch.Tensor, name, read)
            self._wrapped.append((name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in reversed(self._wrapped):
            setattr(torch.Tensor, name, original)
        self._wrapped.clear()
        return super().__exit__(*exc)
