"""Every interpreter-level speed helper of the package, each beside its plain twin.

The native helpers (csrc/fastpath/) reach into CPython's and torch's C APIs for work that
Python and torch's generic argument parser would do on every call: FastOp (an op's dispatcher
entry without OpOverload's frame and the generic parser), row_views (the drafting layer's buffer
views in one call), the drafting step's per-group lookups (items, items_each, rows_below) and the
wrappers' usual argument forms and NamedTuple results (the twins of the forms' helpers are
specops.arguments' own functions). Beside them, select(), an op's choice of what to run, reads
torch.compiler's private flag in place of a call to torch.compiler.is_compiling(). Every other
private name of torch's that the package reads is read here alone (at the end), so a torch
upgrade that moves one breaks this module and nothing else (tests/tooling/test_module_layout.py).
Each plain twin here computes what its helper computes, with the same errors and messages
(tests/tooling/test_fastpath.py holds every pair to that), in plain Python over torch's own
Python bindings: PlainOp checks the arguments as FastOp does, then calls the op through torch's
generic entry.

This is the only module that imports the helpers; the package uses the names below, which are
the helpers or, when SPECOPS_FASTPATH=0 is in the environment (read once, at import) or the
extension is not loaded, their plain twins. `make test-plain` runs a reduced suite that way.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable
from typing import Any

import torch
from torch._C import _dispatch_find_schema_or_throw, _is_torch_function_mode_enabled, _jit_get_all_schemas
from torch.utils._python_dispatch import TorchDispatchMode

from specops._backend import _current_backend
from specops._extension import EXTENSION

# Whether the native helpers are in use: the extension is loaded and SPECOPS_FASTPATH is not "0".
ENABLED = EXTENSION.loaded and os.environ.get("SPECOPS_FASTPATH", "1") != "0"

if ENABLED:
    import specops._C as _C

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# What THPVariable_CheckExact takes: a tensor whose Python type torch made itself.
_EXACT_TENSORS = (torch.Tensor, torch.nn.Parameter)
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def type_name(value: object) -> str:
    """The name the helpers' messages give value's type: type(value).__name__ (float, float64,
    array, partial, Pattern), as the Python backends' messages give it (csrc/fastpath/py_values.h)."""
    return type(value).__name__


def _is_tensor(value: object) -> bool:
    """Whether the helpers read value as a tensor: its type is torch.Tensor or a subclass
    (Parameter, a real subclass). Not isinstance, which a value whose __class__ says torch.Tensor
    (a MagicMock(spec=torch.Tensor)) passes (py_values.h's is_tensor)."""
    return issubclass(type(value), torch.Tensor)


def _is_numpy_integer(value: object) -> bool:
    """A NumPy integer scalar: numpy.integer among its type's bases (py_values.h's is_numpy_integer)."""
    return any(base.__module__ == "numpy" and base.__name__ == "integer" and not base.__flags__ & _HEAP_TYPE
               for base in type(value).__mro__)


def _held_items(sequence: Any) -> tuple:
    """A list or tuple argument's items as a tuple (py_values.h's held_items): the checks of
    its items may run Python that changes the list; the walk sees the items it started with."""
    return tuple(sequence)


def _fixed_sequence(sequence: Any, message: str) -> tuple:
    """sequence as a tuple; anything that cannot be iterated is a TypeError saying message (as
    PySequence_Fast says it: only iter()'s TypeError is replaced)."""
    if type(sequence) is tuple:
        return sequence
    try:
        iterator = iter(sequence)
    except TypeError:
        raise TypeError(message) from None
    return tuple(iterator)


def _arity(name: str, parameters: str, args: tuple, kwargs: dict) -> None:
    """The native functions' own TypeErrors for a call that does not give two positional arguments."""
    if kwargs:
        raise TypeError(f"specops._C.{name}() takes no keyword arguments")
    if len(args) != 2:
        raise TypeError(f"{name} takes 2 positional arguments ({parameters}), got {len(args)}")


# --- FastOp (csrc/fastpath/fast_call.h) -------------------------------------------------------

_TENSOR, _OPTIONAL_TENSOR, _TENSOR_LIST, _INT, _OPTIONAL_INT, _BOOL, _INT_LIST, _BOOL_LIST = range(8)


