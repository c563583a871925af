"""Where a Triton launch is assumed to run: the NPU route and the core count a report or a test
stands in for, whatever device the tensors are on (triton_kernels/_launch.py reads both).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from specops._backend import context_set

# Set by `assumed_npu`: launchers take their NPU route, whatever device their tensors are on.
_assumed_npu: contextvars.ContextVar[bool] = contextvars.ContextVar("specops_assumed_npu", default=False)

# Set by `assumed_cores`: the grid a device with that many cores would get, wherever the launch runs.
_assumed_cores: contextvars.ContextVar[int | None] = contextvars.ContextVar("specops_assumed_cores", default=None)


@contextlib.contextmanager
def assumed_cores(cores: int) -> Iterator[None]:
    """Inside the block, launchers size their grids for a device of `cores` cores (SMs, CUs or
    vector cores). The kernel report uses it to show what each benchmark case launches on a
    device this machine does not have."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    with context_set(_assumed_cores, cores):
        yield


@contextlib.contextmanager
def assumed_npu() -> Iterator[None]:
    """Inside the block, launchers that route the NPU differently (the sas family: the host op
    and one asynchronous copy) take that route on any device: the NPU-route checks (tests/ascend)
    run it on CPU tensors."""
    with context_set(_assumed_npu, True):
        yield


def on_npu(device: torch.device) -> bool:
    """Whether a launch on `device` takes the NPU route (torch_npu names its device `npu`)."""
    return device.type == "npu" or _assumed_npu.get()


def assumed_core_count() -> int | None:
    """The core count `assumed_cores` set, None outside it."""
    return _assumed_cores.get()
