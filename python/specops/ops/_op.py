"""One place that wires an op's faces together.

Each op module declares a `SpecOp` with its reference. The schema, the CPU kernel and the Meta
kernel come from the C++ extension (csrc/cpu/NAME.cpp, all three in one file): the Meta kernel is
the op's metadata checks, so it is the fake kernel under torch.compile, and `SpecOp.check` calls
it directly (specops._fastpath.check_entry) before the Triton launcher or the reference touches
anything. This module adds the CUDA and PrivateUse1 (Ascend NPU) kernels, which check and then
launch the op's Triton kernel, the op's argument record and the backend switch used by the public
wrappers. On the Python backends (Triton launcher, reference) it also does what the native path
gets from its entry (specops._fastpath.native_entry) and the dispatcher: int and bool arguments
taken as torch's schema takes them, and a new version for every tensor the op wrote.

A wrapper calls its own op by position, each argument a local named as the schema's argument,
in the schema's order (a call of more than 15 keywords is a dict built and unpacked again on
every call; tests/tooling/test_op_contract.py holds every such call to the schema's names, so no
argument can be swapped); the layers call ops by keyword.

Without the extension there is no schema, no check and no record: the native and Triton
backends raise the reason (specops._extension), which import has already logged, and the reference
backend still runs, unchecked, on the wrapper's arguments as they are, named by its call (the
names it passes, read once from its source: the schema's names, as the contract test holds them):
the reference is plain torch, the oracle a build that cannot load is compared with.
"""

from __future__ import annotations

import ast
import collections
import importlib
import inspect
import operator
import types
from collections.abc import Callable
from typing import Any

import torch

import specops._extension as _extension
from specops._backend import current_backend, triton_interpreter_enabled
from specops._extension import EXTENSION, require_native
from specops._fastpath import check_entry, native_entry, op_schema, selector

# Torch keeps the registrations alive as long as this object lives.
_IMPL_LIBRARY = torch.library.Library("specops", "IMPL") if EXTENSION.loaded else None

DEVICE_DISPATCH_KEYS = ("CUDA", "PrivateUse1")

# Every SpecOp by op name, as it is declared (read through specops.ops.registry).
DECLARED: dict[str, SpecOp] = {}


def triton_launcher(op_name: str) -> Callable[..., None]:
    """The launcher `specops.triton_kernels.<op_name>.<op_name>`, imported on first use."""
    try:
        module = importlib.import_module(f"specops.triton_kernels.{op_name}")
    except ImportError as exc:
        raise RuntimeError(
            f"specops.{op_name}: the Triton backend needs Triton (triton on CUDA, triton-ascend on NPU): {exc}"
        ) from exc
    return getattr(module, op_name)


# The scalar argument kinds of a schema, as torch names them (Argument.type).
_INT, _OPTIONAL_INT, _INT_LIST, _BOOL, _BOOL_LIST = "int", "int?", "int[]", "bool", "bool[]"
_SCHEMA_KINDS = {"int": _INT, "Optional[int]": _OPTIONAL_INT, "List[int]": _INT_LIST, "bool": _BOOL,
                 "List[bool]": _BOOL_LIST}


def argument_record(name: str, schema: Any) -> type:
    """The op's argument record: a NamedTuple of its schema's arguments, in the schema's order,
    with the schema's defaults. The wrapper fills it by keyword, the reference and the Triton
    launcher read it by name (`a.seq_lens`); no face restates the list."""
    arguments = schema.arguments
    defaults = []
    for argument in reversed(arguments):
        if not argument.has_default_value():
            break
        default = argument.default_value
        defaults.insert(0, list(default) if isinstance(default, (list, tuple)) else default)
    return collections.namedtuple(f"{name}_arguments", [argument.name for argument in arguments], defaults=defaults)


def _check_triton_can_run(op_name: str, args: tuple[Any, ...]) -> None:
    # Host tensors beside a device one (the checks accept that only for the host-planned sas
    # family: host lengths, device out) launch nothing on the host.
    devices = {arg.device.type for arg in args if isinstance(arg, torch.Tensor)}
    if devices == {"cpu"} and not triton_interpreter_enabled():
        raise RuntimeError(
            f"specops.{op_name}: the Triton backend got CPU tensors; set TRITON_INTERPRET=1 before "
            "importing specops to run Triton kernels on the CPU interpreter"
        )


def _taken(value: Any, kind: str) -> Any:
    """An argument the op's checks accepted, as torch's schema takes it: a NumPy integer or a
    one-element tensor as the int (or bool) it holds (the checks refused every other kind)."""
    if kind == _INT or kind == _OPTIONAL_INT:
        return value if type(value) is int or value is None else operator.index(value)
    if kind == _BOOL:
        return value if type(value) is bool else bool(value)
    if kind == _BOOL_LIST:
        return [item if type(item) is bool else bool(item) for item in value]
    return [item if type(item) is int else operator.index(item) for item in value]