def _kind_of(jit_type: Any) -> int | None:
    kind = jit_type.kind()
    if kind == "TensorType":
        return _TENSOR
    if kind == "IntType":
        return _INT
    if kind == "BoolType":
        return _BOOL
    if kind == "OptionalType":
        return {"TensorType": _OPTIONAL_TENSOR, "IntType": _OPTIONAL_INT}.get(jit_type.getElementType().kind())
    if kind == "ListType":
        return {"TensorType": _TENSOR_LIST, "IntType": _INT_LIST, "BoolType": _BOOL_LIST}.get(
            jit_type.getElementType().kind())
    return None


def _boxed_int(value: object) -> bool:
    return type(value) is int and _INT64_MIN <= value <= _INT64_MAX


def _is_numpy_bool(value: object) -> bool:
    """NumPy's bool scalar by its C type's name (tp_name, a static type's "module.name"), as
    py_values.h's is_numpy_bool finds it."""
    kind = type(value)
    return not kind.__flags__ & _HEAP_TYPE and f"{kind.__module__}.{kind.__name__}" in ("numpy.bool", "numpy.bool_")


def _is_int_like(value: object) -> bool:
    """What an int argument takes besides an int (py_values.h's is_int_like): an int subclass
    (not a bool), a NumPy integer, a SymInt, a one-element integer tensor."""
    kind = type(value)
    if kind is bool:
        return False
    if issubclass(kind, (int, torch.SymInt)) or _is_numpy_integer(value):
        return True
    return _is_tensor(value) and value.numel() == 1 and not value.is_floating_point() and not value.is_complex() \
        and value.dtype != torch.bool


def _is_boolean(value: object) -> bool:
    """What torch's schema reads as a bool besides True and False (py_values.h's is_boolean)."""
    if _is_numpy_bool(value):
        return True
    return _is_tensor(value) and value.dtype == torch.bool and value.numel() == 1


def _boxed(value: object, kind: int) -> bool:
    """Whether FastOp boxes value itself (push_argument); else it rejects it or hands the call on."""
    if kind in (_OPTIONAL_TENSOR, _OPTIONAL_INT) and value is None:
        return True
    if kind in (_TENSOR, _OPTIONAL_TENSOR):
        return type(value) in _EXACT_TENSORS
    if kind in (_INT, _OPTIONAL_INT):
        return _boxed_int(value)
    if kind == _BOOL:
        return value is True or value is False
    if type(value) not in (list, tuple):
        return False
    if kind == _TENSOR_LIST:
        return all(type(item) in _EXACT_TENSORS for item in value)
    if kind == _BOOL_LIST:
        return all(item is True or item is False for item in value)
    return all(_boxed_int(item) for item in value)


def _reject(argument: str, expected: str, value: object) -> None:
    described = "None" if value is None else f"{type_name(value)} {value!r}"
    raise ValueError(f"{argument} must be {expected}, got {described}")


def _reject_unusable(name: str, kind: int, value: object) -> None:
    """The ValueError FastOp raises for an argument of the wrong kind (reject_unusable); returns
    for one torch's parser converts."""
    if kind == _TENSOR:
        if not _is_tensor(value):
            _reject(name, "a tensor", value)
    elif kind == _OPTIONAL_TENSOR:
        if value is not None and not _is_tensor(value):
            _reject(name, "a tensor or None", value)
    elif kind in (_INT, _OPTIONAL_INT):
        if not (_is_int_like(value) or (value is None and kind == _OPTIONAL_INT)):
            _reject(name, "an int", value)
    elif kind == _BOOL:
        if not _is_boolean(value):
            _reject(name, "a bool (True, False, a NumPy bool or a one-element bool tensor)", value)
    elif kind == _BOOL_LIST:
        if not issubclass(type(value), (list, tuple)):
            _reject(name, "a list of bools", value)
        for i, item in enumerate(_held_items(value)):
            if not (item is True or item is False or _is_boolean(item)):
                _reject(f"{name}[{i}]", "a bool (True, False, a NumPy bool or a one-element bool tensor)", item)
    else:
        tensors = kind == _TENSOR_LIST
        if not issubclass(type(value), (list, tuple)):
            _reject(name, "a list of tensors" if tensors else "a list of ints", value)
        for i, item in enumerate(_held_items(value)):
            if not (_is_tensor(item) if tensors else _is_int_like(item)):
                _reject(f"{name}[{i}]", "a tensor" if tensors else "an int", item)


