"""The three platform arguments of the sas family (num_cube_cores, num_vector_cores, soc_version)
for a call that leaves some out: taken from the NPU the schedule is for, never a default.

The AI-CPU kernels read them from the platform they run on; a host-planned schedule must be told,
or ask the device. A default (the old 24 / 48 / "Ascend910B1") gave a silently wrong schedule on
a chip with other counts, so a call whose schedule is not bound for an NPU must give all three
(docs/sas_metadata.md, "Core counts and SoC").
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from specops.launch_target import on_npu


def plans_on_host(device: torch.device) -> bool:
    """Whether the sas family plans every schedule for `device` on the host (the NPU, where the
    kernel does not compile; `specops.launch_target.assumed_npu` makes any device one)."""
    return on_npu(device)


class Platform(NamedTuple):
    num_cube_cores: int
    num_vector_cores: int
    soc_version: str


# Cube and vector core counts by SoC name, for a torch_npu whose device properties lack the
# counts: CANN's platform_config/<SoC>.ini (cube_core_cnt, vector_core_cnt). Only the SoCs
# whose files were read are here; any other asks the caller for the counts.
SOC_CORES: dict[str, tuple[int, int]] = {
    "Ascend910B1": (24, 48),
    "Ascend910B2": (24, 48),
    "Ascend910B4": (20, 40),
    "Ascend950PR_958b": (32, 64),
}

_ARGUMENTS = ("num_cube_cores", "num_vector_cores", "soc_version")


def resolved_platform(num_cube_cores: int | None, num_vector_cores: int | None, soc_version: str | None,
                      device: torch.device) -> Platform:
    """The three arguments, each as given or, when None, from the NPU `device` (the output's):
    torch_npu's device properties, else the SoC name's row of SOC_CORES; cached per device. Off
    the NPU every one must be given: a ValueError names the first missing one."""
    given = (num_cube_cores, num_vector_cores, soc_version)
    if not plans_on_host(device):
        raise ValueError(f"{_ARGUMENTS[given.index(None)]} must be given: the output is on {device}, so there is no "
                         "NPU to read it from (pass num_cube_cores, num_vector_cores and soc_version of the device the "
                         "schedule is for, or out / device= on that NPU)")
    platform = device_platform(device)
    return Platform(*(value if value is not None else found for value, found in zip(given, platform)))


def device_platform(device: torch.device) -> Platform:
    """The NPU's counts and SoC name (an index-less device: the current NPU)."""
    npu = getattr(torch, "npu", None)
    if npu is None:
        raise ValueError("num_cube_cores must be given: torch_npu is not loaded, so the NPU's core counts cannot "
                         "be read (pass num_cube_cores, num_vector_cores and soc_version)")
    return _cached_platform(device.type, npu.current_device() if device.index is None else device.index)


@functools.lru_cache(maxsize=None)
def _cached_platform(device_type: str, index: int) -> Platform:
    properties = torch.npu.get_device_properties(index)
    soc = str(properties.name)
    cube, vector = getattr(properties, "cube_core_num", 0), getattr(properties, "vector_core_num", 0)
    if not (isinstance(cube, int) and cube > 0 and isinstance(vector, int) and vector > 0):
        if soc not in SOC_CORES:
            raise ValueError(f"num_cube_cores must be given: {device_type}:{index} ({soc!r}) reports no core counts "
                             "and its SoC is not in specops' table (pass num_cube_cores and num_vector_cores)")
        cube, vector = SOC_CORES[soc]
    return Platform(cube, vector, soc)


def clear_platform_cache() -> None:
    """Forget every device read (tests that stand in a device's properties)."""
    _cached_platform.cache_clear()
