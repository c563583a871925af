"""Which kernels exist, and how the launchers really launch them, in triton-ascend 3.2's terms.

Triton 3.2 (which triton-ascend 3.2 is) binds launch arguments differently from the Triton 3.9
that specops.bench.kernels is written for: `create_function_from_signature` returns the cache
key parts, an `AscendAttrsDescriptor` derives divisibility and the ints equal to 1 (which become
constexprs), and under TRITON_INTERPRET a kernel is an `InterpretedFunction` whose `run` is an
instance attribute, so launches are intercepted at `__getitem__`. Nothing here is written per
kernel: every @triton.jit in specops.triton_kernels that no other jit function calls is a
kernel, and its specializations are whatever the op table's calls make the launchers pass.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import os
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

import torch

NPU_ARCH = "Ascend910B4"
# Random valid calls per op on top of the op table's fixed one (SPECOPS_ASCEND_DRAWS widens a run).
DRAWS = int(os.environ.get("SPECOPS_ASCEND_DRAWS", "3"))


def _jit_classes() -> tuple[type, ...]:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


def _is_jit(obj: Any) -> bool:
    return isinstance(obj, _jit_classes()) and callable(getattr(obj, "fn", None))


def kernel_id(fn: Callable) -> str:
    return f"{fn.__module__}:{fn.__qualname__}"


def kernel_name(kernel: str) -> str:
    return kernel.partition(":")[2]


def kernel_function(kernel: str) -> Callable:
    module_name, _, qualname = kernel.partition(":")
    return functools.reduce(getattr, qualname.split("."), importlib.import_module(module_name))


def _callees(fn: Callable) -> set[str]:
    tree = ast.parse(inspect.getsource(fn).lstrip())
    found = set()
    for node in ast.walk(tree):
        target: Any = None
        if isinstance(node, ast.Name):
            target = fn.__globals__.get(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            target = getattr(fn.__globals__.get(node.value.id), node.attr, None)
        if target is not None and _is_jit(target):
            found.add(kernel_id(target.fn))
    return found


def defined_kernels() -> list[str]:
    """Every jit function of specops.triton_kernels that no other jit function calls."""
    import specops.triton_kernels as package

    functions = {}
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for obj in vars(module).values():
            if _is_jit(obj) and obj.fn.__module__ == module.__name__:
                functions[kernel_id(obj.fn)] = obj.fn
    called = set().union(*(_callees(fn) for fn in functions.values())) if functions else set()
    return sorted(name for name in functions if name not in called)


@dataclasses.dataclass(frozen=True)
class Specialization:
    """What triton.compile needs for one launch, derived as triton-ascend 3.2's JITFunction.run
    derives it: the signature of the non-constexpr parameters, the constants (declared constexprs,
    ints equal to 1, None), the divisibility attributes and the compile options."""

    signature: dict[str, str]
    constants: dict[str, Any]
    properties: tuple[tuple[str, tuple[int, ...]], ...]  # the descriptor's (property, parameter indices)
    options: dict[str, Any]

    def key(self) -> str:
        return repr((sorted(self.signature.items()), sorted((k, repr(v)) for k, v in self.constants.items()),
                     self.properties, sorted((k, repr(v)) for k, v in self.options.items())))

    def descriptor(self):
        """The AscendAttrsDescriptor triton.compile takes."""
        descriptor = type(_backend().get_attrs_descriptor([], []))()
        descriptor.arg_properties = {name: list(indices) for name, indices in self.properties}
        descriptor._init_slots()
        return descriptor

    def describe(self) -> str:
        parts = [f"{name}:{kind}" for name, kind in self.signature.items() if name not in self.constants]
        parts += [f"{name}={value!r}" for name, value in self.constants.items()]
        return ", ".join(parts)


@functools.lru_cache(maxsize=None)
def _backend():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    return make_backend(GPUTarget("npu", NPU_ARCH, 0))


@functools.lru_cache(maxsize=None)
def _jit_view(fn: Callable):
    from triton.runtime.jit import JITFunction

    return JITFunction(fn)


@functools.lru_cache(maxsize=None)
def _binder(fn: Callable):
    from triton.runtime.jit import create_function_from_signature

    jit = _jit_view(fn)
    return create_function_from_signature(jit.signature, jit.params, _backend())


def specialize(fn: Callable, args: tuple, kwargs: dict) -> Specialization:
    """JITFunction.run's derivation (triton-ascend 3.2), without compiling."""
    jit = _jit_view(fn)
    backend = _backend()
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", False)
    bound_args, sig_and_spec, _, _, _ = _binder(fn)(*args, **kwargs)
    names = [p.name for p in jit.params if not p.is_constexpr]
    signature = {name: ("*i8" if kind == "none" else kind) for name, kind in zip(names, sig_and_spec[:len(names)])}
    values = tuple(bound_args.values())
    descriptor = backend.get_attrs_descriptor(jit.params, values)
    constant_params = descriptor.get_constants()
    constants = {p.name: v for v, p in zip(values, jit.params)
                 if p.is_constexpr or p.num in constant_params or v is None}
    properties = tuple(sorted((name, tuple(sorted(indices))) for name, indices in descriptor.arg_properties.items()))
    options = {k: v for k, v in backend.parse_options(kwargs).__dict__.items()}
    return Specialization(signature, constants, properties, options)