_ABSENT = object()  # an argument a keyword call leaves to its schema default


class PlainOp:
    """FastOp's plain twin: PlainOp(qualified_name, generic_entry) calls generic_entry (the
    overload's own entry, OpOverload._op, or its _op_dk bound to a dispatch key) with the schema's
    arguments, by position or by keyword, after refusing an argument of the wrong kind with the
    ValueError FastOp raises. Every call FastOp hands to the generic entry (a count or a keyword it
    cannot place, a value it does not box, a torch-function mode, an argument torch converts) goes
    there unchecked, as it does from FastOp."""

    def __init__(self, qualified_name: str, generic_entry: Callable[..., Any]):
        # The dispatcher's own lookup, as FastOp's (and its RuntimeError for an op it lacks).
        schema = _dispatch_find_schema_or_throw(qualified_name, "").schema()
        self._generic_entry = generic_entry
        self._names = [argument.name for argument in schema.arguments]
        self._has_default = [argument.has_default_value() for argument in schema.arguments]
        self._kinds = []
        for argument in schema.arguments:
            kind = _kind_of(argument.type)
            if kind is None:
                raise ValueError(f"FastOp: {qualified_name} has an argument of type {argument.type.str()}, "
                                 "which the fast path does not box")
            self._kinds.append(kind)
        self._num_required = len(schema.arguments)
        while self._num_required and schema.arguments[self._num_required - 1].has_default_value():
            self._num_required -= 1
        for value in schema.returns:
            kind = _kind_of(value.type)
            if kind not in (_INT, _INT_LIST, _TENSOR_LIST):
                raise ValueError(f"FastOp: {qualified_name} returns a {value.type.str()}, "
                                 "which the fast path does not convert")

    def _ordered(self, args: tuple, kwargs: dict) -> Any:
        """The arguments in the schema's order (_ABSENT where a default stands in), or None where
        FastOp hands the call on unchecked."""
        if len(args) + len(kwargs) > len(self._kinds):
            return None
        if not kwargs:
            return args if len(args) >= self._num_required else None
        values = [*args, *[_ABSENT] * (len(self._kinds) - len(args))]
        for name, value in kwargs.items():
            position = self._names.index(name) if name in self._names else None
            if position is None or values[position] is not _ABSENT:
                return None
            values[position] = value
        if any(value is _ABSENT and not has_default for value, has_default in zip(values, self._has_default)):
            return None
        return values

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        values = self._ordered(args, kwargs)
        if values is not None and not _is_torch_function_mode_enabled():
            for name, kind, value in zip(self._names, self._kinds, values):
                if value is not _ABSENT and not _boxed(value, kind):
                    _reject_unusable(name, kind, value)
                    break
        return self._generic_entry(*args, **kwargs)


def _overload(op_name: str) -> Any:
    return getattr(torch.ops.specops, op_name).default


def op_schema(op_name: str) -> Any:
    """The registered schema of torch.ops.specops.<op_name> (a torch FunctionSchema: its arguments'
    names, types, defaults and alias annotations), read from the overload (torch keeps it there,
    as a private attribute: read here, in the one module that reaches into torch)."""
    return _overload(op_name)._schema


def native_entry(op_name: str) -> Callable[..., Any] | None:
    """torch.ops.specops.<op_name>.default as the wrappers enter it: through its FastOp, or its
    PlainOp under SPECOPS_FASTPATH=0; None without the extension."""
    if not EXTENSION.loaded:
        return None
    return (_C.FastOp if ENABLED else PlainOp)(f"specops::{op_name}", _overload(op_name)._op)


def check_entry(op_name: str) -> Callable[..., None] | None:
    """The op's metadata checks, run on any tensors: its Meta kernel (the checks of
    csrc/cpu/<op_name>.cpp, the op's fake kernel) called directly, through a FastOp (or its PlainOp)
    bound to the Meta key. The Triton launcher and the reference run it before anything else;
    None without the extension."""
    if not EXTENSION.loaded:
        return None
    meta = functools.partial(_overload(op_name)._op_dk, torch._C.DispatchKey.Meta)
    qualified_name = f"specops::{op_name}"
    return _C.FastOp(qualified_name, meta, "Meta") if ENABLED else PlainOp(qualified_name, meta)


