"""A proof driver in a process of its own, as the vLLM and vllm-ascend proofs run them: SPECOPS_VLLM
unset for the runner alone, 1 for the plugin; vLLM's kernels under the Triton interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def start(driver: Path, cfg: dict | list[dict], plugin: bool, tmp: Path, alone: str, paths: list[Path],
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    """The driver on cfg (one configuration, or a list run one after the other), its result saved
    to tmp/plugin.pt or tmp/{alone}.pt; paths go ahead of PYTHONPATH, env on top of os.environ."""
    child = {k: v for k, v in os.environ.items() if k != "SPECOPS_VLLM"}
    child["TRITON_INTERPRET"] = "1"
    child["PYTHONPATH"] = os.pathsep.join([*map(str, paths), child.get("PYTHONPATH", "")])
    child.update(env or {})
    if plugin:
        child["SPECOPS_VLLM"] = "1"
    out = tmp / f"{'plugin' if plugin else alone}.pt"
    # Output to a file: two drivers run at once, and a full pipe would stall one.
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen([sys.executable, str(driver), json.dumps(cfg), str(out)], env=child,
                                stdout=log, stderr=subprocess.STDOUT)
    return proc, out


def finish(started: tuple[subprocess.Popen, Path], plugin: bool, alone: str) -> tuple[dict, str]:
    """The driver's saved result and its log; a failed driver raises with the log's tail."""
    import torch

    proc, out = started
    proc.wait()
    log = out.with_suffix(".log").read_text()
    if proc.returncode != 0:
        raise AssertionError(f"driver failed ({'plugin' if plugin else alone}):\n{log[-6000:]}")
    return torch.load(out, weights_only=False), log
