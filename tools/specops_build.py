"""Build-time facts of a specops wheel: which CANN toolkit (if any) and which torch it is for.

Used twice, so the two always agree: scikit-build-core calls `dynamic_metadata` for the wheel's
version (local tag `+cann<version>` or `+cpu`) and dependencies (torch pinned to the torch the
extension is compiled against), and CMake runs `python tools/specops_build.py cann-version`
to decide whether the Ascend build is on.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BASE_VERSION = "0.1.0"

# Where a CANN toolkit states its own version, relative to ASCEND_HOME_PATH
# (e.g. /usr/local/Ascend/ascend-toolkit/latest), with the key that holds it.
VERSION_FILES = [
    ("compiler/version.info", "Version"),
    ("version.cfg", "version"),
    ("*/ascend_toolkit_install.info", "version"),
]


def _read_key(path: Path, key: str) -> str | None:
    for line in path.read_text(errors="replace").splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip().lower() == key.lower() and value.strip():
            return value.strip().strip('"')
    return None


def cann_version(ascend_home: str | None) -> str | None:
    """The toolkit's version read from its own version file, or None without a toolkit."""
    if not ascend_home or not os.path.isdir(ascend_home):
        return None
    root = Path(ascend_home)
    for pattern, key in VERSION_FILES:
        for path in sorted(root.glob(pattern)):
            if path.is_file():
                version = _read_key(path, key)
                if version:
                    return version
    return None


def local_version_tag(cann: str | None) -> str:
    """PEP 440 local label: `cann` + the toolkit version normalized, or `cpu`."""
    if cann is None:
        return "cpu"
    normalized = re.sub(r"[^0-9a-z]+", ".", cann.lower()).strip(".")
    return f"cann{normalized}"


def wheel_version(ascend_home: str | None = None) -> str:
    if ascend_home is None:
        ascend_home = os.environ.get("ASCEND_HOME_PATH")
    return f"{BASE_VERSION}+{local_version_tag(cann_version(ascend_home))}"


def torch_requirement() -> str:
    """The torch this build compiles against: a C++ extension only loads into that torch."""
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(
            "specops builds against the installed torch: install torch first, then build with "
            "`pip install --no-build-isolation`"
        ) from exc
    return f"torch=={torch.__version__.split('+')[0]}"


def dynamic_metadata(field: str, settings: Mapping[str, Any]) -> Any:
    """scikit-build-core metadata provider (tool.scikit-build.metadata in pyproject.toml)."""
    if field == "version":
        return wheel_version()
    if field == "dependencies":
        return [torch_requirement(), *settings.get("extra", [])]
    raise ValueError(f"specops_build provides version and dependencies, not {field}")


def main(argv: list[str]) -> int:
    if argv[1:] == ["cann-version"]:
        print(cann_version(os.environ.get("ASCEND_HOME_PATH")) or "", end="")
        return 0
    if argv[1:] == ["wheel-version"]:
        print(wheel_version(), end="")
        return 0
    print("usage: specops_build.py cann-version | wheel-version", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
