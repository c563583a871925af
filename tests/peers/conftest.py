"""Set-up of the conformance suite: vLLM's released code, imported, run beside specops.

`make test-peers` downloads the vllm wheel (no dependencies), unpacks its Python modules into
build/peers/site, installs the small packages those modules import into build/peers/deps, and
runs this directory with both folders on PYTHONPATH. Nothing of vLLM is copied into specops:
the tests call vLLM's own classes and kernels.

Four things make vLLM's GPU model-runner code run on a CPU-only host, none of which changes what
its kernels compute:
- vLLM hands out a placeholder Triton when no GPU driver is active; `vllm.triton_utils` is
  given the real Triton before any kernel module is imported, and TRITON_INTERPRET=1 (set by
  the parent conftest) runs the kernels on CPU tensors.
- Triton's interpreter rejects a load/store mask built as `scalar_bool & block_bool`, which a
  GPU compiles (vLLM's slot-mapping kernel has one): the interpreter's masked load and store
  get the mask cast to bool first.
- vLLM's staging buffers are pinned host memory seen by the device through UVA. On a CPU host
  the "device view" of a host buffer is the buffer itself, and nothing can be pinned.
- `update_num_computed_tokens_for_batch_change` is wrapped in torch.compile with the platform's
  compile backend; its Python body (the same torch ops) runs eagerly here.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    raise pytest.UsageError("tests/peers needs vLLM's released package: run `make test-peers` from the repository root")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

_masked_load = interpreter.InterpreterBuilder.create_masked_load
_masked_store = interpreter.InterpreterBuilder.create_masked_store


def _as_bool(mask):
    return interpreter.TensorHandle(mask.data.astype(bool), tl.int1)


def _create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
    return _masked_load(self, ptrs, _as_bool(mask), other, cache_policy, is_volatile)


def _create_masked_store(self, ptrs, value, mask, cache_policy):
    return _masked_store(self, ptrs, value, _as_bool(mask), cache_policy)


interpreter.InterpreterBuilder.create_masked_load = _create_masked_load
interpreter.InterpreterBuilder.create_masked_store = _create_masked_store

import vllm.triton_utils  # noqa: E402

vllm.triton_utils.triton, vllm.triton_utils.tl, vllm.triton_utils.HAS_TRITON = triton, tl, True

import vllm.utils.torch_utils  # noqa: E402
from vllm.v1.worker.gpu import buffer_utils  # noqa: E402

vllm.utils.torch_utils.PIN_MEMORY = False


class HostUvaBuffer:
    """vLLM's UvaBuffer on a CPU host: the host tensor is its own device view."""

    def __init__(self, size, dtype: torch.dtype):
        self.cpu = torch.zeros(size, dtype=dtype, device="cpu")
        self.np = self.cpu.numpy()

    def uva(self, n: int | None = None) -> torch.Tensor:
        return self.cpu[:n] if n is not None else self.cpu


buffer_utils.UvaBuffer = HostUvaBuffer

import specops  # noqa: E402

# Every specops backend is compared with vLLM inside each test (vLLM's side runs once); the
# parent conftest's SPECOPS_TEST_BACKENDS restricts them in the same way.
_requested = os.environ.get("SPECOPS_TEST_BACKENDS")
BACKENDS = [b for b in specops.available_backends() if not _requested or b in _requested.split(",")]
