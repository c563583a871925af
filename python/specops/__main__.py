"""`python -m specops`: what is installed, what the extension was built against, what can run."""

from __future__ import annotations

import importlib.metadata
import platform

import torch

import specops
from specops._extension import EXTENSION


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment_report() -> str:
    lines = [
        f"specops            {specops.__version__}",
        f"python             {platform.python_version()} ({platform.machine()})",
        f"torch              {torch.__version__}",
        f"triton             {_version('triton')}",
        f"triton-ascend      {_version('triton-ascend')}",
        f"torch_npu          {_version('torch_npu')}",
        "",
        "native extension",
        f"  loaded           {EXTENSION.loaded}",
        f"  built version    {EXTENSION.built_version or 'unknown'}",
        f"  built for torch  {EXTENSION.built_torch_version or 'unknown'}",
        f"  compiler         {EXTENSION.compiler or 'unknown'}",
        f"  compiled in      {', '.join(EXTENSION.backends) or 'nothing'}",
        f"  CANN toolkit     {EXTENSION.cann_version or 'none (CPU build)'}",
        f"  sanitizers       {'ASan+UBSan' if EXTENSION.sanitize else 'off'}",
    ]
    if EXTENSION.error:
        lines.append(f"  problem          {EXTENSION.error}")
    lines += ["", "backends (what specops.backend(name) can select here)"]
    for name, state in specops.backend_report().items():
        lines.append(f"  {name:<16} {state}")
    from specops.integrations.vllm import diagnose

    plugin = diagnose().splitlines()
    lines += ["", "vLLM plugin (docs/integrations.md)", f"  vllm             {_version('vllm')}",
              f"  plugin           {plugin[0]}", *(f"    {line}" for line in plugin[1:])]
    return "\n".join(lines)


def main() -> None:
    print(environment_report())


if __name__ == "__main__":
    main()