def wrapper_call(tree: ast.AST) -> ast.Call | None:
    """The call `_OP.select()(...)` in an op module's syntax tree: the wrapper's call of its op."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Call) and \
                isinstance(node.func.func, ast.Attribute) and node.func.func.attr == "select" and \
                isinstance(node.func.func.value, ast.Name) and node.func.func.value.id == "_OP":
            return node
    return None


def wrapper_call_names(op_name: str) -> tuple[str, ...]:
    """The names of the locals the op's wrapper passes its op by position, in order (the schema's
    names: tests/tooling/test_op_contract.py holds every wrapper to that), read from the source of
    specops.ops.<op_name>: what names the arguments where no schema is registered."""
    call = wrapper_call(ast.parse(inspect.getsource(importlib.import_module(f"specops.ops.{op_name}"))))
    return tuple(argument.id for argument in call.args) if call is not None else ()


class SpecOp:
    """Dispatches one op to the selected backend; all three take the schema's arguments, by
    position or by keyword (the layers' calls)."""

    def __init__(self, name: str, reference: Callable[..., None]):
        self.name = name
        self.reference = reference
        self._triton: Callable[..., None] | None = None
        self._call_names: tuple[str, ...] | None = None  # without the extension: wrapper_call_names
        if EXTENSION.loaded:
            schema = op_schema(name)
            self._native = getattr(torch.ops.specops, name).default
            self.arguments = argument_record(name, schema)
            self._scalars = [(position, _SCHEMA_KINDS[str(argument.type)])
                             for position, argument in enumerate(schema.arguments)
                             if str(argument.type) in _SCHEMA_KINDS]
            self._written = [position for position, argument in enumerate(schema.arguments)
                             if argument.alias_info is not None and argument.alias_info.is_write]
        else:
            self._native = self.arguments = None
            self._scalars = self._written = []
        # The same dispatcher call as `self._native` without its generic parser (its FastOp;
        # under SPECOPS_FASTPATH=0 the plain twin): what select() hands out on the eager native
        # backend (None without the extension).
        self.native_entry = native_entry(name)
        # The op's metadata checks (its Meta kernel), on any device.
        self.check = check_entry(name)
        # What a wrapper's call runs now (specops._fastpath.selector): `_OP.select()(...)`.
        self.select = selector(self._native, self.native_entry, self._call_selected_backend)
        DECLARED[name] = self
        if _IMPL_LIBRARY is not None:
            for key in DEVICE_DISPATCH_KEYS:
                _IMPL_LIBRARY.impl(name, self._device, key)

    def _device(self, *args: Any) -> None:
        self.check(*args)
        self.triton(self.arguments(*args))

    def triton(self, arguments: tuple) -> None:
        if self._triton is None:
            self._triton = triton_launcher(self.name)
        self._triton(arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.select()(*args, **kwargs)

    def checked(self, *args: Any, **kwargs: Any) -> tuple:
        """The call's argument record after the op's checks (its Meta kernel, specops._fastpath
        check_entry), every int and bool taken as torch's schema takes it (a NumPy integer as the
        int it holds): what the Python backends run on. Without the extension (read now: a test
        may stand one in), the reference backend's record is the arguments as given, unchecked,
        those by position named as the wrapper's call names them (wrapper_call_names)."""
        if not _extension.EXTENSION.loaded:
            if current_backend() != "reference":
                require_native(self.name)  # the checks and the record come from the extension
            if args and self._call_names is None:
                self._call_names = wrapper_call_names(self.name)
            return types.SimpleNamespace(**dict(zip(self._call_names or (), args)), **kwargs)
        self.check(*args, **kwargs)
        arguments = self.arguments(*args, **kwargs)
        converted = None
        for position, kind in self._scalars:
            value = arguments[position]
            taken = _taken(value, kind)
            if taken is not value:
                converted = converted or {}
                converted[arguments._fields[position]] = taken
        if converted:
            arguments = arguments._replace(**converted)
        return arguments

    def _call_selected_backend(self, *args: Any, **kwargs: Any) -> None:
        selected = current_backend()
        if selected == "native":
            require_native(self.name)
            self._native(*args, **kwargs)  # reached only when the wrapper's entry was replaced
            return
        arguments = self.checked(*args, **kwargs)
        if selected == "triton":
            _check_triton_can_run(self.name, arguments)
            self.triton(arguments)
        else:
            self.reference(arguments)
        self._bump_written_versions(arguments)

    def _bump_written_versions(self, arguments: tuple) -> None:
        """As the native path's ADInplaceOrView kernel does (csrc/written_versions.h): every tensor
        the op wrote gets a new version, after the op (a raw Triton store bumps nothing by itself).
        Without the extension's record nothing is known of what was written: the reference's own
        torch writes have bumped their tensors."""
        if not isinstance(arguments, tuple):
            return
        for position in self._written:
            written = arguments[position]
            for tensor in (written,) if isinstance(written, torch.Tensor) else written or ():
                if isinstance(tensor, torch.Tensor) and not tensor.is_inference():
                    torch.autograd.graph.increment_version(tensor)
