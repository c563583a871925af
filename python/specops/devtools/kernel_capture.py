"""Which Triton kernels exist, and the specializations their launchers really launch.

Triton compiles for a chosen target without a device: `triton.compile(ASTSource(...),
target=GPUTarget(...))` runs the whole pipeline down to a cubin (CUDA) or an HSA code object
(AMD). What it needs is what the JIT would derive at launch time from the arguments: the
signature (pointer dtypes, i32 or i64 scalars), the constexprs (ints equal to 1 become
constexprs too) and the attributes (divisibility by 16 of pointers and ints; on AMD, pointers
whose offsets fit 32 bits). None of that is written by hand here: `capture_launches` intercepts
the launchers' own `kernel[grid](...)` calls and passes each call's arguments through Triton's
own JIT binder, once per target backend, so the specializations are exactly the ones a device
run would compile (kernel_compile.py compiles them).

Two Tritons bind arguments differently, and both are served here: upstream Triton 3.9 (CUDA and
AMD targets: `create_function_from_signature` plus `JITFunction._pack_args`, `Specialization`)
and triton-ascend 3.2, which is Triton 3.2 (the NPU target, tests/ascend: the binder returns the
cache key parts and an `AscendAttrsDescriptor` derives divisibility and the ints equal to 1,
`NpuSpecialization`). Launches are intercepted at `kernel[grid]` (`__getitem__`), the one entry
point both share: in 3.2 the interpreter's `run` is an instance attribute and its
`InterpretedFunction` is no `KernelInterface`.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from specops.devtools.targets import TARGETS, Target


def _kernel_classes() -> tuple[type, ...]:
    """The classes a launch `kernel[grid](...)` goes through: the JIT's and the interpreter's."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction, InterpretedFunction


def _is_jit(obj: Any) -> bool:
    return isinstance(obj, _kernel_classes()) and callable(getattr(obj, "fn", None))


def kernel_id(fn: Callable) -> str:
    """"module:qualname" of a kernel's Python function: importable from any process."""
    return f"{fn.__module__}:{fn.__qualname__}"


def kernel_name(kernel: str) -> str:
    return kernel.partition(":")[2]


def kernel_function(kernel: str) -> Callable:
    """The Python function of a kernel id (its module imported in this process)."""
    module_name, _, qualname = kernel.partition(":")
    return functools.reduce(getattr, qualname.split("."), importlib.import_module(module_name))


def _callees(fn: Callable) -> set[str]:
    """The jit functions `fn`'s source refers to (by name or module attribute)."""
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
    """Every kernel in specops.triton_kernels: the jit functions no other jit function calls.

    The rest are device helpers (`segment_of`, `slots_of_tokens`, ...), compiled as part of the
    kernels that call them. A jit function nothing calls counts as a kernel, so one that no
    launcher launches is reported rather than silently never compiled."""
    import specops.triton_kernels as package

    functions = {}
    for module_info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{module_info.name}")
        for obj in vars(module).values():
            if _is_jit(obj) and obj.fn.__module__ == module.__name__:
                functions[kernel_id(obj.fn)] = obj.fn
    called = set().union(*(_callees(fn) for fn in functions.values())) if functions else set()
    return sorted(name for name in functions if name not in called)


# ------------------------------------------------------------------ capturing launches


@dataclasses.dataclass(frozen=True)
class Specialization:
    """What triton.compile needs for one kernel on one target, as the JIT derives it."""

    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], list]
    options: dict[str, Any]
    declared_constexprs: tuple[int, ...] = ()  # parameters the kernel declares tl.constexpr

    def key(self) -> str:
        return repr((sorted(self.signature.items()), sorted(self.constexprs.items()), sorted(self.attrs.items()),
                     sorted((k, repr(v)) for k, v in self.options.items())))

    def variant(self) -> str:
        """The code-shaping part of the key: pointer dtypes and the kernel's own constexprs.
        Specializations that differ only in what the JIT infers about scalar values (i32 or
        i64, == 1, divisible by 16) or pointer alignment are one variant."""
        def shape(kind: Any) -> Any:
            if isinstance(kind, (tuple, list)):
                return tuple(shape(item) for item in kind)
            return kind if kind.startswith("*") else "scalar"

        parts = []
        for index, kind in enumerate(self.signature.values()):
            if index in self.declared_constexprs:
                parts.append(("=", self.constexprs.get((index,))))
            else:
                parts.append(shape(kind))
        return repr(parts)

    def summary(self) -> str:
        """The kernel's own constexprs and its pointers that are not int32: what tells the
        variants of one kernel apart in a table."""
        names = list(self.signature)
        constexprs = [f"{names[i]}={self.constexprs.get((i,))!r}" for i in self.declared_constexprs]

        def wide(kind: Any) -> bool:
            if isinstance(kind, (tuple, list)):
                return any(wide(item) for item in kind)
            return kind.startswith("*") and kind != "*i32"

        others = [name for name, kind in self.signature.items() if wide(kind)]
        return " ".join(constexprs) + (f"; not *i32: {', '.join(others)}" if others else "")

    def describe(self) -> str:
        """One line: each argument's type, its hints (D: divisible by 16, S: under 2 GiB) or value."""
        names = list(self.signature)
        parts = []
        for index, name in enumerate(names):
            kind = self.signature[name]
            if kind == "constexpr":
                parts.append(f"{name}={self.constexprs.get((index,))!r}")
                continue
            hints = "".join("D" if attr[0] == "tt.divisibility" else "S" if attr[0] == "tt.pointer_range" else "?"
                            for attr in self.attrs.get((index,), []))
            parts.append(f"{name}:{kind}{':' + hints if hints else ''}")
        return ", ".join(parts)


