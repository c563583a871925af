"""What the plugin checks before it patches anything: the exact vLLM version, and a structural
fingerprint of every target.

A target is a vLLM (or, on the Ascend row, vllm-ascend) function, method or class body, named
`module:qualname`. Its fingerprint is
the SHA-256 of its signature and its source text (for a class: the source of its `__init__`,
where the attributes the adapters read are made). `FINGERPRINTS` (in _fingerprints.py) holds the
expected value of each target per supported version; `python -m specops.integrations.vllm
fingerprints` prints the values of the vLLM installed, to regenerate that file for a new release
after the adapters were checked against it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect

from specops.integrations.vllm._fingerprints import FINGERPRINTS


class Mismatch(Exception):
    """The first difference found; its message names the target."""


def installed_version() -> str:
    """vLLM's own version string (raises ImportError when vLLM is absent)."""
    version = importlib.import_module("vllm.version")
    return str(version.__version__)


def ascend_in_use() -> bool:
    """vllm-ascend is installed and its platform is the one this vLLM process runs on (vLLM
    resolved it before it loads the general plugins)."""
    import importlib.util

    if importlib.util.find_spec("vllm_ascend") is None:
        return False
    from vllm.platforms import current_platform

    return type(current_platform).__module__.startswith("vllm_ascend")


def ascend_version() -> str:
    from importlib.metadata import version

    return version("vllm-ascend")


def release() -> str:
    """The release row the plugin checks against: vLLM's version, or with vllm-ascend's platform
    in use `<vLLM version>+vllm-ascend-<its version>` (its classes are the targets then)."""
    if ascend_in_use():
        return f"{installed_version()}+vllm-ascend-{ascend_version()}"
    return installed_version()


def resolve(target: str):
    """The object `module:qualname` names (an AttributeError or ImportError when it is gone)."""
    module_name, qualname = target.split(":")
    owner = importlib.import_module(module_name)
    for part in qualname.split("."):
        owner = inspect.getattr_static(owner, part)
    if isinstance(owner, (staticmethod, classmethod)):
        owner = owner.__func__
    return owner


def fingerprint(target: str) -> str:
    obj = resolve(target)
    if inspect.isclass(obj):
        obj = obj.__init__
    unwrapped = inspect.unwrap(obj)
    try:
        signature = str(inspect.signature(unwrapped))
    except (TypeError, ValueError):
        signature = "?"
    source = inspect.getsource(unwrapped)
    return hashlib.sha256(f"{signature}\n{source}".encode()).hexdigest()[:20]


def check(targets: list[str]) -> None:
    """Raises Mismatch naming the version or the first target that differs."""
    version = release()
    expected = FINGERPRINTS.get(version)
    if expected is None:
        raise Mismatch(f"vLLM {version} is not supported (supported: {', '.join(sorted(FINGERPRINTS))})")
    for target in targets:
        if target not in expected:
            raise Mismatch(f"{target} has no fingerprint for vLLM {version}")
        try:
            found = fingerprint(target)
        except Exception as exc:  # gone, renamed, no source: all a mismatch
            raise Mismatch(f"{target} cannot be read ({type(exc).__name__}: {exc})") from None
        if found != expected[target]:
            raise Mismatch(f"{target} differs from vLLM {version}'s (fingerprint {found}, expected "
                           f"{expected[target]})")
