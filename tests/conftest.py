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
# `make test-explore` (SPECOPS_EXPLORE=1): new examples on every run, drawn from the seed the
# Makefile passes as --hypothesis-seed (so a run is reproduced by its seed alone: no example
# database), SPECOPS_EXAMPLE_SCALE times as many of them, and a failure prints the
# @reproduce_failure blob of its example.
EXPLORE = os.environ.get("SPECOPS_EXPLORE") == "1"
EXAMPLE_SCALE = int(os.environ.get("SPECOPS_EXAMPLE_SCALE", "5" if EXPLORE else "1"))
settings.register_profile("specops-explore", settings.get_profile("specops"), derandomize=False, database=None,
                          print_blob=True, max_examples=100 * EXAMPLE_SCALE)
settings.load_profile("specops-explore" if EXPLORE else "specops")


def examples(count: int) -> int:
    """A test's Hypothesis example budget: `count` under `make test`, scaled under test-explore."""
    return count * EXAMPLE_SCALE


def backend_plan(report: dict[str, str], requested: str | None) -> tuple[list[str], list[str], dict[str, str]]:
    """(wanted, usable, missing) backends of a test run.

    Every backend is wanted unless SPECOPS_TEST_BACKENDS (`requested`, comma-separated) names a
    subset (the sanitizer run asks for native only: the Triton interpreter and the reference gain
    nothing from ASan). A wanted backend that cannot run here is missing, with its reason: its
    fixture cases are counted skips, and the session fails, so an environment where Triton (or
    the extension) broke can never pass by quietly testing fewer backends.
    """
    names = requested.split(",") if requested else list(report)
    unknown = [name for name in names if name not in report]
    if unknown:
        raise pytest.UsageError(f"SPECOPS_TEST_BACKENDS names unknown backends {unknown}; known: {list(report)}")
    wanted = [name for name in report if name in names]
    usable = [name for name in wanted if report[name] == "usable"]
    missing = {name: report[name] for name in wanted if report[name] != "usable"}
    return wanted, usable, missing


REQUESTED = os.environ.get("SPECOPS_TEST_BACKENDS") or None
REPORT = specops.backend_report()
WANTED, BACKENDS, MISSING = backend_plan(REPORT, REQUESTED)

if os.environ["TRITON_INTERPRET"] == "1" and REPORT["triton"] == "usable":
    from interpreter_quirks import correct_interpreter

    # triton-ascend 3.2's interpreter runs some stores no compiled kernel runs (see
    # interpreter_quirks.py); corrected, where found, so it runs what the compiled kernel runs.
    CORRECTED_INTERPRETER = correct_interpreter()


def device_backends() -> list[str]:
    """The backends that run values the native host op rejects (it raises; these cannot): Triton
    and the reference, whatever SPECOPS_TEST_BACKENDS asks, as long as they can run here. A
    Triton that cannot run is reported by the session check unless SPECOPS_TEST_BACKENDS leaves
    Triton out."""
    return [name for name in ("triton", "reference") if REPORT[name] == "usable"]


def pytest_terminal_summary(terminalreporter, config):
    if EXPLORE:
        seed = config.getoption("hypothesis_seed", None)
        terminalreporter.write_line(f"test-explore: hypothesis seed {seed}, {EXAMPLE_SCALE}x the examples; reproduce a "
                                    f"failure with `make test-explore EXPLORE_SEED={seed}` (add PYTEST_ARGS=\"-k "
                                    f"<test>\" to rerun one test), or from its @reproduce_failure line")
    shrunk = ", ".join(f"{name} ({reason})" for name, reason in MISSING.items()) or "none"
    requested = f" (SPECOPS_TEST_BACKENDS={REQUESTED})" if REQUESTED else ""
    terminalreporter.write_line(f"specops backends under test: {', '.join(BACKENDS) or 'none'}{requested}; "
                                f"silently shrunk: {len(MISSING)}; missing: {shrunk}")


def pytest_sessionfinish(session, exitstatus):
    if MISSING and exitstatus == pytest.ExitCode.OK:
        # The missing backends' cases were skipped, and skips alone would let the run pass.
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


if os.environ.get("SPECOPS_REQUIRE_SANITIZED") == "1" and not specops.EXTENSION.sanitize:
    raise pytest.UsageError(f"expected the ASan/UBSan build of specops, got {specops.__file__}")


@pytest.fixture(params=WANTED)
def backend(request):
    """Runs the test body under each wanted backend; yields its name. A wanted backend that
    cannot run here skips (and fails the session, see backend_plan)."""
    if request.param in MISSING:
        pytest.skip(f"backend {request.param} cannot run here: {MISSING[request.param]}")
    with specops.backend(request.param):
        yield request.param


@pytest.fixture
def device() -> torch.device:
    return torch.device("cpu")
