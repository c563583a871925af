"""Every Triton kernel compiled for real GPU targets, on a machine with no GPU.

Triton compiles for a chosen target without a device: `triton.compile(ASTSource(...),
target=GPUTarget(...))` runs the whole pipeline down to a cubin (CUDA) or an HSA code object
(AMD). What it needs is what the JIT would derive at launch time from the arguments: the
signature (pointer dtypes, i32 or i64 scalars), the constexprs (ints equal to 1 become
constexprs too) and the attributes (divisibility by 16 of pointers and ints; on AMD, pointers
whose offsets fit 32 bits). None of that is written by hand here: `capture_launches` intercepts
the launchers' own `kernel[grid](...)` calls and passes each call's arguments through Triton's
own JIT binder, once per target backend, so the specializations are exactly the ones a device
run would compile.

`compile_jobs` then compiles each distinct specialization and reads the resources the
target's tools report: registers, spill bytes and stack from `ptxas -v` on the PTX (CUDA), the
register counts, spill counts and scratch size from the AMDGPU kernel descriptor (AMD), and the
shared memory Triton allocated. Kernels are real `JITFunction`s only in a process that did not
set TRITON_INTERPRET=1; from an interpreter process the compile runs in a child process.

`specops-bench --kernels` prints the report for the benchmark cases (`report_main`);
tests/test_kernel_compile.py runs the same machinery on the op table's valid calls.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import importlib
import inspect
import io
import os
import pickle
import pkgutil
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

PTXAS_USAGE = re.compile(r"Used (\d+) registers")
PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_SHARED = re.compile(r"(\d+) bytes smem")


@dataclasses.dataclass(frozen=True)
class Target:
    """A compile target and the device the report sizes grids for."""

    name: str  # "sm_90"
    backend: str  # the target's backend: "cuda", "hip", "npu"
    arch: int | str
    warp_size: int
    cores: int  # streaming multiprocessors / compute units / vector cores of `device`
    device: str
    plugin: str  # the folder of triton/backends that compiles for it

    def gpu_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget(self.backend, self.arch, self.warp_size)

    def installed(self) -> bool:
        """Whether the installed Triton can compile for this target (upstream Triton ships the
        CUDA and AMD backends; triton-ascend replaces them with its NPU backend)."""
        from triton.backends import backends

        return self.plugin in backends


TARGETS = (
    Target("sm_80", "cuda", 80, 32, 108, "A100", "nvidia"),
    Target("sm_90", "cuda", 90, 32, 132, "H100 SXM", "nvidia"),
    Target("gfx942", "hip", "gfx942", 64, 304, "MI300X", "amd"),
)
# triton-ascend's target (SPECOPS_NPU_ARCH picks the chip); compiled where triton-ascend is installed.
NPU_TARGET = Target("npu", "npu", os.environ.get("SPECOPS_NPU_ARCH", "Ascend910B4"), 0, 48, "Atlas 800I A2", "ascend")


def installed_targets() -> tuple[Target, ...]:
    return tuple(target for target in (*TARGETS, NPU_TARGET) if target.installed())


# ------------------------------------------------------------------ which kernels exist


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
    originals = {cls: cls.run for cls in (JITFunction, InterpretedFunction)}

    def recorder(cls):
        def run(self, *args, grid, warmup, **kwargs):
            if not warmup:
                launches.append(Launch(
                    kernel_id(self.fn), _launch_grid(grid, self.fn, args, kwargs),
                    {target.name: specialize(self.fn, args, kwargs, target) for target in targets}, label))
            if execute or warmup:
                return originals[cls](self, *args, grid=grid, warmup=warmup, **kwargs)
            return None

        return run

    for cls in originals:
        cls.run = recorder(cls)
    try:
        yield launches
    finally:
        for cls, run in originals.items():
            cls.run = run


# ------------------------------------------------------------------ compiling


@dataclasses.dataclass
class KernelBuild:
    """One kernel at one specialization, compiled for one target."""

    kernel: str
    target: str
    specialization: str  # Specialization.describe()
    summary: str = ""  # Specialization.summary()
    error: str | None = None
    registers: int | None = None  # per thread (CUDA) / VGPRs per lane (AMD)
    scalar_registers: int | None = None  # SGPRs (AMD)
    # Bytes written to local memory per thread: CUDA's spill stores; AMD: 4 per VGPR spilled to scratch.
    spill_bytes: int | None = None
    spill_loads: int | None = None  # CUDA: bytes read back
    scalar_spills: int | None = None  # AMD: SGPRs spilled into VGPR lanes (no memory traffic)
    stack_bytes: int | None = None  # CUDA stack frame / AMD private segment (scratch) per thread
    shared_bytes: int | None = None  # shared memory / LDS Triton allocated
    num_warps: int | None = None
    seconds: float = 0.0
    skipped: str | None = None  # a stage the installed toolchain cannot run (NPU)


def _ptxas_log(ptx: str, arch: int) -> str:
    """`ptxas -v` on the PTX with the flags of Triton's own cubin step, for a kernel that came
    out of Triton's cache (a fresh compile hands over its own log)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [get_ptxas(arch).path, "-lineinfo", "-v", "--regAllocOptLevel=2",
             f"--gpu-name={sm_arch_from_capability(arch)}", str(source), "-o", str(source.with_suffix(".o"))],
            capture_output=True, text=True, check=False)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        raise RuntimeError(f"ptxas failed ({result.returncode}): {log.strip()}")
    return log


