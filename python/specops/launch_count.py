"""Counting the op launches of a block of code: specops ops and aten ops, separately.

On a GPU or NPU every op that reaches the dispatcher is at least one kernel launch (a specops op
is one Triton kernel; an aten op one or more of torch's), so the count of a step is a figure of
its fixed cost that no timing on this CPU-only machine shows. `LaunchCounter` is a
TorchDispatchMode: it sees every op called from Python, the specops wrappers' FastOp calls
included (they enter the dispatcher like `torch.ops.specops.NAME.default`), but not what an op
does below the dispatcher. Views (`aten.slice`, `aten.detach`, ...) change no data and launch
nothing: they are counted apart.

With `device_type` given ("cuda", "npu", or "meta" where meta tensors stand in for a device),
an op none of whose tensors is on that device is host work, not a launch, and is counted as
`host`; without it every op counts.

    with LaunchCounter() as counter:
        build_draft_attn_metadata(builders, common, 1)
    counter.counts.specops, counter.counts.aten, counter.counts.by_op
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import torch

from specops._fastpath import DispatchMode


@dataclasses.dataclass
class LaunchCounts:
    specops: int = 0  # specops ops: one device kernel each
    aten: int = 0  # aten (and other namespaces') ops that are not views: at least one kernel each
    views: int = 0  # aten views: metadata only, no launch
    host: int = 0  # ops on host tensors only (with a device_type): no launch
    by_op: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def launches(self) -> int:
        return self.specops + self.aten

    def __str__(self) -> str:
        return f"{self.specops} specops + {self.aten} aten"


def _tensor_devices(values) -> list[str]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value.device.type)
        elif isinstance(value, (list, tuple)):
            found += _tensor_devices(value)
    return found


class LaunchCounter(DispatchMode):
    """Counts the ops run inside the block (see the module docstring); `counts` holds the totals."""

    def __init__(self, device_type: str | None = None):
        super().__init__()
        self.device_type = device_type
        self.counts = LaunchCounts()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        counts = self.counts
        counts.by_op[name] += 1
        devices = _tensor_devices((*args, *kwargs.values()))
        if kwargs.get("device") is not None:  # a factory (torch.zeros(..., device=...)) has no tensor argument
            devices.append(torch.device(kwargs["device"]).type)
        if self.device_type is not None and self.device_type not in devices:
            counts.host += 1
        elif func.namespace == "specops":
            counts.specops += 1
        elif func.is_view:
            counts.views += 1
        else:
            counts.aten += 1
        return func(*args, **kwargs)


def count_launches(fn: Callable[[], object], device_type: str | None = None) -> LaunchCounts:
    """The ops one call of fn launches."""
    with LaunchCounter(device_type) as counter:
        fn()
    return counter.counts
