"""Loading of the native extension, which never makes `import specops` fail.

The extension is only loaded when the torch in this process is the one it was built against:
a C++ extension built for another torch either fails with an unresolved symbol or, worse,
loads and corrupts memory. When it is not loaded, "native" is not an available backend and a
native op call raises an error that says what was built against what and how to rebuild.
"""

from __future__ import annotations

import dataclasses
import logging

import torch

logger = logging.getLogger("specops")

REBUILD_HINT = (
    "rebuild specops against the installed torch: `make install` in a checkout, or "
    "`pip install scikit-build-core pybind11 cmake ninja` then "
    "`pip install --no-build-isolation --force-reinstall --no-deps <specops source>`"
)


@dataclasses.dataclass(frozen=True)
class ExtensionStatus:
    loaded: bool
    error: str | None
    built_version: str | None = None
    built_torch_version: str | None = None
    compiler: str | None = None
    backends: tuple[str, ...] = ()
    cann_version: str | None = None
    sanitize: bool = False


def _version_class():
    try:
        from packaging.version import Version
    except ImportError:  # torch carries its own copy, public as torch.torch_version's
        from torch.torch_version import Version
    return Version


def torch_pin_accepts(built_torch: str, installed_torch: str) -> bool:
    """Whether the wheel's own pin, `torch==<built_torch without its local label>`, accepts the
    installed torch. PEP 440: a pin without a local label ignores the candidate's, so a build
    against 2.13.0+cpu loads into 2.13.0+cu128 (pip would install it there), not into 2.13.1."""
    Version = _version_class()
    try:
        return Version(Version(installed_torch).public) == Version(Version(built_torch).public)
    except ValueError:  # not a PEP 440 version (a source build's own scheme): only an exact match
        return installed_torch == built_torch


def _load() -> ExtensionStatus:
    try:
        import specops._build_info as _build_info
    except ImportError:
        return ExtensionStatus(False, "the native extension is not built (specops/_build_info.py is missing); " + REBUILD_HINT)
    facts = dict(
        built_version=_build_info.VERSION,
        built_torch_version=_build_info.TORCH_VERSION,
        compiler=_build_info.COMPILER,
        backends=tuple(_build_info.BACKENDS),
        cann_version=_build_info.CANN_VERSION,
        sanitize=bool(_build_info.SANITIZE),
    )
    if not torch_pin_accepts(_build_info.TORCH_VERSION, torch.__version__):
        error = (
            f"the native extension was built against torch {_build_info.TORCH_VERSION}, "
            f"but torch {torch.__version__} is installed; {REBUILD_HINT}"
        )
        return ExtensionStatus(False, error, **facts)
    try:
        import specops._C  # noqa: F401  (loading registers torch.ops.specops.*)
    except Exception as exc:  # an ImportError or OSError from the dynamic loader
        return ExtensionStatus(False, f"the native extension failed to load: {exc}; {REBUILD_HINT}", **facts)
    return ExtensionStatus(True, None, **facts)


EXTENSION = _load()
if not EXTENSION.loaded:
    logger.warning("specops: native backend unavailable: %s", EXTENSION.error)


def require_native(op_name: str) -> None:
    """Raises the reason the native backend cannot run `op_name`."""
    if not EXTENSION.loaded:
        raise RuntimeError(f"specops.{op_name}: native backend unavailable: {EXTENSION.error}")
