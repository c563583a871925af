"""Set-up of `make test-vllm-ascend`'s own process: the NPU stand-ins and the host shims
(ascend_host.py) before any of vllm-ascend's modules is imported, for the adapter tests that
call vllm-ascend's kernels and classes in this process (test_ascend_adapters.py). The drivers
run in processes of their own (test_vllm_ascend.py)."""

import importlib.util

import pytest

if importlib.util.find_spec("vllm_ascend") is None:
    raise pytest.UsageError("tests/vllm_ascend needs vllm-ascend's released package: run `make test-vllm-ascend`")

import ascend_host  # noqa: E402

ascend_host.apply()