@dataclasses.dataclass(frozen=True)
class NpuSpecialization:
    """What triton.compile needs for one launch on triton-ascend 3.2, derived as its
    JITFunction.run derives it: the signature of the non-constexpr parameters, the constants
    (declared constexprs, ints equal to 1, None), the divisibility attributes and the options."""

    signature: dict[str, str]
    constants: dict[str, Any]
    properties: tuple[tuple[str, tuple[int, ...]], ...]  # the descriptor's (property, parameter indices)
    options: dict[str, Any]

    def key(self) -> str:
        return repr((sorted(self.signature.items()), sorted((k, repr(v)) for k, v in self.constants.items()),
                     self.properties, sorted((k, repr(v)) for k, v in self.options.items())))

    def descriptor(self):
        """The AscendAttrsDescriptor triton.compile takes."""
        from specops.devtools.targets import NPU_TARGET

        descriptor = type(_backend(NPU_TARGET).get_attrs_descriptor([], []))()
        descriptor.arg_properties = {name: list(indices) for name, indices in self.properties}
        descriptor._init_slots()
        return descriptor

    def describe(self) -> str:
        parts = [f"{name}:{kind}" for name, kind in self.signature.items() if name not in self.constants]
        parts += [f"{name}={value!r}" for name, value in self.constants.items()]
        return ", ".join(parts)


@dataclasses.dataclass
class Launch:
    """One `kernel[grid](...)` call: its grid and its specialization for each target."""

    kernel: str
    grid: tuple[int, ...]
    specializations: dict[str, Specialization | NpuSpecialization]  # by target name
    label: str = ""
    grid_target: str = ""  # the target whose device the grid was sized for ("" for this machine)
    error: str | None = None  # why a specialization could not be derived (keep_going=True)
    args: dict[str, Any] = dataclasses.field(default_factory=dict)  # by parameter, while `run` runs it


@functools.lru_cache(maxsize=None)
def _backend(target: Target):
    from triton.compiler import make_backend

    return make_backend(target.gpu_target())


# The triton.jit options that decide what a launch specializes on, by kernel function: read from
# the launched object (a JITFunction keeps them; an interpreter's InterpretedFunction hands them
# to its rewriter), so that the view below binds arguments as the kernel's own JIT does. Without
# them a kernel with do_not_specialize was captured as one specialization per value of those
# arguments, none of them the one the device compiles.
_JIT_OPTIONS = ("do_not_specialize", "do_not_specialize_on_alignment")


def jit_options(kernel_object: Any) -> tuple[tuple[str, tuple], ...]:
    """(option, value) of `_JIT_OPTIONS` the kernel object was made with (empty ones left out)."""
    given = getattr(getattr(kernel_object, "rewriter", None), "kwargs", None)
    if given is None:
        given = getattr(kernel_object, "kwargs", None)
    if given is None:
        given = {name: getattr(kernel_object, name, None) for name in _JIT_OPTIONS}
    return tuple((name, tuple(given[name])) for name in _JIT_OPTIONS if given.get(name))


@functools.lru_cache(maxsize=None)
def _jit_view(fn: Callable, options: tuple[tuple[str, tuple], ...] = ()):
    """A JITFunction over the kernel's Python function, with the kernel's own specialization
    options: what the JIT binds arguments with, also in an interpreter process (it is never
    compiled here)."""
    from triton.runtime.jit import JITFunction

    return JITFunction(fn, **{name: list(value) for name, value in options})


@functools.lru_cache(maxsize=None)
def _binder(fn: Callable, target: Target, options: tuple[tuple[str, tuple], ...] = ()):
    from triton.runtime.jit import create_function_from_signature

    jit = _jit_view(fn, options)
    return create_function_from_signature(jit.signature, jit.params, _backend(target))


def binder_supported() -> str | None:
    """None when this Triton's JIT binds arguments the way `specialize` calls it (Triton 3.9's
    `create_function_from_signature` and `JITFunction._pack_args`), else what is missing."""
    from triton.runtime import jit

    if not hasattr(jit, "create_function_from_signature") or not hasattr(jit.JITFunction, "_pack_args"):
        import triton

        return f"Triton {triton.__version__} has no JIT binder of Triton 3.9's form"
    return None