@dataclasses.dataclass
class Launch:
    """One `kernel[grid](...)` call of a launcher."""

    kernel: str
    grid: tuple[int, ...]
    specialization: Specialization | None  # None when it cannot be derived (`error` says why)
    label: str
    args: dict[str, Any] = dataclasses.field(default_factory=dict)  # by parameter (kept while it is run)
    error: str | None = None


def _grid(grid: Any, fn: Callable, args: tuple, kwargs: dict) -> tuple[int, ...]:
    if callable(grid):
        grid = grid(inspect.signature(fn).bind(*args, **kwargs).arguments)
    return tuple(int(size) for size in grid)


def bound_arguments(fn: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every parameter's value, launch options (num_warps, ...) left out."""
    parameters = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in kwargs.items() if k in parameters}
    bound = inspect.signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


@contextlib.contextmanager
def capture_launches(label: str = "", run: Callable[[Launch], None] | None = None) -> Iterator[list[Launch]]:
    """Records every kernel launch inside the block (kernels are InterpretedFunctions: the process
    runs under TRITON_INTERPRET=1). run(launch): called for each launch in place of the
    interpreter (with the launch's arguments kept); without it the kernel is not run at all."""
    from triton.runtime.interpreter import InterpretedFunction

    launches: list[Launch] = []
    original = InterpretedFunction.__getitem__

    def getitem(self, grid):
        def launch(*args, **kwargs):
            record = Launch(kernel_id(self.fn), _grid(grid, self.fn, args, kwargs), None, label)
            try:
                record.specialization = specialize(self.fn, args, kwargs)
            except Exception as exc:  # reported as the kernel's failure; the launcher goes on
                record.error = f"{type(exc).__name__}: {exc}"
                launches.append(record)
                if run is not None:
                    raise
                return
            if run is not None:
                record.args = bound_arguments(self.fn, args, kwargs)
                run(record)
                record.args = {}
            launches.append(record)

        return launch

    InterpretedFunction.__getitem__ = getitem
    try:
        yield launches
    finally:
        InterpretedFunction.__getitem__ = original


def host_routed(kernel: str) -> bool:
    """Whether the kernel's launcher takes a host route on the NPU (its module has `host_route`),
    so that no NPU-route launch reaches it."""
    return callable(getattr(importlib.import_module(kernel.partition(":")[0]), "host_route", None))


def op_calls(op, draws: int) -> list[tuple[str, dict]]:
    """(label, call) for the op's valid call and `draws` of its random valid calls."""
    from hypothesis import Phase, given, settings

    found: list[dict] = []
    if draws:
        @settings(max_examples=draws, database=None, derandomize=True, phases=[Phase.generate])
        @given(op.draw_call)
        def collect(call):
            found.append(call)

        collect()
    return [(f"{op.name} {'valid call' if i == 0 else f'draw {i}'}", call)
            for i, call in enumerate([op.valid_call(), *found])]


def clone_call(call: dict) -> dict:
    def clone(value):
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, (list, tuple)):
            return type(value)(clone(item) for item in value)
        return value

    return {name: clone(value) for name, value in call.items()}
