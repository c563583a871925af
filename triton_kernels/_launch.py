"""Grid sizing shared by the launchers: persistent 1-D grids, one program per core."""

from __future__ import annotations

import functools
import os

import torch

# Where a launch is assumed to run (specops.launch_target), re-exported for the tests' imports.
from specops.launch_target import assumed_core_count, assumed_cores, assumed_npu, on_npu  # noqa: F401

# The interpreter runs programs one after another; a few keep each task loop exercised.
INTERPRETER_PROGRAMS = 4


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
    cores = assumed_core_count()
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
