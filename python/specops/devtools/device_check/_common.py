"""What every step of the device check shares: the device it runs on, its deadline, the op
table, and the step result it writes (docs/device_readiness.md, "The first minutes on a
device")."""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from specops.devtools.device_check.report import write_json  # noqa: F401  (the steps' writer)

NO_DEVICE = "no device"


@dataclasses.dataclass
class Deadline:
    """A step's time limit: `left()` seconds remain; `passed()` once they are spent."""

    end: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def left(self) -> float:
        return self.end - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0


@dataclasses.dataclass
class Target:
    """Where the device paths run: a CUDA or NPU device, or the CPU through the Triton
    interpreter (`device is None`: the device-only parts are skipped with `reason`)."""

    device: torch.device | None
    reason: str  # why there is no device ("" when there is one)
    native: bool  # the extension is loaded: the oracle is the native CPU op, the device path torch.ops.specops

    @property
    def kind(self) -> str:
        return self.device.type if self.device is not None else "cpu"

    @property
    def tensor_device(self) -> torch.device:
        """Where the device path's tensors live: the device, or the CPU under the interpreter."""
        return self.device if self.device is not None else torch.device("cpu")

    @property
    def device_backend(self) -> str:
        """The specops backend of the device path: "native" dispatches torch.ops.specops.* to
        the op's Triton kernel on device tensors; without a device (or without the extension)
        the Triton launchers are called directly."""
        return "native" if self.device is not None and self.native else "triton"

    def synchronize(self) -> None:
        if self.kind == "cuda":
            torch.cuda.synchronize(self.device)
        elif self.kind == "npu":
            torch.npu.synchronize(self.device)


def find_target() -> Target:
    """The first CUDA device, else the first NPU (torch_npu), else the CPU with the reason."""
    from specops import EXTENSION

    native = bool(EXTENSION.loaded)
    if torch.cuda.is_available():
        return Target(torch.device("cuda", 0), "", native)
    try:
        import torch_npu  # noqa: F401  (registers the npu device)

        if torch.npu.is_available():
            return Target(torch.device("npu", 0), "", native)
        npu = "torch_npu sees no NPU"
    except ImportError:
        npu = "no torch_npu"
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA support"
    return Target(None, f"{NO_DEVICE}: torch {torch.__version__} ({build}) sees no CUDA device; {npu}", native)


def skipped(reason: str, **extra: Any) -> dict[str, Any]:
    return {"status": "skipped", "reason": reason, **extra}


def failed(reason: str, **extra: Any) -> dict[str, Any]:
    return {"status": "failed", "reason": reason, **extra}


def error_text(error: BaseException) -> str:
    """An exception in one line (its first line), with its type."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:400]


def environment(target: Target) -> dict[str, Any]:
    """Versions and tools of this machine, for the report's head."""
    import specops

    facts: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "specops": getattr(specops, "__version__", None),
        "specops_file": specops.__file__,
        "extension": "loaded" if specops.EXTENSION.loaded else f"not loaded: {specops.EXTENSION.error}",
        "device": str(target.device) if target.device is not None else None,
        "no_device_reason": target.reason or None,
        "triton_interpret": os.environ.get("TRITON_INTERPRET", "0"),
    }
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError as error:
        facts["triton"] = f"not installed: {error}"
    if target.kind == "cuda":
        properties = torch.cuda.get_device_properties(target.device)
        facts["device_name"] = properties.name
        facts["capability"] = f"sm_{properties.major}{properties.minor}"
        facts["multiprocessors"] = properties.multi_processor_count
    elif target.kind == "npu":
        facts["device_name"] = torch.npu.get_device_name(target.device)
    facts["compute_sanitizer"] = compute_sanitizer()
    facts["api_probe"] = api_probe(with_driver=target.device is not None)
    return facts


# What specops calls of torch and Triton beyond their long-stable core, by version-sensitive name:
# a missing one names the ops it breaks before any op runs (every op goes through ops/_op.py, and
# torch's private names are read in specops/_fastpath.py alone).
TORCH_APIS = {
    "torch.compiler.is_dynamo_compiling": "every op's backend switch (specops/_fastpath.py's select())",
    "torch.compiler._is_compiling_flag": "every op's backend switch (specops/_fastpath.py's select())",
    "torch.utils._python_dispatch.TorchDispatchMode": "the launch counter (specops/launch_count.py)",
    "torch.autograd.graph.increment_version": "the version bump of the Python backends (ops/_op.py)",
    "torch.get_default_device": "PersistentMappings and the drafting builders without device=",
}
TRITON_APIS = {
    "triton.runtime.driver.active.utils.get_device_properties": "every launcher's grid (triton_kernels/_launch.py)",
    "triton.language.cumsum": "kernels that scan (prepare_spec_decode_inputs, format_slot_mapping_blocks, ...)",
    "triton.language.debug_barrier": "kernels that reuse shared scratch between passes",
    "triton.testing.do_bench": "the timing step",
}


def _resolve(dotted: str) -> bool:
    parts = dotted.split(".")
    try:
        value = importlib.import_module(parts[0])
    except ImportError:
        return False
    for part in parts[1:]:
        try:
            value = getattr(value, part)
        except Exception:  # noqa: BLE001  (a driver without a device raises here: reported as missing)
            try:
                value = importlib.import_module(f"{value.__name__}.{part}")
            except Exception:  # noqa: BLE001
                return False
    return True


def api_probe(with_driver: bool) -> dict[str, str]:
    """Each version-sensitive API and "ok", or what its absence breaks (Triton's active driver
    only with a device: without one there is none to ask)."""
    names = {**TORCH_APIS, **TRITON_APIS}
    if not with_driver:
        names.pop("triton.runtime.driver.active.utils.get_device_properties")
    return {name: "ok" if _resolve(name) else f"MISSING: breaks {what}" for name, what in names.items()}


def compute_sanitizer() -> str | None:
    """The compute-sanitizer executable: on PATH, else in the CUDA toolkit's bin folder."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(os.path.join(root, "bin", "compute-sanitizer"), os.X_OK):
            return os.path.join(root, "bin", "compute-sanitizer")
        if root and os.access(os.path.join(root, "compute-sanitizer", "bin", "compute-sanitizer"), os.X_OK):
            return os.path.join(root, "compute-sanitizer", "bin", "compute-sanitizer")
    return None


def load_op_table(op_specs_dir: str | os.PathLike) -> tuple:
    """tests/op_table.py's OP_TABLE (the op specs: valid calls, random calls, edge cases); the
    folder holding op_table.py goes on sys.path, as pytest puts it."""
    folder = str(Path(op_specs_dir).resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module("op_table").OP_TABLE


def moved(value: Any, device: torch.device) -> Any:
    """A call's value with every tensor (in lists too) copied to `device`."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list):
        return [moved(item, device) for item in value]
    return value


def cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, list):
        return [cloned(item) for item in value]
    return value


def round_robin(queues: dict[str, list]) -> Iterator[tuple[str, Any]]:
    """(key, item) taking one item of each queue in turn: every key gets its first item before
    any gets its second, so a budget that runs out leaves no key without one."""
    iterators = {key: iter(items) for key, items in queues.items()}
    while iterators:
        for key in list(iterators):
            item = next(iterators[key], _DONE)
            if item is _DONE:
                del iterators[key]
            else:
                yield key, item


_DONE = object()