def specialize(fn: Callable, args: tuple, kwargs: dict, target: Target,
               options: tuple[tuple[str, tuple], ...] = ()) -> Specialization | NpuSpecialization:
    """The specialization JITFunction.run would compile for these launch arguments on `target`;
    options: the kernel's `jit_options`."""
    if target.backend == "npu":
        return _specialize_npu(fn, args, kwargs, target, options)
    from triton import knobs

    jit = _jit_view(fn, options)
    backend = _backend(target)
    # JITFunction.run adds these before binding; they are compile options.
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", jit.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    bound_args, specialization, compile_options = _binder(fn, target, options)(*args, **kwargs)
    compile_options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization,
                                                                   compile_options)
    declared = tuple(index for index, param in enumerate(jit.params) if param.is_constexpr)
    return Specialization(dict(signature), dict(constexprs), dict(attrs), dict(compile_options.__dict__), declared)


def _specialize_npu(fn: Callable, args: tuple, kwargs: dict, target: Target,
                    options: tuple[tuple[str, tuple], ...] = ()) -> NpuSpecialization:
    """triton-ascend 3.2's JITFunction.run derivation, without compiling."""
    jit = _jit_view(fn, options)
    backend = _backend(target)
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", False)
    bound_args, sig_and_spec, _, _, _ = _binder(fn, target, options)(*args, **kwargs)
    names = [p.name for p in jit.params if not p.is_constexpr]
    signature = {name: ("*i8" if kind == "none" else kind) for name, kind in zip(names, sig_and_spec[:len(names)])}
    values = tuple(bound_args.values())
    descriptor = backend.get_attrs_descriptor(jit.params, values)
    constant_params = descriptor.get_constants()
    constants = {p.name: v for v, p in zip(values, jit.params)
                 if p.is_constexpr or p.num in constant_params or v is None}
    properties = tuple(sorted((name, tuple(sorted(indices))) for name, indices in descriptor.arg_properties.items()))
    return NpuSpecialization(signature, constants, properties, dict(backend.parse_options(kwargs).__dict__))


def _launch_grid(grid: Any, fn: Callable, args: tuple, kwargs: dict) -> tuple[int, ...]:
    if callable(grid):
        bound = inspect.signature(fn).bind(*args, **kwargs)
        grid = grid(bound.arguments)
    return tuple(int(size) for size in grid)


def bound_arguments(fn: Callable, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every parameter's value, launch options (num_warps, ...) left out."""
    parameters = inspect.signature(fn).parameters
    bound = inspect.signature(fn).bind(*args, **{k: v for k, v in kwargs.items() if k in parameters})
    bound.apply_defaults()
    return dict(bound.arguments)


@contextlib.contextmanager
def capture_launches(targets: Iterable[Target] = TARGETS, *, execute: bool = True, label: str = "",
                     run: Callable[[Launch], None] | None = None, keep_going: bool = False) -> Iterator[list[Launch]]:
    """Records every Triton kernel launch made inside the block, specialized for `targets`.

    execute=False records without running the kernel (launchers never read what a kernel wrote:
    that would be a device-to-host sync), so shapes too large for the interpreter can be captured.
    run(launch), if given, is called in place of the kernel, with `launch.args` set. keep_going:
    a launch whose specialization cannot be derived is recorded with its `error` (and not run)
    instead of raising. The launch entry points are replaced process-wide for the block: one
    capture at a time.
    """
    targets = tuple(targets)
    launches: list[Launch] = []
    originals = {cls: cls.__dict__.get("__getitem__") for cls in _kernel_classes()}
    inherited = {cls: cls.__getitem__ for cls in originals}

    def getitem(self, grid):
        def launch(*args, **kwargs):
            record = Launch(kernel_id(self.fn), _launch_grid(grid, self.fn, args, kwargs), {}, label)
            try:
                options = jit_options(self)
                record.specializations = {target.name: specialize(self.fn, args, kwargs, target, options)
                                          for target in targets}
            except Exception as exc:
                if not keep_going:
                    raise
                record.error = f"{type(exc).__name__}: {exc}"
                launches.append(record)
                if run is not None:
                    raise
                return None
            launches.append(record)
            if run is not None:
                record.args = bound_arguments(self.fn, args, kwargs)
                try:
                    return run(record)
                finally:
                    record.args = {}
            if execute:
                original = next(inherited[cls] for cls in type(self).__mro__ if cls in inherited)
                return original(self, grid)(*args, **kwargs)
            return None

        return launch

    for cls in originals:
        cls.__getitem__ = getitem
    try:
        yield launches
    finally:
        for cls, original in originals.items():
            if original is None:
                del cls.__getitem__
            else:
                cls.__getitem__ = original
