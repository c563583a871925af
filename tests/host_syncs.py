"""Counting what a block of code asks of the dispatcher: host syncs and tensor allocations.

`OpLog` is a TorchDispatchMode that logs every aten (and specops) op a block runs. From the
log it tells which ops read a tensor value on the host (a device-to-host sync on a GPU or NPU)
and which allocate a tensor. It sees the ops that reach the dispatcher from Python; what a C++
kernel allocates below the dispatcher is counted by `native_allocations` (the profiler's
memory events), and `triton_launches_unlogged` keeps the Triton interpreter's own copies out
of the log so that a launcher is judged by what it does itself. One module for every test
that counts (the steady-state tests, the drafting layer's, the persistent mappings').
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

# Ops whose result depends on tensor values that must reach the host first: a sync on a device.
_VALUE_DEPENDENT_OPS = {
    "_local_scalar_dense",  # .item(), int(t), float(t), bool(t), .tolist()
    "nonzero", "masked_select", "_unique2", "unique_consecutive", "unique_dim", "equal", "is_nonzero",
}


def _devices(values) -> list[torch.device]:
    return [v.device for v in values if isinstance(v, torch.Tensor)]


def _allocates(func) -> bool:
    """A new tensor: the schema returns a Tensor (or list of them) without an alias annotation.
    Views (Tensor(a)) and in-place or out= mutations (Tensor(a!)) return existing storage."""
    return any(str(ret.type) in ("Tensor", "Tensor[]", "Optional[Tensor]", "List[Tensor]") and ret.alias_info is None
               for ret in func._schema.returns)


def _syncs(name: str, kwargs: dict) -> bool:
    if name == "repeat_interleave":
        return kwargs.get("output_size") is None  # the output length is the sum of the repeats
    return name in _VALUE_DEPENDENT_OPS


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
    whether it allocated or needed tensor values on the host, and the shapes it returned.
    `ops` lists every op (as "aten.add.Tensor", "specops.compute_slot_mapping.default").

    device_values: for meta tensors standing in for device tensors (they hold no data), the
    host values a device-to-host read of a given source tensor returns; the read is logged
    and answered from them instead of failing.
    """

    def __init__(self, device_values: Callable[[torch.Tensor], torch.Tensor] | None = None):
        super().__init__()
        self.calls: list[tuple[str, list[torch.device], torch.device | None]] = []
        self.ops: list[str] = []
        self.result_shapes: list[tuple[int, ...]] = []
        self.device_values = device_values
        self._allocating: list[str] = []
        self._syncing: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = kwargs.get("device")
        name = str(func.overloadpacket.__name__)
        devices = _devices(args)
        self.calls.append((name, devices, target))
        self.ops.append(str(func))
        if _allocates(func):
            self._allocating.append(str(func))
        if _syncs(name, kwargs):
            self._syncing.append(str(func))
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

    def host_syncs(self) -> list[str]:
        """Ops that would wait for a device: value reads, value-dependent shapes, device-to-host
        copies. On CPU tensors they cost nothing, but the same code on a device would sync."""
        return self._syncing + [name for name in self.device_to_host() if name != "_local_scalar_dense"]

    def allocations(self) -> list[str]:
        """Ops that returned a new tensor."""
        return list(self._allocating)


def native_allocations(step: Callable[[], object]) -> list[tuple[str, int]]:
    """(op, bytes) of every CPU allocation made while `step` runs, including those inside C++
    kernels, from the profiler's memory events."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    return [(event.name, event.cpu_memory_usage) for event in prof.events() if event.cpu_memory_usage > 0]


@contextlib.contextmanager
def triton_launches_unlogged() -> Iterator[None]:
    """Runs every interpreted Triton launch with the dispatch modes suspended: the interpreter
    copies each argument's storage to and from the host, which a compiled launch does not.

    The hook is GridExecutor.__call__, which every interpreted launch goes through in Triton 3.9
    (from InterpretedFunction.run) and in triton-ascend 3.2 (from InterpretedFunction.__getitem__,
    whose `run` is an instance attribute, not a method to replace)."""
    from triton.runtime.interpreter import GridExecutor

    run = GridExecutor.__call__

    def run_unlogged(self, *args, **kwargs):
        with _disable_current_modes():
            return run(self, *args, **kwargs)

    GridExecutor.__call__ = run_unlogged
    try:
        yield
    finally:
        GridExecutor.__call__ = run
