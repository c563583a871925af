"""Set-up of the conformance suite: vLLM's released code, imported, run beside specops.

`make test-peers` downloads the vllm wheel (no dependencies), unpacks its Python modules into
build/peers/vllm-<version>/site, installs the small packages those modules import into build/peers/deps, and
runs this directory with both folders on PYTHONPATH. Nothing of vLLM is copied into specops:
the tests call vLLM's own classes and kernels.

vLLM's GPU model-runner code runs on this CPU-only host through the shims of
tests/vllm_integration/host.py (which says why each is needed; none changes what a kernel computes),
applied before any vLLM kernel module is imported; TRITON_INTERPRET=1 is set by the parent conftest.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

if importlib.util.find_spec("vllm") is None:
    raise pytest.UsageError("tests/peers needs vLLM's released package: run `make test-peers` from the repository root")

from vllm_integration import host  # noqa: E402  (tests/ is on sys.path: the parent conftest's folder)

host.apply()

import specops  # noqa: E402

# Every specops backend is compared with vLLM inside each test (vLLM's side runs once); the
# parent conftest's SPECOPS_TEST_BACKENDS restricts them in the same way.
_requested = os.environ.get("SPECOPS_TEST_BACKENDS")
BACKENDS = [b for b in specops.available_backends() if not _requested or b in _requested.split(",")]
