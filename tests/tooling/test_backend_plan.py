"""The backends a test run covers: a backend that cannot run is a counted skip and fails the run,
unless SPECOPS_TEST_BACKENDS leaves it out on purpose (tests/conftest.py, docs/testing.md)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
from conftest import backend_plan

USABLE = {"native": "usable", "triton": "usable", "reference": "usable"}
NO_TRITON = {**USABLE, "triton": "no CUDA or NPU device, and TRITON_INTERPRET=1 was not set before import"}


def test_every_backend_is_wanted_by_default():
    assert backend_plan(USABLE, None) == (["native", "triton", "reference"], ["native", "triton", "reference"], {})


def test_a_backend_that_cannot_run_is_missing_with_its_reason():
    wanted, usable, missing = backend_plan(NO_TRITON, None)
    assert wanted == ["native", "triton", "reference"]
    assert usable == ["native", "reference"]
    assert missing == {"triton": NO_TRITON["triton"]}


def test_the_environment_variable_leaves_backends_out_on_purpose():
    assert backend_plan(NO_TRITON, "native,reference") == (["native", "reference"], ["native", "reference"], {})
    assert backend_plan(NO_TRITON, "native") == (["native"], ["native"], {})
    assert backend_plan(NO_TRITON, "triton")[2] == {"triton": NO_TRITON["triton"]}


def test_an_unknown_backend_name_is_a_usage_error():
    with pytest.raises(pytest.UsageError, match="tritn"):
        backend_plan(USABLE, "native,tritn")


def run_pytest_without_triton(**environment: str) -> subprocess.CompletedProcess:
    """A child run of one small backend-parametrized test with the Triton interpreter off (and
    no GPU here), as on a machine whose Triton broke."""
    env = {name: value for name, value in os.environ.items()
           if name not in ("SPECOPS_TEST_BACKENDS", "PYTEST_XDIST_WORKER")}
    env.update(TRITON_INTERPRET="0", **environment)
    tests = pathlib.Path(__file__).resolve().parents[1]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                           "ops/test_dcp_local_seq_lens.py::test_peer_unit_test_sfa_cp"],
                          cwd=tests, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the child needs this run's CPU-only set-up")
@pytest.mark.skipif(os.environ.get("SPECOPS_REQUIRE_SANITIZED") == "1", reason="the sanitizer run tests native ops only")
def test_a_run_without_triton_fails_and_says_why():
    import torch

    if torch.cuda.is_available():
        pytest.skip("Triton runs on this machine's GPU whatever TRITON_INTERPRET says")
    shrunk = run_pytest_without_triton()
    assert shrunk.returncode == pytest.ExitCode.TESTS_FAILED, shrunk.stdout + shrunk.stderr
    assert "2 passed, 1 skipped" in shrunk.stdout, shrunk.stdout
    assert "silently shrunk: 1; missing: triton (no CUDA or NPU device" in shrunk.stdout, shrunk.stdout
    narrowed = run_pytest_without_triton(SPECOPS_TEST_BACKENDS="native,reference")
    assert narrowed.returncode == pytest.ExitCode.OK, narrowed.stdout + narrowed.stderr
    assert "2 passed" in narrowed.stdout and "skipped" not in narrowed.stdout, narrowed.stdout
    assert "silently shrunk: 0; missing: none" in narrowed.stdout, narrowed.stdout
