"""The compile targets of the ahead-of-time kernel builds, and the devices their grids are sized for."""

from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class Target:
    """A compile target and the device the report sizes grids for."""

    name: str  # "sm_90"
    backend: str  # the target's backend: "cuda", "hip", "npu"
    arch: int | str
    warp_size: int
    cores: int  # streaming multiprocessors / compute units / vector cores of `device`
    device: str
    plugin: str  # the folder of triton/backends that compiles for it

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    def installed(self) -> bool:
        """Whether the installed Triton can compile for this target (upstream Triton ships the
        CUDA and AMD backends; triton-ascend replaces them with its NPU backend)."""
        from triton.backends import backends

        return self.plugin in backends


TARGETS = (
    Target("sm_80", "cuda", 80, 32, 108, "A100", "nvidia"),
    Target("sm_90", "cuda", 90, 32, 132, "H100 SXM", "nvidia"),
    Target("gfx942", "hip", "gfx942", 64, 304, "MI300X", "amd"),
)
# triton-ascend's target (SPECOPS_NPU_ARCH picks the chip); compiled where triton-ascend is installed.
NPU_TARGET = Target("npu", "npu", os.environ.get("SPECOPS_NPU_ARCH", "Ascend910B4"), 0, 48, "Atlas 800I A2", "ascend")


def installed_targets() -> tuple[Target, ...]:
    return tuple(target for target in (*TARGETS, NPU_TARGET) if target.installed())
