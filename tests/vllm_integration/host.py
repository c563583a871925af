"""vLLM's GPU model-runner code (0.33, 0.34) on a CPU-only host: the shims both vLLM suites apply
(tests/peers/conftest.py and the drivers here) before any vLLM kernel module is imported.

None of them changes what a kernel computes:
- vLLM hands out a placeholder Triton when no GPU driver is active; `vllm.triton_utils` is
  given the real Triton, and TRITON_INTERPRET=1 runs the kernels on CPU tensors.
- Triton's interpreter rejects a load/store mask built as `scalar_bool & block_bool`, which a
  GPU compiles (vLLM's slot-mapping kernel has one): the interpreter's masked load and store
  get the mask cast to bool first.
- vLLM's staging buffers are pinned host memory seen by the device through UVA. On a CPU host
  the "device view" of a host buffer is the buffer itself, and nothing can be pinned.
The PCP group's all_gather (PCPManager.restore_hidden_states) is a stand-in that concatenates
the local rows once per rank: the drivers replace the model, and the rows it restores only feed
the stand-in sampler and drafter, identically in both runs; its broadcast (PCPManager.sync_drafts)
leaves the drafts as they are (every rank is this process).
"""

from __future__ import annotations

import os

_APPLIED = False


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("vLLM's kernels on this host need TRITON_INTERPRET=1 set before the process starts")
    _APPLIED = True
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    masked_load = interpreter.InterpreterBuilder.create_masked_load
    masked_store = interpreter.InterpreterBuilder.create_masked_store

    def as_bool(mask):
        return interpreter.TensorHandle(mask.data.astype(bool), tl.int1)

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        return masked_load(self, ptrs, as_bool(mask), other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        return masked_store(self, ptrs, value, as_bool(mask), cache_policy)

    interpreter.InterpreterBuilder.create_masked_load = create_masked_load
    interpreter.InterpreterBuilder.create_masked_store = create_masked_store

    import vllm.triton_utils

    vllm.triton_utils.triton, vllm.triton_utils.tl, vllm.triton_utils.HAS_TRITON = triton, tl, True

    import vllm.utils.torch_utils
    from vllm.v1.worker.gpu import buffer_utils

    vllm.utils.torch_utils.PIN_MEMORY = False

    class HostUvaBuffer:
        """vLLM's UvaBuffer on a CPU host: the host tensor is its own device view."""

        def __init__(self, size, dtype: torch.dtype):
            self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
            self.np = self.cpu.numpy()

        def uva(self, n: int | None = None) -> torch.Tensor:
            return self.cpu[:n] if n is not None else self.cpu

    buffer_utils.UvaBuffer = HostUvaBuffer


class FakePCPGroup:
    """get_pcp_group() for one process standing in for every PCP rank (see the module docstring)."""

    def __init__(self, world_size: int, rank: int):
        self.world_size = world_size
        self.rank_in_group = rank

    def all_gather(self, tensor, dim: int = 0):
        import torch

        return torch.cat([tensor] * self.world_size, dim=dim)

    def broadcast(self, tensor, src: int = 0):
        """Every rank's copy is this process's (PCPManager.sync_drafts): nothing to receive."""
        return tensor
