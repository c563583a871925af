"""vllm-ascend 0.26.0rc1 and vLLM 0.26.0 on a CPU-only host: what the drivers apply before any
of their kernel modules is imported.

- The NPU stand-ins (npu_stand_ins.py); the torchvision stand-in's folder (stand_ins/) is on
  the drivers' PYTHONPATH (test_vllm_ascend.py puts it there).
- The shims of tests/vllm_integration/host.py that hold for vLLM 0.26 as for 0.33 (none
  changes what a kernel computes): the real Triton in `vllm.triton_utils`, and the
  interpreter's masked loads and stores given a bool mask.
- vLLM 0.26's staging buffers (`buffer_utils.UvaBuffer`: `cpu`, `np` and a `uva` view) are host
  buffers that are their own device view, and `Tensor.pin_memory()` is the tensor itself:
  nothing can be pinned here, and every tensor already lives where the host reads it.
  vllm-ascend's worker patches replace `UvaBuffer` with a wrapper that pins and copies to the
  NPU; `worker_patches()` applies them and then puts the host buffer back.
"""

from __future__ import annotations

import os

_APPLIED = False


class _HostUvaBuffer:
    """vLLM 0.26's UvaBuffer on a CPU host: the host tensor is its own device view."""

    def __init__(self, size, dtype):
        import torch

        self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
        self.np = self.cpu.numpy()
        self.uva = self.cpu


def _host_buffers() -> None:
    from vllm.v1.worker.gpu import buffer_utils

    buffer_utils.UvaBuffer = _HostUvaBuffer


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("vllm-ascend's kernels on this host need TRITON_INTERPRET=1 set before the process starts")
    _APPLIED = True
    import ascend_ops
    import npu_stand_ins

    npu_stand_ins.install()
    ascend_ops.install()
    import torch

    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    from vllm_integration import host

    # Its masked-load fix and the real Triton for vLLM; its UvaBuffer is vLLM 0.33's shape, so
    # 0.26's replaces it below.
    host.apply()
    import vllm.utils.platform_utils

    vllm.utils.platform_utils.is_uva_available = lambda: True
    _host_buffers()
    # vllm-ascend's ops package first, as a worker imports it (NPUWorker.__init__): importing
    # its device operators before it is a circular import.
    import vllm_ascend.ops  # noqa: F401


def worker_patches() -> None:
    """vllm-ascend's worker patches (`adapt_patch()`, which `NPUWorker.__init__` calls after
    vLLM loaded the general plugins), then the host buffers again."""
    from vllm_ascend.utils import adapt_patch

    adapt_patch()
    _host_buffers()
    # NPUWorker.init_device's: the core counts vllm-ascend's kernels size their grids by.
    from vllm_ascend.ops.triton.triton_utils import init_device_properties_triton

    init_device_properties_triton()


def fake_for_the_guard(cfg) -> None:
    """The guard's tests: a faked version, or one target's signature altered."""
    if getattr(cfg, "fake_version", None):
        import vllm.version

        vllm.version.__version__ = cfg.fake_version
    if getattr(cfg, "fake_ascend_version", None):
        import vllm_ascend._version

        vllm_ascend._version.__version__ = vllm_ascend._version.version = cfg.fake_ascend_version
    if getattr(cfg, "alter", None):
        import functools
        import importlib

        module_name, qualname = cfg.alter.split(":")
        owner = importlib.import_module(module_name)
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)

        @functools.wraps(original)
        def altered(*args, new_argument=None, **kwargs):
            return original(*args, **kwargs)

        del altered.__wrapped__  # the new signature is what a reader sees
        setattr(owner, name, altered)


class FakePCPGroup:
    """get_pcp_group() for one process standing in for every PCP rank: the all-gather
    concatenates the local rows once per rank (the drivers replace the model; the rows only feed
    the stand-in sampler, identically in both runs)."""

    def __init__(self, world_size: int, rank: int):
        self.world_size = world_size
        self.rank_in_group = rank

    def all_gather(self, tensor, dim: int = 0):
        import torch

        return torch.cat([tensor] * self.world_size, dim=dim)
