"""The device check (`make device-check`, docs/device_readiness.md) on this machine, without a
device: its in-process entry runs every step it can on the CPU (every op's device path through
the Triton interpreter against the native CPU op) and marks the device-only ones skipped with
their reason; the report names every op. Also the pieces the driver uses around the steps: the
compute-sanitizer log parser, the step table the driver reads by path, and the cut of vLLM's
kernels out of an unpacked wheel."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import repo_modules
from conftest import BACKENDS
from op_table import OP_TABLE

from specops.devtools.device_check import CSV_NAME, REPORT_NAME, STEPS, run_in_process
from specops.devtools.device_check.report import parse_log

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"  # the folder of op_table.py, whatever subfolder this file sits in
DEVICE_ONLY = [name for name, step in STEPS.items() if step["device_only"]]


def _tool(name: str):
    return repo_modules.load(f"tools/{name}.py")


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    if "triton" not in BACKENDS or "native" not in BACKENDS:
        pytest.skip("the CPU run compares the Triton interpreter with the native op: both must run here")
    out = tmp_path_factory.mktemp("device-check")
    report = run_in_process(out, op_specs=TESTS, carry=out / "no-carry", random_calls=1,
                            edge_cases=1, cpu_only=True)
    return out, report


def test_the_cpu_run_names_every_op_and_checks_each_device_path(cpu_report):
    out, report = cpu_report
    assert json.loads((out / REPORT_NAME).read_text())["ops"] == report["ops"]
    assert report["ops"] == [spec.name for spec in OP_TABLE]
    step = report["steps"]["device_path"]
    assert step["status"] == "ok", step["reason"]
    for spec in OP_TABLE:
        entry = step["ops"][spec.name]
        assert entry["status"] == "ok", (spec.name, entry["failures"])
        # The valid call, a random call and an edge case each ran.
        assert entry["calls"] >= 3 and "valid" in entry["kinds"] and "random" in entry["kinds"], (spec.name, entry)


def test_the_cpu_run_skips_every_device_only_step_with_its_reason(cpu_report):
    out, report = cpu_report
    assert set(report["steps"]) == {"build", *STEPS}
    for name in DEVICE_ONLY:
        step = report["steps"][name]
        assert step["status"] == "skipped", (name, step)
        assert step["reason"].startswith("no device"), (name, step["reason"])
        assert report["summary"]["skipped"][name] == step["reason"]
    assert report["summary"]["failed"] == []
    # The graph step still ran its runner step eagerly on the CPU.
    assert report["steps"]["graph_capture"]["plumbing"].startswith("ok")
    with open(out / CSV_NAME) as handle:
        assert csv.DictReader(handle).fieldnames[:3] == ["source", "op", "label"]


def test_a_wrong_device_path_fails_its_op_and_only_its_op(tmp_path, monkeypatch):
    """The check can fail: dcp_local_seq_lens' Triton launcher made to write one entry wrong."""
    if "triton" not in BACKENDS or "native" not in BACKENDS:
        pytest.skip("the CPU run compares the Triton interpreter with the native op: both must run here")
    from specops.devtools.device_check import device_path
    from specops.ops.registry import OPS

    op = OPS["dcp_local_seq_lens"]
    launcher = op.triton

    def off_by_one(arguments):
        launcher(arguments)
        arguments.out[:1] += 1  # the op's argument record

    monkeypatch.setattr(op, "triton", off_by_one)
    specs = [spec for spec in OP_TABLE if spec.name in ("dcp_local_seq_lens", "cp_local_metadata")]
    from specops.devtools.device_check._common import Deadline, Target

    result = device_path.run(Target(None, "no device: test", True), tuple(specs), Deadline.after(600),
                             random_calls=1, edge_cases=0)
    assert result["status"] == "failed"
    assert result["ops"]["dcp_local_seq_lens"]["status"] == "failed"
    assert "out differs from the native CPU op" in result["ops"]["dcp_local_seq_lens"]["failures"][0]
    assert result["ops"]["cp_local_metadata"]["status"] == "ok"