def _selector(native: Callable[..., Any] | None, entry: Callable[..., Any] | None,
              other_backends: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """The fast select(): reads torch.compiler's two conditions itself. torch.compiler.is_compiling()
    is them with one call more on every eager call (its torch.jit.is_scripting() is False outside
    TorchScript): Dynamo folds is_dynamo_compiling() to True, so it never reads the private flag,
    and torch.export's non-strict tracing sets the flag."""
    current = _current_backend.get
    is_dynamo_compiling, compiler = torch.compiler.is_dynamo_compiling, torch.compiler

    def select() -> Callable[..., Any]:
        if is_dynamo_compiling() or compiler._is_compiling_flag:
            return native
        if entry is not None and current() == "native":
            return entry
        return other_backends
    return select


def plain_selector(native: Callable[..., Any] | None, entry: Callable[..., Any] | None,
                   other_backends: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """_selector's plain twin: asks torch.compiler.is_compiling()."""
    current = _current_backend.get
    is_compiling = torch.compiler.is_compiling

    def plain_select() -> Callable[..., Any]:
        if is_compiling():
            return native
        if entry is not None and current() == "native":
            return entry
        return other_backends
    return plain_select


def selector(native: Callable[..., Any] | None, entry: Callable[..., Any] | None,
             other_backends: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    """An op's select(): what a wrapper's call runs. In a compiled graph the registered op
    (`native`, which dispatches by device: the backend switch is an eager tool, and Dynamo cannot
    trace its ContextVar); on the eager native backend `entry` (its FastOp: no Python frame between
    the wrapper and the dispatcher); else `other_backends`."""
    return (_selector if ENABLED else plain_selector)(native, entry, other_backends)


# --- the wrappers' usual argument forms and named results (csrc/fastpath/usual_forms.h) -------

def _traced_as(helper: Callable[..., Any], plain: Callable[..., Any]) -> Callable[..., Any]:
    """helper, which Dynamo cannot trace (a C function), traced as its twin in a compiled graph."""
    torch.compiler.substitute_in_graph(helper, skip_signature_check=True)(plain)
    return helper


def fronted_tensor_list(plain: Callable[[Any, str], list]) -> Callable[[Any, str], list]:
    """specops.arguments' checked_tensor_list as the package calls it (plain: its twin)."""
    return _traced_as(_C.usual_tensor_list(plain), plain) if ENABLED else plain


def fronted_group_settings(plain: Callable[..., list]) -> Callable[..., list]:
    """specops.arguments' group_settings as the package calls it (plain: its twin)."""
    return _traced_as(_C.usual_group_settings(plain), plain) if ENABLED else plain


def plain_record_maker(record_type: type) -> Callable[[tuple], tuple]:
    """record_maker's plain twin: the NamedTuple's own constructor, given the values in order."""
    def plain_make(values: tuple) -> tuple:
        return record_type(*values)
    return plain_make


def record_maker(record_type: type) -> Callable[[tuple], tuple]:
    """make(values) -> record_type(*values): a wrapper's NamedTuple result from a tuple of every
    field in order, allocated as tuple.__new__ allocates it, without the record's Python __new__."""
    plain = plain_record_maker(record_type)
    return _traced_as(_C.record_maker(record_type, plain), plain) if ENABLED else plain


# --- row_views and the lookups (csrc/fastpath/row_views.h) ------------------------------------

def _bound(bounds: tuple, index: int) -> int:
    """bounds[index] read as PyLong_AsLongLong reads it (through __index__); whatever it raises,
    or an int past int64, is the TypeError row_views raises."""
    value = bounds[index]
    try:
        number = operator.index(value)
    except Exception:  # noqa: BLE001  (the native function replaces every error alike)
        number = None
    if number is None or not _INT64_MIN <= number <= _INT64_MAX:
        raise TypeError(f"bounds[{index}] must be an int, got {type_name(value)}")
    return number


def plain_row_views(*args: Any, **kwargs: Any) -> list[torch.Tensor]:
    """row_views(tensors, bounds, /): [t[bounds[2i]:bounds[2i + 1]] for the i-th tensor t] along
    the first dimension, each detached (the storage and version counter shared, no autograd
    record; a tensor subclass's view a plain tensor)."""
    _arity("row_views", "tensors, bounds", args, kwargs)
    tensors = _fixed_sequence(args[0], "tensors must be a sequence of tensors")
    bounds = _fixed_sequence(args[1], "bounds must be a sequence of ints")
    if len(bounds) != 2 * len(tensors):
        raise ValueError(f"bounds must hold (start, end) for each of the {len(tensors)} tensors, "
                         f"got {len(bounds)} entries")
    views = []
    for i, tensor in enumerate(tensors):
        if not _is_tensor(tensor):
            raise ValueError(f"tensors[{i}] must be a tensor")
        start, end = _bound(bounds, 2 * i), _bound(bounds, 2 * i + 1)
        if tensor.dim() < 1:
            raise ValueError(f"tensors[{i}] must have at least one dimension")
        rows = tensor.size(0)
        if not 0 <= start <= end <= rows:
            raise ValueError(f"bounds of tensors[{i}] must satisfy 0 <= start <= end <= {rows}, got [{start}, {end})")
        if type(tensor) not in _EXACT_TENSORS:
            tensor = tensor.as_subclass(torch.Tensor)  # the native view is a plain tensor
        views.append(tensor[start:end].detach())
    return views


def plain_items(*args: Any, **kwargs: Any) -> list:
    """items(mapping, keys, /): [mapping[key] for key in keys]."""
    _arity("items", "mapping, keys", args, kwargs)
    mapping, keys = args
    return [mapping[key] for key in _fixed_sequence(keys, "keys must be a sequence")]


def plain_items_each(*args: Any, **kwargs: Any) -> list[list]:
    """items_each(mapping, key_lists, /): [items(mapping, keys) for keys in key_lists]."""
    _arity("items_each", "mapping, key_lists", args, kwargs)
    mapping, key_lists = args
    return [plain_items(mapping, keys) for keys in _fixed_sequence(key_lists, "key_lists must be a sequence")]


def plain_rows_below(*args: Any, **kwargs: Any) -> bool:
    """rows_below(values, minimum, /): whether a tensor among values may have fewer than minimum
    rows: one with no dimension or fewer rows, or any but a plain dense one (a subclass, sparse,
    quantized or nested), whose rows the caller's own check reads. Other values are skipped."""
    _arity("rows_below", "values, minimum", args, kwargs)
    minimum = operator.index(args[1])
    if not _INT64_MIN <= minimum <= _INT64_MAX:
        raise OverflowError("int too big to convert")
    for value in _fixed_sequence(args[0], "values must be a sequence"):
        if not isinstance(value, torch.Tensor):
            continue
        if type(value) not in _EXACT_TENSORS or value.layout != torch.strided or value.is_quantized \
                or value.is_nested or value.dim() == 0 or value.size(0) < minimum:
            return True
    return False


# The helpers the package calls: native, or their plain twins.
if ENABLED:
    row_views, items, items_each, rows_below = _C.row_views, _C.items, _C.items_each, _C.rows_below
else:
    row_views, items, items_each, rows_below = plain_row_views, plain_items, plain_items_each, plain_rows_below


# --- torch's private names, read here alone ------------------------------------------------------

# The base class of launch_count's LaunchCounter (torch has no public name for it).
DispatchMode = TorchDispatchMode

# A tensor's version counter, bumped by every in-place write (RuntimeError for an inference
# tensor, which keeps none): persistent/extents.py's test for writes the mappings did not make.
version_counter = operator.attrgetter("_version")


def device_sleep(cycles: int) -> None:
    """Keeps the current CUDA stream busy for about `cycles` clock cycles (the device check's
    test that a call does not synchronize)."""
    torch.cuda._sleep(cycles)


def specops_schemas() -> list[str]:
    """Every torch.ops.specops schema, as torch prints it, by name (each op's file defines its own,
    csrc/cpu/NAME.cpp): the API surface in one listing (`python -m specops --schemas`)."""
    return sorted(str(schema) for schema in _jit_get_all_schemas() if schema.name.startswith("specops::"))
