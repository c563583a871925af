"""One place that wires an op's faces together.

Each op module declares a `SpecOp` with its metadata check and its reference. The schema and
the CPU kernel come from the C++ extension (csrc/registration.cpp, csrc/cpu/); this module adds
the fake kernel (the check, then nothing: every op writes into caller buffers and returns ()),
the CUDA and PrivateUse1 (Ascend NPU) kernels, which launch the op's Triton kernel, and the
backend switch used by the public wrappers. On the Python backends (Triton launcher, reference)
it also does what the native path gets from its entry (specops._fastpath.native_entry) and the
dispatcher: int arguments taken as torch's schema takes them, and a new version for every tensor
the op wrote.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch

from specops._backend import _current_backend, triton_interpreter_enabled
from specops._extension import EXTENSION, require_native
from specops._fastpath import native_entry
from specops.ops._checks import checked_bool, checked_int

# Torch keeps the registrations alive as long as this object lives.
_IMPL_LIBRARY = torch.library.Library("specops", "IMPL") if EXTENSION.loaded else None

DEVICE_DISPATCH_KEYS = ("CUDA", "PrivateUse1")

# Every SpecOp by op name, as it is declared (read through specops.ops.registry).
DECLARED: dict[str, SpecOp] = {}

# torch.compiler.is_compiling() is these two (its torch.jit.is_scripting() is False outside
# TorchScript), one Python call fewer on every eager call: Dynamo folds is_dynamo_compiling() to
# True (so it never reads the flag), and torch.export's non-strict tracing sets the flag.
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_torch_compiler = torch.compiler


def triton_launcher(op_name: str) -> Callable[..., None]:
    """The launcher `specops.triton_kernels.<op_name>.<op_name>`, imported on first use."""
    try:
        module = importlib.import_module(f"specops.triton_kernels.{op_name}")
    except ImportError as exc:
        raise RuntimeError(
            f"specops.{op_name}: the Triton backend needs Triton (triton on CUDA, triton-ascend on NPU): {exc}"
        ) from exc
    return getattr(module, op_name)


# The scalar argument kinds of a schema, as torch names them (Argument.type) and as the op's
# check annotates them (used without the extension).
_INT, _OPTIONAL_INT, _INT_LIST, _BOOL, _BOOL_LIST = "int", "int?", "int[]", "bool", "bool[]"
_SCHEMA_KINDS = {"int": _INT, "Optional[int]": _OPTIONAL_INT, "List[int]": _INT_LIST, "bool": _BOOL,
                 "List[bool]": _BOOL_LIST}
_ANNOTATION_KINDS = {"int": _INT, "int | None": _OPTIONAL_INT, "Sequence[int]": _INT_LIST, "list[int]": _INT_LIST,
                     "bool": _BOOL, "Sequence[bool]": _BOOL_LIST, "list[bool]": _BOOL_LIST}


def scalar_arguments(name: str, check: Callable[..., None]) -> list[tuple[int, str, str]]:
    """(position, name, kind) of every int, int?, int[], bool and bool[] argument of the op: from its schema,
    or without the extension from the annotations of its check (which takes the schema's
    arguments; tests/hardening/test_bad_input_matrix.py holds the two equal)."""
    if EXTENSION.loaded:
        arguments = getattr(torch.ops.specops, name).default._schema.arguments
        kinds = [(argument.name, _SCHEMA_KINDS.get(str(argument.type))) for argument in arguments]
    else:
        parameters = inspect.signature(check).parameters.values()
        kinds = [(parameter.name, _ANNOTATION_KINDS.get(str(parameter.annotation))) for parameter in parameters]
    return [(position, argument, kind) for position, (argument, kind) in enumerate(kinds) if kind is not None]


def written_arguments(name: str, check: Callable[..., None]) -> list[int]:
    """Positions of the tensors (and tensor lists) the op writes: its schema's Tensor(a!)
    arguments, or without the extension every tensor argument (a needless version bump only
    costs a cache miss; a missing one serves a stale value)."""
    if EXTENSION.loaded:
        arguments = getattr(torch.ops.specops, name).default._schema.arguments
        return [position for position, argument in enumerate(arguments)
                if argument.alias_info is not None and argument.alias_info.is_write]
    parameters = inspect.signature(check).parameters.values()
    return [position for position, parameter in enumerate(parameters) if "Tensor" in str(parameter.annotation)]


def _check_triton_can_run(op_name: str, args: tuple[Any, ...]) -> None:
    # Host tensors beside a device one (the checks accept that only for the host-planned sas
    # family: host lengths, device out) launch nothing on the host.
    devices = {arg.device.type for arg in args if isinstance(arg, torch.Tensor)}
    if devices == {"cpu"} and not triton_interpreter_enabled():
        raise RuntimeError(
            f"specops.{op_name}: the Triton backend got CPU tensors; set TRITON_INTERPRET=1 before "
            "importing specops to run Triton kernels on the CPU interpreter"
        )


class SpecOp:
    """Dispatches one op to the selected backend; all three take the schema's arguments."""

    def __init__(self, name: str, check: Callable[..., None], reference: Callable[..., None]):
        self.name = name
        self.check = check
        self.reference = reference
        self._native = getattr(torch.ops.specops, name).default if EXTENSION.loaded else None
        # The same dispatcher call as `self._native` without its generic parser (its FastOp;
        # under SPECOPS_FASTPATH=0 the plain twin): what select() hands out on the eager native
        # backend (None without the extension).
        self.native_entry = native_entry(name)
        self._triton: Callable[..., None] | None = None
        self._scalars = scalar_arguments(name, check)
        self._written = written_arguments(name, check)
        DECLARED[name] = self
        if _IMPL_LIBRARY is not None:
            torch.library.register_fake(f"specops::{name}", self._fake, lib=_IMPL_LIBRARY)
            for key in DEVICE_DISPATCH_KEYS:
                _IMPL_LIBRARY.impl(name, self._device, key)

    def _fake(self, *args: Any) -> None:
        self.check(*args)

    def _device(self, *args: Any) -> None:
        self.check(*args)
        self.triton(*args)

    def triton(self, *args: Any) -> None:
        if self._triton is None:
            self._triton = triton_launcher(self.name)
        self._triton(*args)

    def select(self) -> Callable[..., None]:
        """What this call runs, taking the schema's arguments. Wrappers call `_OP.select()(...)`:
        on the hot path (eager, native backend) that is the op's FastOp, a C++ object, so no
        Python frame stands between the wrapper and the dispatcher (specops._fastpath)."""
        # Compiled graphs always call the registered op, which dispatches by device; the
        # backend switch is an eager-mode tool (and a ContextVar cannot be traced).
        if _is_dynamo_compiling() or _torch_compiler._is_compiling_flag:
            return self._native
        if _current_backend.get() == "native" and self.native_entry is not None:
            return self.native_entry
        return self._call_selected_backend

    def __call__(self, *args: Any) -> None:
        self.select()(*args)

    def _call_selected_backend(self, *args: Any) -> None:
        selected = _current_backend.get()
        if selected == "native":
            # Reached only without the extension (select() hands out the native entry otherwise).
            require_native(self.name)
            self._native(*args)
            return
        args = self.scalars_checked(args)
        self.check(*args)
        if selected == "triton":
            _check_triton_can_run(self.name, args)
            self.triton(*args)
        else:
            self.reference(*args)
        self._bump_written_versions(args)

    def _bump_written_versions(self, args: tuple[Any, ...]) -> None:
        """As the native path's ADInplaceOrView kernel does (csrc/written_versions.h): every tensor
        the op wrote gets a new version, after the op (a raw Triton store bumps nothing by itself)."""
        for position in self._written:
            written = args[position]
            for tensor in (written,) if isinstance(written, torch.Tensor) else written or ():
                if isinstance(tensor, torch.Tensor) and not tensor.is_inference():
                    torch.autograd.graph.increment_version(tensor)

    def scalars_checked(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """args with every int, int?, int[], bool and bool[] argument taken as torch's schema takes it (NumPy
        integers converted), before anything is checked or written; a ValueError names any other.
        The native path gets the same from FastOp and the dispatcher."""
        converted = None
        for position, name, kind in self._scalars:
            value = args[position]
            if kind == _INT or kind == _OPTIONAL_INT:
                if type(value) is int or (value is None and kind == _OPTIONAL_INT):
                    continue
                value = checked_int(value, name)
            elif kind == _BOOL:
                if type(value) is bool:
                    continue
                value = checked_bool(value, name)
            elif kind == _BOOL_LIST:
                if not isinstance(value, (list, tuple)):
                    raise ValueError(f"{name} must be a list of bools, got {type(value).__name__}")
                value = [item if type(item) is bool else checked_bool(item, f"{name}[{i}]")
                         for i, item in enumerate(value)]
            else:
                if not isinstance(value, (list, tuple)):
                    raise ValueError(f"{name} must be a list of ints, got {type(value).__name__}")
                value = [item if type(item) is int else checked_int(item, f"{name}[{i}]") for i, item in enumerate(value)]
            if converted is None:
                converted = list(args)
            converted[position] = value
        return args if converted is None else tuple(converted)
