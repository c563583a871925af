"""Grid sizing shared by the launchers: persistent 1-D grids, one program per core."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from collections.abc import Iterator

import torch

from specops._backend import context_set

# The interpreter runs programs one after another; a few keep each task loop exercised.
INTERPRETER_PROGRAMS = 4

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


@functools.lru_cache(maxsize=None)
def _device_cores(device_type: str, index: int) -> int:
    import triton

    properties = triton.runtime.driver.active.utils.get_device_properties(index)
    # CUDA reports streaming multiprocessors; triton-ascend reports AI-core vector units.
    for key in ("num_vectorcore", "multiprocessor_count", "num_aicore"):
        if key in properties:
            return int(properties[key])
    return 32


def num_programs(device: torch.device, num_tasks: int) -> int:
    """Grid size for `num_tasks` independent tasks: min(tasks, cores), at least 1."""
    cores = _assumed_cores.get()
    if cores is None:
        if device.type == "cpu" or os.environ.get("TRITON_INTERPRET") == "1":
            cores = INTERPRETER_PROGRAMS
        else:
            cores = _device_cores(device.type, device.index if device.index is not None else 0)
    return max(1, min(num_tasks, cores))


def search_steps(num_items: int) -> int:
    """Iterations of a binary search over `num_items` sorted entries."""
    return max(1, (max(num_items, 1) - 1).bit_length())


def nonempty(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor, or one element of its dtype on its device when it is empty.

    Every lane that reads or writes an empty tensor is masked off, but triton-ascend issues a
    masked gather (or scatter) at every lane's offset, masked lanes included, and an offset of 0
    is outside an empty tensor. The element is never read for a result: one per dtype and
    device, allocated on first use and never filled (a masked lane may store to it), so a
    steady-state step allocates and launches nothing for it."""
    return tensor if tensor.numel() > 0 else _placeholder(tensor.dtype, tensor.device)


@functools.lru_cache(maxsize=None)
def _placeholder(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(1, dtype=dtype, device=device)
