"""`make device-check`: the first minutes on a lent GPU or NPU, one command (docs/device_readiness.md).

1. Builds the extension against the torch installed here, offline: `pip install
   --no-build-isolation --no-deps --upgrade --target build/device-check-site .` (no venv of its
   own; the CMake build folder is build/device-build, kept between runs). When the build fails,
   the pure-Python package is laid out in build/device-check-source-site instead and the checks
   run without the extension (the Triton launchers on device tensors, the reference as the
   oracle).
2.-5. Runs each step of specops/devtools/device_check/report.py's STEPS in a child process of its own
   (a crash or a device fault stops one step), the sanitizer steps under compute-sanitizer,
   each within its cap and within what is left of the whole budget (--budget, default 420 s:
   under 8 minutes with the machine's start), then writes one report, <out>/device-check.json,
   and one CSV, <out>/device-check.csv.

Output folder: --out, else $OUT when set (the device runner's folder that comes back), else
build/device-check. Exit status 1 when a step failed, else 0 (skipped steps fail nothing: on a
machine without a device the device-only steps are skipped with their reason). Before anything
else it checks that the Python it builds for imports torch; one that does not (a fresh clone's
`make device-check` on a machine whose python3 has no torch and no .venv beside it) stops the
run at once with status 2 and one line saying what to install.
This script imports nothing of specops or torch itself: it works before the build.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load_report_module():
    """specops/devtools/device_check/report.py by its path: the step table and the report
    writer, in the standard library alone (importing the package would import torch)."""
    path = ROOT / "python" / "specops" / "devtools" / "device_check" / "report.py"
    spec = importlib.util.spec_from_file_location("specops_device_check_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


REPORT = _load_report_module()
STEP_CAPS = {name: step["cap"] for name, step in REPORT.STEPS.items()}
SANITIZED = REPORT.SANITIZER_TOOLS
BUILD_CAP = 240
MIN_STEP = 8  # seconds below which a step is not started
GRACE = 15  # seconds a child gets past its own deadline before it is killed


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(command: list[str], seconds: float, env: dict[str, str], log: Path) -> tuple[int | None, str, float]:
    """(exit status or None on timeout, output, wall seconds); the output also goes to `log`."""
    started = time.monotonic()
    with open(log, "w") as handle:
        try:
            process = subprocess.run(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT,
                                     timeout=max(seconds, 1))
            status = process.returncode
        except subprocess.TimeoutExpired:
            status = None
    return status, log.read_text(errors="replace"), time.monotonic() - started


def missing_torch(python: str, torch_spec: str) -> str | None:
    """None when `python` imports torch, else the one line that says what to install."""
    try:
        probe = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"device-check: cannot run {python} ({type(exc).__name__}: {exc}); pass --python (PYTHON= to make)"
    if probe.returncode == 0:
        return None
    why = (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[-1]
    return (f"device-check: {python} cannot import torch ({why}); install it ({python} -m pip install "
            f"'{torch_spec}', or the device's own torch build) or run `make install` to set up .venv, then rerun")


def build(python: str, out: Path, seconds: float, env: dict[str, str]) -> tuple[dict, Path]:
    """The extension built into build/device-check-site (not under out: what is under $OUT goes
    back from the device machine); (its result, the folder to put first on PYTHONPATH)."""
    site = ROOT / "build" / "device-check-site"
    command = [python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--upgrade", "--no-index",
               "--target", str(site), "-C", "build-dir=build/device-build", "."]
    build_env = dict(env, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 4))
    status, output, wall = _run(command, seconds, build_env, out / "build.log")
    result = {"command": " ".join(command), "wall_s": round(wall, 1)}
    if status == 0 and any(site.glob("specops/_C*")):
        return {**result, "status": "ok", "reason": ""}, site
    # Without the extension: the Python package as the wheel lays it out (the Triton kernels as
    # specops.triton_kernels), so the device paths still run through the Triton launchers.
    source = ROOT / "build" / "device-check-source-site"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(ROOT / "python" / "specops", source / "specops")
    shutil.copytree(ROOT / "triton_kernels", source / "specops" / "triton_kernels")
    why = "timed out" if status is None else f"exit status {status}"
    return {**result, "status": "failed", "reason": f"pip install {why}; the checks run without the extension",
            "log_tail": _tail(output)}, source


def sanitizer_command(tool: str, log: Path) -> list[str] | None:
    found = shutil.which("compute-sanitizer")
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if not found and root and os.access(os.path.join(root, "bin", "compute-sanitizer"), os.X_OK):
            found = os.path.join(root, "bin", "compute-sanitizer")
    if not found:
        return None
    return [found, "--tool", tool, "--print-limit", "50", "--report-api-errors", "no", "--log-file", str(log)]


def run_steps(python: str, out: Path, env: dict[str, str], deadline: float, options: list[str],
              environment: dict) -> dict[str, dict]:
    device = environment.get("device")
    steps: dict[str, dict] = {}
    names = list(STEP_CAPS)
    for index, name in enumerate(names):
        # Its cap's share of what is left, at most the cap: a step that ends early leaves more to the rest.
        share = (deadline - time.monotonic()) * STEP_CAPS[name] / sum(STEP_CAPS[n] for n in names[index:])
        seconds = min(STEP_CAPS[name], share)
        result_path = out / "steps" / f"{name}.json"
        if seconds < MIN_STEP:
            steps[name] = {"status": "skipped", "reason": "time budget: the whole run's budget was spent"}
            continue
        inner = [python, "-m", "specops.devtools.device_check"]
        if name in SANITIZED:
            tool = SANITIZED[name]
            log = out / f"sanitizer-{tool}.log"
            wrapper = sanitizer_command(tool, log) if device and device.startswith("cuda") else None
            if wrapper is None:
                if not device:
                    reason = environment.get("no_device_reason") or "no device"
                elif not device.startswith("cuda"):
                    reason = "compute-sanitizer is CUDA's; none on an NPU"
                else:
                    reason = "compute-sanitizer is not installed here"
                steps[name] = {"status": "skipped", "reason": reason}
                continue
            body = out / "steps" / f"{name}.body.json"
            command = wrapper + inner + ["sanitized", "--tool", tool, "--out", str(out), "--seconds",
                                         str(max(seconds - GRACE, MIN_STEP))]
            status, output, wall = _run(command, seconds, dict(env, PYTORCH_NO_CUDA_MEMORY_CACHING="1"),
                                        out / f"{name}.out")
            steps[name] = sanitizer_result(tool, status, output, wall, log, body)
            continue
        command = inner + ["step", name, "--out", str(out), "--seconds", str(max(seconds - GRACE, MIN_STEP))] + options
        status, output, wall = _run(command, seconds, env, out / f"{name}.out")
        result = json.loads(result_path.read_text()) if result_path.is_file() else None
        if status != 0 or result is None:
            why = "timed out (killed at its limit)" if status is None else f"its process ended with status {status}"
            result = {**(result or {}), "status": "failed", "reason": why, "output_tail": _tail(output)}
        result.setdefault("wall_s", round(wall, 1))
        steps[name] = result
    return steps


def sanitizer_result(tool: str, status: int | None, output: str, wall: float, log: Path, body: Path) -> dict:
    text = log.read_text(errors="replace") if log.is_file() else output
    result = {"wall_s": round(wall, 1), **REPORT.parse_log(text, tool)}
    result["ops"] = json.loads(body.read_text()).get("ops", {}) if body.is_file() else {}
    unreached = [name for name, what in result["ops"].items() if not what.startswith("ran")]
    if result["count"]:
        where = ", ".join(result["kernels"]) or "kernels"
        result.update(status="failed", reason=f"{result['count']} {tool} reports in {where}")
    elif status is None:
        result.update(status="partial", reason="timed out: the sanitizer run was killed at its limit")
    elif status != 0 or not result["summary_found"]:
        result.update(status="failed", reason=f"the sanitized process ended with status {status}",
                      output_tail=_tail(output))
    elif unreached:
        result.update(status="partial", reason=f"not run or raised: {', '.join(unreached)}")
    else:
        result.update(status="ok", reason="")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "build" / "device-check"))
    parser.add_argument("--budget", type=float, default=420, help="seconds for the whole run, the build included")
    parser.add_argument("--python", default=sys.executable, help="the Python whose torch the extension is built for")
    parser.add_argument("--skip-build", action="store_true", help="check the specops this Python imports already")
    parser.add_argument("--carry", default=str(ROOT / "build" / "device-carry"))
    parser.add_argument("--random-calls", type=int, default=6)
    parser.add_argument("--edge-cases", type=int, default=6)
    parser.add_argument("--torch-spec", default="torch", help="what the message for a Python without torch says to install")
    args = parser.parse_args(argv)
    missing = missing_torch(args.python, args.torch_spec)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    started = time.monotonic()
    deadline = started + args.budget
    out = args.out.resolve()
    (out / "steps").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("TRITON_CACHE_DIR", str(ROOT / "build" / "device-check-triton-cache"))
    if args.skip_build:
        build_result = {"status": "skipped", "reason": "--skip-build: the installed specops is checked"}
    else:
        reserve = MIN_STEP * len(STEP_CAPS)
        build_result, site = build(args.python, out, min(BUILD_CAP, args.budget - reserve), env)
        env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    status, output, _ = _run([args.python, "-m", "specops.devtools.device_check", "environment", "--out", str(out)],
                             60, env, out / "environment.out")
    env_path = out / "steps" / "environment.json"
    environment = json.loads(env_path.read_text()) if status == 0 and env_path.is_file() else {
        "error": f"the environment probe failed: {_tail(output, 10)}"}
    device = environment.get("device")
    if not device:
        env["TRITON_INTERPRET"] = "1"  # the device path runs on CPU tensors through the interpreter
        environment["triton_interpret"] = "1"
    options = ["--op-specs", str(ROOT / "tests"), "--carry", args.carry, "--random-calls", str(args.random_calls),
               "--edge-cases", str(args.edge_cases)]
    steps = {"build": build_result, **run_steps(args.python, out, env, deadline, options, environment)}
    for name, result in steps.items():
        if name in REPORT.STEPS:
            result["what"] = REPORT.STEPS[name]["what"]
    ops = steps.get("device_path", {}).get("ops", {})
    report = REPORT.assemble(out, environment, steps, list(ops), started, args.budget)
    summary = report["summary"]
    print(f"device check: {device or 'no device'}; {report['wall_s']} s; ok: {', '.join(summary['ok']) or 'none'}; "
          f"failed: {', '.join(summary['failed']) or 'none'}; partial: {', '.join(summary['partial']) or 'none'}; "
          f"skipped: {', '.join(summary['skipped']) or 'none'}")
    for name in summary["failed"] + summary["partial"]:
        print(f"  {name}: {steps[name].get('reason', '')}")
    print(f"report: {out / REPORT.REPORT_NAME}; CSV: {report['csv']} ({report['csv_rows']} rows)")
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