MEMCHECK_LOG = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at _gather_block_tables_kernel+0x1f0 in /tmp/gather.py:88
=========     by thread (3,0,0) in block (131,0,0)
=========     Address 0x7f0000001000 is out of bounds
========= ERROR SUMMARY: 1 error
"""


def test_the_sanitizer_logs_are_read():
    found = parse_log(MEMCHECK_LOG.replace("1 error\n", "1 errors\n"), "memcheck")
    assert found["count"] == 1 and found["kernels"] == ["_gather_block_tables_kernel"]
    assert found["first_reports"][0].startswith("========= Invalid __global__ write")
    clean = parse_log("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", "racecheck")
    assert clean["summary_found"] and clean["count"] == 0


def test_the_driver_reads_the_step_table_and_judges_a_sanitizer_run(tmp_path):
    driver = _tool("device_check")
    assert list(driver.STEP_CAPS) == list(STEPS)
    log = tmp_path / "memcheck.log"
    log.write_text(MEMCHECK_LOG.replace("1 error\n", "1 errors\n"))
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"ops": {"gather_block_tables": "ran: R=1024"}}))
    result = driver.sanitizer_result("memcheck", 0, "", 3.0, log, body)
    assert result["status"] == "failed" and "_gather_block_tables_kernel" in result["reason"]
    log.write_text("========= ERROR SUMMARY: 0 errors\n")
    assert driver.sanitizer_result("memcheck", 0, "", 3.0, log, body)["status"] == "ok"
    assert driver.sanitizer_result("memcheck", None, "", 3.0, log, body)["status"] == "partial"


def test_the_carry_cuts_vllms_kernels_with_their_decorators(tmp_path):
    carry = _tool("device_carry")
    site = tmp_path / "site"
    for module, names in carry.KERNELS:
        path = site / module
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "from vllm.triton_utils import tl, triton\n\nPAD = -1\n\n\n"
        for name in names:
            body += f"@triton.jit(do_not_specialize=['n'])\ndef {name}(n, X: tl.constexpr):\n    pass\n\n\n"
        path.write_text(body + "def launcher():\n    pass\n")
    (site / "vllm-0.33.0.dist-info").mkdir()
    assert carry.main(["--site", str(site), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "vllm_kernels.py").read_text()
    assert "vLLM 0.33.0" in text and "import triton.language as tl" in text and "launcher" not in text
    assert text.count("@triton.jit(do_not_specialize=['n'])") == sum(len(names) for _, names in carry.KERNELS)


# ------------------------------------------------------------------ `make device-check` from a fresh clone


def _fresh_clone(tmp_path: Path) -> Path:
    """The repository's tracked files in a folder with nothing beside it (no .venv, no build)."""
    listing = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if listing.returncode != 0:
        pytest.skip("not a git checkout: the tracked files are not known")
    clone = tmp_path / "clone" / "specops"
    for name in listing.stdout.splitlines():
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    assert not (clone / ".venv").exists() and not (clone / "build").exists()
    return clone


def _make_device_check(clone: Path, *variables: str) -> subprocess.CompletedProcess:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "OUT"))}
    return subprocess.run(["make", "--no-print-directory", "device-check", *variables], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_fresh_clone_without_torch_stops_at_once_saying_what_to_install(tmp_path):
    """A CPU machine whose python3 has no torch, and no .venv beside the clone: the run stops
    before building anything, with one line naming the Python, torch's pin and `make install`."""
    clone = _fresh_clone(tmp_path)
    bare = tmp_path / "python-without-torch"
    venv.EnvBuilder(with_pip=False).create(bare)
    python = bare / "bin" / "python"
    assert subprocess.run([python, "-c", "import torch"], capture_output=True).returncode != 0
    result = _make_device_check(clone, f"PYTHON={python}")
    assert result.returncode != 0
    said = [line for line in result.stderr.splitlines() if line.startswith("device-check:")]
    assert len(said) == 1, result.stderr
    assert f"{python} cannot import torch" in said[0] and "torch==2.13.0" in said[0] and "make install" in said[0]
    assert f"{python} tools/device_check.py" in result.stdout  # the Makefile chose that Python: no venv
    assert not (clone / "build").exists() and not (clone / ".venv").exists()  # stopped before any step


def test_a_fresh_clone_on_a_machine_with_torch_runs_with_that_python(tmp_path):
    """A lent machine: torch installed, no venv. The Makefile runs the check with $(PYTHON) and it
    gets past the torch check to its report (here within a budget that leaves the steps no time,
    on the specops this Python imports: the build is `make device-check`'s first minutes)."""
    clone = _fresh_clone(tmp_path)
    out = tmp_path / "out"
    result = _make_device_check(clone, f"PYTHON={sys.executable}",
                                f"DEVICE_CHECK_ARGS=--skip-build --budget 1 --out {out}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{sys.executable} tools/device_check.py" in result.stdout
    assert "cannot import torch" not in result.stderr
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["environment"]["torch"], report["environment"]
    assert all(step["status"] == "skipped" for step in report["steps"].values()), report["steps"]
    assert not (clone / ".venv").exists()
