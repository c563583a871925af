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


def _is_jit(obj: Any) -> bool:
    from triton.runtime.jit import KernelInterface

    return isinstance(obj, KernelInterface) and callable(getattr(obj, "fn", None))


def kernel_id(fn: Callable) -> str:
    """"module:qualname" of a kernel's Python function: importable from any process."""
    return f"{fn.__module__}:{fn.__qualname__}"


def kernel_name(kernel: str) -> str:
    return kernel.partition(":")[2]


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


@dataclasses.dataclass
class Launch:
    """One `kernel[grid](...)` call: its grid and its specialization for each target."""

    kernel: str
    grid: tuple[int, ...]
    specializations: dict[str, Specialization]
    label: str = ""
    grid_target: str = ""  # the target whose device the grid was sized for ("" for this machine)


@functools.lru_cache(maxsize=None)
def _backend(target: Target):
    from triton.compiler import make_backend

    return make_backend(target.gpu_target())


@functools.lru_cache(maxsize=None)
def _jit_view(fn: Callable):
    """A JITFunction over the kernel's Python function: what the JIT binds arguments with, also
    in an interpreter process (it is never compiled here)."""
    from triton.runtime.jit import JITFunction

    return JITFunction(fn)


@functools.lru_cache(maxsize=None)
def _binder(fn: Callable, target: Target):
    from triton.runtime.jit import create_function_from_signature

    jit = _jit_view(fn)
    return create_function_from_signature(jit.signature, jit.params, _backend(target))


def binder_supported() -> str | None:
    """None when this Triton's JIT binds arguments the way `specialize` calls it (Triton 3.9's
    `create_function_from_signature` and `JITFunction._pack_args`), else what is missing."""
    from triton.runtime import jit

    if not hasattr(jit, "create_function_from_signature") or not hasattr(jit.JITFunction, "_pack_args"):
        import triton

        return f"Triton {triton.__version__} has no JIT binder of Triton 3.9's form"
    return None


def specialize(fn: Callable, args: tuple, kwargs: dict, target: Target) -> Specialization:
    """The specialization JITFunction.run would compile for these launch arguments on `target`."""
    from triton import knobs

    jit = _jit_view(fn)
    backend = _backend(target)
    # JITFunction.run adds these before binding; they are compile options.
    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", jit.debug) or knobs.runtime.debug
    kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    kwargs["fpsan_homomorphic_casts"] = knobs.compilation.fpsan_homomorphic_casts
    bound_args, specialization, options = _binder(fn, target)(*args, **kwargs)
    options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization, options)
    declared = tuple(index for index, param in enumerate(jit.params) if param.is_constexpr)
    return Specialization(dict(signature), dict(constexprs), dict(attrs), dict(options.__dict__), declared)


def _launch_grid(grid: Any, fn: Callable, args: tuple, kwargs: dict) -> tuple[int, ...]:
    if callable(grid):
        bound = inspect.signature(fn).bind(*args, **kwargs)
        grid = grid(bound.arguments)
    return tuple(int(size) for size in grid)


@contextlib.contextmanager
def capture_launches(targets: Iterable[Target] = TARGETS, *, execute: bool = True,
                     label: str = "") -> Iterator[list[Launch]]:
    """Records every Triton kernel launch made inside the block, specialized for `targets`.

    execute=False records without running the kernel (launchers never read what a kernel wrote:
    that would be a device-to-host sync), so shapes too large for the interpreter can be captured.
    The launch entry points are replaced process-wide for the block: one capture at a time.
    """
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    targets = tuple(targets)
    launches: list[Launch] = []

    def record(fn: Callable, grid: Any, args: tuple, kwargs: dict) -> None:
        launches.append(Launch(kernel_id(fn), _launch_grid(grid, fn, args, kwargs),
                               {target.name: specialize(fn, args, kwargs, target) for target in targets}, label))

    def recorder(original):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                record(self.fn, grid, args, kwargs)
            if execute or warmup:
                return original(self, *args, grid=grid, warmup=warmup, **kwargs)
            return None

        return run

    def indexer(original):
        def getitem(self, grid):
            launch = original(self, grid)

            def run(*args, **kwargs):
                record(self.fn, grid, args, kwargs)
                return launch(*args, **kwargs) if execute else None

            return run

        return getitem

    # Triton 3.9 launches every kernel through its class's `run`; triton-ascend 3.2's interpreter
    # sets `run` per instance and launches through `InterpretedFunction.__getitem__`.
    originals = {}
    for cls in (JITFunction, InterpretedFunction):
        if "run" in vars(cls):
            originals[cls, "run"] = cls.run
        else:
            originals[cls, "__getitem__"] = cls.__getitem__
    for (cls, name), original in originals.items():
        setattr(cls, name, recorder(original) if name == "run" else indexer(original))
    try:
        yield launches
    finally:
        for (cls, name), original in originals.items():
            setattr(cls, name, original)