def _ptxas_usage(log: str) -> dict[str, int] | None:
    registers, spills = PTXAS_USAGE.search(log), PTXAS_SPILLS.search(log)
    if registers is None or spills is None:
        return None
    return dict(registers=int(registers.group(1)), stack_bytes=int(spills.group(1)),
                spill_bytes=int(spills.group(2)), spill_loads=int(spills.group(3)))


def _amdgpu_field(amdgcn: str, name: str) -> int:
    match = re.search(rf"^\s*\.{name}:\s*(\d+)\s*$", amdgcn, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"the AMDGPU kernel descriptor has no .{name}")
    return int(match.group(1))


def _amdgpu_usage(amdgcn: str) -> dict[str, int]:
    return dict(registers=_amdgpu_field(amdgcn, "vgpr_count"), scalar_registers=_amdgpu_field(amdgcn, "sgpr_count"),
                spill_bytes=4 * _amdgpu_field(amdgcn, "vgpr_spill_count"),
                scalar_spills=_amdgpu_field(amdgcn, "sgpr_spill_count"),
                stack_bytes=_amdgpu_field(amdgcn, "private_segment_fixed_size"))


def _missing_tool(exc: BaseException) -> str | None:
    """The NPU stage that needs a tool this machine lacks, or None for a real compile error."""
    chain = []
    while exc is not None:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    if not any(isinstance(e, (FileNotFoundError, PermissionError)) or "not found" in str(e).lower() for e in chain):
        return None
    frames = traceback.extract_tb(chain[0].__traceback__)
    stages = [frame.name for frame in frames if "backends" in frame.filename]
    return f"{stages[-1] if stages else 'a compile stage'} needs a tool that is not installed: {chain[-1]}"


def compile_one(kernel: str, target: Target, specialization: Specialization) -> KernelBuild:
    """Compiles in this process (its kernels must be JITFunctions: TRITON_INTERPRET unset)."""
    import triton
    from triton import knobs
    from triton.compiler import ASTSource

    module_name, _, qualname = kernel.partition(":")
    fn = functools.reduce(getattr, qualname.split("."), importlib.import_module(module_name))
    build = KernelBuild(kernel, target.name, specialization.describe(), specialization.summary())
    started = time.perf_counter()
    try:
        source = ASTSource(fn, specialization.signature, specialization.constexprs, specialization.attrs)
        log = io.StringIO()
        # Triton runs `ptxas -v` for the cubin and prints its log only when asked to.
        dump_ptxas_log = knobs.nvidia.dump_ptxas_log
        knobs.nvidia.dump_ptxas_log = True
        try:
            with contextlib.redirect_stdout(log):
                compiled = triton.compile(source, target=target.gpu_target(), options=specialization.options)
        finally:
            knobs.nvidia.dump_ptxas_log = dump_ptxas_log
        build.shared_bytes = int(compiled.metadata.shared)
        build.num_warps = int(compiled.metadata.num_warps)
        if target.backend == "cuda":
            usage = _ptxas_usage(log.getvalue()) or _ptxas_usage(_ptxas_log(compiled.asm["ptx"], target.arch))
            if usage is None:
                raise RuntimeError("ptxas -v printed no resource usage")
        elif target.backend == "hip":
            usage = _amdgpu_usage(compiled.asm["amdgcn"])
        else:
            usage = {}
        for field, value in usage.items():
            setattr(build, field, value)
    except Exception as exc:  # a compile error is the result, reported per kernel
        missing = _missing_tool(exc) if target.backend == "npu" else None
        if missing is not None:
            build.skipped = missing
        else:
            build.error = f"{type(exc).__name__}: {exc}"
    build.seconds = time.perf_counter() - started
    return build


