"""Test set-up shared by every op's tests.

TRITON_INTERPRET must be set before any Triton kernel module is imported, so it is set here,
before specops, whenever no GPU or NPU is present: every Triton kernel then runs on CPU
tensors through Triton's interpreter.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import specops  # noqa: E402

settings.register_profile(
    "specops",
    deadline=None,  # the Triton interpreter is slow and the machine is noisy: no time limits
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
    derandomize=True,
)
settings.load_profile("specops")

# SPECOPS_TEST_BACKENDS=native restricts the backend fixture (the sanitizer run uses it: the
# Triton interpreter and the reference gain nothing from ASan).
_requested = os.environ.get("SPECOPS_TEST_BACKENDS")
BACKENDS = [b for b in specops.available_backends() if not _requested or b in _requested.split(",")]

if os.environ.get("SPECOPS_REQUIRE_SANITIZED") == "1" and not specops.EXTENSION.sanitize:
    raise pytest.UsageError(f"expected the ASan/UBSan build of specops, got {specops.__file__}")


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Runs the test body under each usable backend; yields its name."""
    with specops.backend(request.param):
        yield request.param


@pytest.fixture
def device() -> torch.device:
    return torch.device("cpu")
