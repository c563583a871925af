"""Which implementation the Python wrappers run (docs/conventions.md): `specops.backend(name)`."""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import os
from collections.abc import Iterator

import torch

from specops._extension import EXTENSION

BACKENDS = ("native", "triton", "reference")

_current_backend: contextvars.ContextVar[str] = contextvars.ContextVar("specops_backend", default="native")


def current_backend() -> str:
    return _current_backend.get()


@contextlib.contextmanager
def backend(name: str) -> Iterator[None]:
    """Selects what the op wrappers run inside the block.

    "native": torch.ops.specops.* (C++ on CPU tensors, the Triton kernel on CUDA/NPU tensors);
    "triton": launch the Triton kernel directly (CPU tensors need TRITON_INTERPRET=1 set before
    specops is imported); "reference": the pure torch implementation.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    with context_set(_current_backend, name):
        yield


@contextlib.contextmanager
def context_set(variable: contextvars.ContextVar, value: object) -> Iterator[None]:
    """`variable` holds `value` inside the block (the switches here and in the launchers)."""
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


def triton_interpreter_enabled() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def npu_available() -> bool:
    npu = getattr(torch, "npu", None)
    return npu is not None and bool(npu.is_available())


def backend_report() -> dict[str, str]:
    """Each backend and either "usable" or the reason it cannot run here."""
    report = {}
    report["native"] = "usable" if EXTENSION.loaded else str(EXTENSION.error)
    if importlib.util.find_spec("triton") is None:
        report["triton"] = "Triton is not installed (pip install triton, or triton-ascend on Ascend)"
    elif triton_interpreter_enabled() or torch.cuda.is_available() or npu_available():
        report["triton"] = "usable"
    else:
        report["triton"] = "no CUDA or NPU device, and TRITON_INTERPRET=1 was not set before import"
    report["reference"] = "usable"
    return report


def available_backends() -> list[str]:
    """The backends that can run here, in order of preference."""
    return [name for name, state in backend_report().items() if state == "usable"]