def _interpreting() -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret)


def compile_jobs(jobs: list[tuple[str, Target, Specialization]], *, cache_dir: str | None = None) -> list[KernelBuild]:
    """Compiles each job, in this process when its kernels are JITFunctions, else in a child
    process without TRITON_INTERPRET. cache_dir: Triton's cache for the child (a fresh folder
    makes every compile a real one)."""
    if not jobs:
        return []
    if not _interpreting():
        return [compile_one(*job) for job in jobs]
    with tempfile.TemporaryDirectory() as folder:
        request, reply = Path(folder) / "jobs.pickle", Path(folder) / "builds.pickle"
        request.write_bytes(pickle.dumps(jobs))
        env = dict(os.environ, TRITON_INTERPRET="0")
        if cache_dir is not None:
            env["TRITON_CACHE_DIR"] = cache_dir
        result = subprocess.run([sys.executable, "-m", "specops.bench.kernels", "--compile", str(request), str(reply)],
                                env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"the kernel compile process failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return pickle.loads(reply.read_bytes())


def distinct_jobs(launches: Iterable[Launch], targets: Iterable[Target], *,
                  per_variant: bool = False) -> list[tuple[str, Target, Specialization]]:
    """One job per (kernel, target, specialization), in first-seen order; per_variant: one per
    Specialization.variant() (the first launch of each), which bounds the compile time of a
    kernel whose scalar arguments take many values."""
    jobs = {}
    for target in targets:
        for launch in launches:
            specialization = launch.specializations.get(target.name)
            if specialization is None:
                continue
            key = specialization.variant() if per_variant else specialization.key()
            jobs.setdefault((launch.kernel, target.name, key), (launch.kernel, target, specialization))
    return list(jobs.values())


# ------------------------------------------------------------------ the report


def capture_bench_launches(selected: list[str], quick: bool, targets: Iterable[Target]) -> list[Launch]:
    """Each benchmark case's specops implementation on the Triton backend, kernels not run,
    grids sized for each target's device. Needs TRITON_INTERPRET=1 (CPU tensors reach the
    Triton launchers only through the interpreter's entry)."""
    import torch

    import specops
    from specops.bench import BENCHMARKS
    from specops.triton_kernels._launch import assumed_cores

    device = torch.device("cpu")
    launches = []
    for name in selected:
        for case in BENCHMARKS[name].cases(device, quick):
            for target in targets:
                with assumed_cores(target.cores), specops.backend("triton"), \
                        capture_launches([target], execute=False, label=f"{case.op} {case.label}") as captured:
                    case.impls[case.subject]()
                for launch in captured:
                    launch.label += f" [{case.subject}]"
                    launch.grid_target = target.name
                launches += captured
    return launches


def _capture_in_interpreter(selected: list[str], quick: bool, targets: tuple[Target, ...]) -> list[Launch]:
    if _interpreting():
        return capture_bench_launches(selected, quick, targets)
    with tempfile.TemporaryDirectory() as folder:
        reply = Path(folder) / "launches.pickle"
        command = [sys.executable, "-m", "specops.bench.kernels", "--capture", str(reply),
                   *[arg for name in selected for arg in ("--op", name)], *(["--quick"] if quick else []),
                   *[arg for target in targets for arg in ("--target", target.name)]]
        result = subprocess.run(command, env=dict(os.environ, TRITON_INTERPRET="1"), capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            raise RuntimeError(
                f"capturing the benchmark launches failed ({result.returncode}):\n{result.stderr[-4000:]}")
        return pickle.loads(reply.read_bytes())


def _value(value: int | None) -> str:
    return "-" if value is None else str(value)


def report_lines(launches: list[Launch], builds: list[KernelBuild], targets: tuple[Target, ...]) -> list[str]:
    lines = ["Kernel builds: one row per kernel variant and target (spill B: bytes spilled to local memory per "
             "thread; sgpr sp: SGPRs spilled into VGPR lanes; shared B: shared memory / LDS; specializations in "
             "the CSV)",
             f"  {'kernel':<40} {'target':<7} {'regs':>5} {'sgprs':>5} {'spill B':>7} {'sgpr sp':>7} "
             f"{'stack B':>7} {'shared B':>8} {'warps':>5}  variant"]
    order = {name: index for index, name in enumerate(dict.fromkeys(b.kernel for b in builds))}
    variants = {key: index for index, key in enumerate(dict.fromkeys((b.kernel, b.summary) for b in builds))}
    target_order = {t.name: index for index, t in enumerate(targets)}
    for build in sorted(builds, key=lambda b: (order[b.kernel], variants[(b.kernel, b.summary)],
                                               target_order.get(b.target, 0))):
        head = f"  {kernel_name(build.kernel):<40} {build.target:<7}"
        if build.error is not None or build.skipped is not None:
            lines.append(f"{head} {'FAILED: ' + build.error if build.error else 'skipped: ' + str(build.skipped)}")
            continue
        lines.append(
            f"{head} {_value(build.registers):>5} {_value(build.scalar_registers):>5} {_value(build.spill_bytes):>7} "
            f"{_value(build.scalar_spills):>7} {_value(build.stack_bytes):>7} {_value(build.shared_bytes):>8} {_value(build.num_warps):>5}  "
            f"{build.summary}")
    devices = ", ".join(f"{t.name}: {t.device}, {t.cores} cores" for t in targets)
    lines += ["", f"Grids per benchmark case: programs per launch on {devices}",
              f"  {'case':<60} {'kernel':<40} {'launches':>8} " + " ".join(f"{t.name:>7}" for t in targets)]
    # (case, kernel) -> target -> the grids of its launches, in order
    grids: dict[tuple[str, str], dict[str, list[tuple[int, ...]]]] = {}
    for launch in launches:
        grids.setdefault((launch.label, launch.kernel), {}).setdefault(launch.grid_target, []).append(launch.grid)
    for (label, kernel), per_target in grids.items():
        count = max(len(g) for g in per_target.values())
        cells = []
        for target in targets:
            sizes = sorted({"x".join(map(str, grid)) for grid in per_target.get(target.name, [])})
            cells.append(f"{'/'.join(sizes) or '-':>7}")
        lines.append(f"  {label:<60} {kernel_name(kernel):<40} {count:>8} " + " ".join(cells))
    return lines


def write_builds_csv(path: str, builds: list[KernelBuild]) -> None:
    import csv

    fields = [field.name for field in dataclasses.fields(KernelBuild)]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for build in builds:
            writer.writerow(dataclasses.asdict(build))


def report_main(selected: list[str], quick: bool, csv_path: str | None) -> int:
    """`specops-bench --kernels`: resources per kernel and target, grids per benchmark case."""
    targets = installed_targets()
    started = time.perf_counter()
    launches = _capture_in_interpreter(selected, quick, targets)
    builds = compile_jobs(distinct_jobs(launches, targets, per_variant=True))
    print("\n".join(report_lines(launches, builds, targets)))
    failed = [b for b in builds if b.error is not None]
    spilled = [b for b in builds if b.spill_bytes]
    kernel_count = len({b.kernel for b in builds})
    print(f"{len(builds)} builds of {kernel_count} kernels in {time.perf_counter() - started:.1f} s; "
          f"{len(failed)} failed, {len(spilled)} spill to local memory")
    for target in (*TARGETS, NPU_TARGET):
        if not target.installed():
            print(f"{target.name}: not compiled (the installed Triton has no '{target.plugin}' backend)")
    if csv_path:
        os.makedirs(os.path.dirname(csv_path) or ".", exist_ok=True)
        write_builds_csv(csv_path, builds)
        print(f"CSV: {csv_path}")
    return 1 if failed else 0


def _child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m specops.bench.kernels")
    parser.add_argument("--compile", nargs=2, metavar=("JOBS", "BUILDS"))
    parser.add_argument("--capture", metavar="LAUNCHES")
    parser.add_argument("--op", action="append", default=[])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--target", action="append", default=[])
    args = parser.parse_args(argv)
    if args.compile:
        jobs = pickle.loads(Path(args.compile[0]).read_bytes())
        Path(args.compile[1]).write_bytes(pickle.dumps(compile_jobs(jobs)))
        return 0
    if args.capture:
        by_name = {t.name: t for t in (*TARGETS, NPU_TARGET)}
        launches = capture_bench_launches(args.op, args.quick, tuple(by_name[name] for name in args.target))
        Path(args.capture).write_bytes(pickle.dumps(launches))
        return 0
    parser.error("nothing to do")
    return 2


if __name__ == "__main__":
    # Through the package module, so what is pickled names specops.bench.kernels, not __main__.
    from specops.bench.kernels import _child_main as child_main

    sys.exit(child_main(sys.argv[1:]))
