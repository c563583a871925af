"""The adapter's linalg of a kernel, compiled to x86 through Debian's MLIR 19 and run with every
tensor beside a PROT_NONE guard page.

triton-ascend 3.2's own CPU path does not run (its CPUOptions lack `sanitize_overflow`, its
launcher source is a stub, it links an aarch64 libclc), so the NPU route's adapter output is
lowered instead: `--convert-elementwise-to-linalg`, then the pass list of triton-ascend's
`linalg_to_llir`, `gpu.barrier` dropped (one program runs at a time here), mlir-translate, llc,
and a shared object linked with MLIR's C runner utils (for `memrefCopy`). This is the code of the
NPU route up to the point where BiShengIR takes over, so a read the adapter widened (a masked
load turned into a full-tile copy, a masked gather issued at every lane) is in it.

The lowered function takes two leading `memref<?xi8>` (sync-block lock, workspace), then the
kernel's non-constexpr parameters (a pointer is a ranked memref: allocated, aligned, offset,
size, stride; ints equal to 1 became constexprs), then num_programs x/y/z and program_id x/y/z.
`GuardedLaunch` copies each tensor's storage span into a mapping that ends at a guard page
(placement "after") or starts right after one ("before"), calls the function once per program,
and copies the spans back. An access outside every tensor faults; the fault handler (a few lines
of C, `fault_handler_library`) prints the faulting address, which the caller maps to a tensor.
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import mmap
import re
import subprocess
import tempfile
from pathlib import Path

import torch

from npu_compile import CACHE

MLIR_LIB = Path("/usr/lib/llvm-19/lib")
FAULT_EXIT = 77
PLACEMENTS = ("after", "before")  # where the guard page sits relative to each tensor
PAGE = mmap.PAGESIZE

LOWERING = [
    "--convert-linalg-to-affine-loops", "--eliminate-empty-tensors", "--empty-tensor-to-alloc-tensor",
    "--one-shot-bufferize=allow-return-allocs-from-loops=true", "--lower-affine", "--convert-linalg-to-loops",
    "--convert-scf-to-cf", "--convert-cf-to-llvm", "--convert-arith-to-llvm", "--convert-math-to-llvm",
    "--convert-complex-to-llvm", "--convert-vector-to-llvm", "--convert-index-to-llvm", "--memref-expand",
    "--expand-strided-metadata", "--finalize-memref-to-llvm", "--convert-func-to-llvm", "--lower-affine",
    "--convert-arith-to-llvm", "--reconcile-unrealized-casts",
]

_FAULT_HANDLER_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t *info, void *context) {
    (void)context;
    char line[96];
    int n = snprintf(line, sizeof line, "guard fault: signal %d at address %p\n", sig, info->si_addr);
    if (n > 0) write(2, line, (size_t)n);
    _exit(%d);
}
void install_fault_handler(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, 0);
    sigaction(SIGBUS, &action, 0);
}
""".replace("%d);", f"{FAULT_EXIT});", 1)

# What LLVM calls for a float-to-bfloat16 conversion and Debian's GCC 12 runtime lacks: round to
# nearest even, NaN kept quiet (as torch converts). LLVM returns a bfloat16 in xmm0 as a _Float16.
_RUNTIME_C = r"""
#include <stdint.h>
#include <string.h>
_Float16 __truncsfbf2(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    uint16_t half = (bits & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((bits >> 16) | 0x40u)
                                                       : (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    _Float16 out;
    memcpy(&out, &half, sizeof out);
    return out;
}
"""

FAULT_LINE = re.compile(r"guard fault: signal (\d+) at address (0x[0-9a-f]+|\(nil\))")


def _run(command: list[str], what: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed ({result.returncode}): {result.stderr.strip()[-2000:]}")


def _compiled_c(name: str, code: str, suffix: str, flag: str) -> Path:
    """`code` compiled by cc with `flag` (-shared: a library, -c: an object), cached by its text."""
    path = CACHE / "x86" / f"{name}-{hashlib.sha256(code.encode()).hexdigest()[:12]}{suffix}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / f"{name}.c"
            source.write_text(code)
            _run(["cc", flag, "-fPIC", "-O1", "-o", str(path), str(source)], f"cc ({name})")
    return path


def fault_handler_library() -> Path:
    return _compiled_c("fault", _FAULT_HANDLER_C, ".so", "-shared")


def runtime_object() -> Path:
    """The object of _RUNTIME_C, linked into every lowered kernel."""
    return _compiled_c("runtime", _RUNTIME_C, ".o", "-c")


def install_fault_handler() -> None:
    ctypes.CDLL(str(fault_handler_library())).install_fault_handler()


@dataclasses.dataclass(frozen=True)
class LoweredKernel:
    library: Path
    name: str
    parameters: tuple[str, ...]  # the linalg function's parameter types: "memref<?xi32>", "i32", ...


def _signature(linalg: str) -> tuple[str, tuple[str, ...]]:
    match = re.search(r"func\.func @(\w+)\((.*?)\)\s*(attributes|\{)", linalg, re.S)
    if match is None:
        raise RuntimeError("no func.func in the adapter output")
    types = re.findall(r"%arg\d+:\s*([^,{)]+?(?:<[^>]*>)?)\s*(?:\{[^}]*\})?\s*(?:,|$)", match.group(2) + ",")
    return match.group(1), tuple(kind.strip() for kind in types)


_SCAN_CALL = re.compile(r"(%[\w#]+) = (?:func\.)?call @(triton_cumsum_\w+)\((%[\w#]+), (%[\w#]+), (%[\w#]+)\) : "
                        r"\(tensor<(\d+)x(\w+)>, i32, i1\) -> tensor<\d+x\w+>")


def inline_scans(text: str) -> str:
    """`tl.cumsum` reaches the adapter's output as a call of `triton_cumsum_N(tensor, dim, reverse)`,
    a function BiShengIR provides; here each 1-D call becomes an inclusive scan loop (a scan
    of another rank fails the lowering)."""
    count = iter(range(1 << 30))

    def scan(match: re.Match) -> str:
        result, _, source, _, reverse, size, kind = match.groups()
        k = f"%scan{next(count)}"
        tensor = f"tensor<{size}x{kind}>"
        zero = "0.0" if kind.startswith("f") else "0"
        add = "arith.addf" if kind.startswith("f") else "arith.addi"
        return "\n".join([
            f"{k}_c0 = arith.constant 0 : index", f"{k}_c1 = arith.constant 1 : index",
            f"{k}_n = arith.constant {size} : index", f"{k}_last = arith.constant {int(size) - 1} : index",
            f"{k}_zero = arith.constant {zero} : {kind}",
            f"{k}_r:2 = scf.for {k}_i = {k}_c0 to {k}_n step {k}_c1 iter_args({k}_acc = {source}, "
            f"{k}_sum = {k}_zero) -> ({tensor}, {kind}) {{",
            f"  {k}_back = arith.subi {k}_last, {k}_i : index",
            f"  {k}_at = arith.select {reverse}, {k}_back, {k}_i : index",
            f"  {k}_v = tensor.extract {source}[{k}_at] : {tensor}",
            f"  {k}_s = {add} {k}_sum, {k}_v : {kind}",
            f"  {k}_t = tensor.insert {k}_s into {k}_acc[{k}_at] : {tensor}",
            f"  scf.yield {k}_t, {k}_s : {tensor}, {kind}",
            "}",
            f"{result} = tensor.cast {k}_r#0 : {tensor} to {tensor}",
        ])

    text = _SCAN_CALL.sub(scan, text)
    return re.sub(r"^\s*func\.func private @triton_cumsum_\w+\(.*$", "", text, flags=re.M)


_POINTER_CAST = re.compile(r"^(\s*)(%[\w#]+) = hivm\.hir\.pointer_cast\((%[\w#]+)\) \[(%[\w#]+)\] : memref<\?x(\w+)>$",
                           re.M)


def lower_pointer_casts(text: str) -> str:
    """A pointer read from a table (`tl.load(table).to(tl.pointer_type(...))`: the adapter's
    `hivm.hir.pointer_cast(address) [size]`, an hivm op MLIR 19 does not have) becomes the memref
    descriptor of that address in the LLVM dialect: base and aligned pointer the address, offset
    0, the size given, stride 1. The annotation of its address space goes with it."""
    descriptor = "!llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>"
    count = iter(range(1 << 30))
    casts: list[str] = []

    def cast(match: re.Match) -> str:
        indent, result, address, size, kind = match.groups()
        casts.append(result)
        k = f"%pc{next(count)}"
        return "\n".join(indent + line for line in [
            f"{k}_ptr = llvm.inttoptr {address} : i64 to !llvm.ptr",
            f"{k}_zero = llvm.mlir.constant(0 : i64) : i64", f"{k}_one = llvm.mlir.constant(1 : i64) : i64",
            f"{k}_size = arith.index_cast {size} : index to i64",
            f"{k}_d0 = llvm.mlir.undef : {descriptor}",
            f"{k}_d1 = llvm.insertvalue {k}_ptr, {k}_d0[0] : {descriptor}",
            f"{k}_d2 = llvm.insertvalue {k}_ptr, {k}_d1[1] : {descriptor}",
            f"{k}_d3 = llvm.insertvalue {k}_zero, {k}_d2[2] : {descriptor}",
            f"{k}_d4 = llvm.insertvalue {k}_size, {k}_d3[3, 0] : {descriptor}",
            f"{k}_d5 = llvm.insertvalue {k}_one, {k}_d4[4, 0] : {descriptor}",
            f"{result} = builtin.unrealized_conversion_cast {k}_d5 : {descriptor} to memref<?x{kind}>",
        ])

    text = _POINTER_CAST.sub(cast, text)
    for result in casts:
        text = re.sub(rf"^\s*annotation\.mark {re.escape(result)} \{{address_space = #hivm\.address_space<gm>\}} : .*$",
                      "", text, flags=re.M)
    return text


def lower(linalg: str) -> LoweredKernel:
    """The shared object of one adapter output (cached under the digest of the text)."""
    name, parameters = _signature(linalg)
    text = re.sub(r', mix_mode\s*=\s*"[^"]*"', "", linalg)
    text = "\n".join(line for line in text.splitlines() if "gpu.barrier" not in line)
    text = lower_pointer_casts(inline_scans(text))
    key = hashlib.sha256((text + _RUNTIME_C).encode()).hexdigest()[:24]
    library = CACHE / "x86" / f"{key}.so"
    if not library.exists():
        library.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            (work / "kernel.mlir").write_text(text)
            _run(["mlir-opt-19", "--allow-unregistered-dialect", str(work / "kernel.mlir"),
                  "--convert-elementwise-to-linalg", "-o", str(work / "named.mlir")], "mlir-opt-19 (elementwise)")
            _run(["mlir-opt-19", "--allow-unregistered-dialect", str(work / "named.mlir"), *LOWERING,
                  "-o", str(work / "llvm.mlir")], "mlir-opt-19 (to the LLVM dialect)")
            _run(["mlir-translate-19", "--mlir-to-llvmir", str(work / "llvm.mlir"), "-o", str(work / "kernel.ll")],
                 "mlir-translate-19")
            _run(["llc-19", "-O2", "-filetype=obj", "-relocation-model=pic", str(work / "kernel.ll"),
                  "-o", str(work / "kernel.o")], "llc-19")
            _run(["cc", "-shared", "-o", str(library), str(work / "kernel.o"), str(runtime_object()), f"-L{MLIR_LIB}",
                  f"-Wl,-rpath,{MLIR_LIB}", "-l:libmlir_c_runner_utils.so.19.1"], "cc (link)")
    return LoweredKernel(library, name, parameters)


# ------------------------------------------------------------------ running between guard pages


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_PROT_NONE, _PROT_RW = 0, 3
_MAP_PRIVATE_ANONYMOUS = 0x02 | 0x20


@dataclasses.dataclass
class GuardedSpan:
    """The bytes [start, start + size) of one storage, copied between two PROT_NONE pages."""

    storage_ptr: int  # where the bytes live in the torch tensor's storage
    size: int
    base: int = 0  # the mapping
    length: int = 0
    address: int = 0  # where the bytes live inside the mapping
    names: tuple[str, ...] = ()

    def place(self, placement: str) -> None:
        data_pages = -(-self.size // PAGE)
        self.length = (data_pages + 2) * PAGE
        base = _libc.mmap(None, self.length, _PROT_RW, _MAP_PRIVATE_ANONYMOUS, -1, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        self.base = base
        _libc.mprotect(base, PAGE, _PROT_NONE)
        _libc.mprotect(base + (data_pages + 1) * PAGE, PAGE, _PROT_NONE)
        first, end = base + PAGE, base + (data_pages + 1) * PAGE
        self.address = end - self.size if placement == "after" else first
        ctypes.memmove(self.address, self.storage_ptr, self.size)

    def copy_back(self) -> None:
        ctypes.memmove(self.storage_ptr, self.address, self.size)

    def release(self) -> None:
        _libc.munmap(self.base, self.length)

    def describe(self, address: int) -> str | None:
        """Which side of the span an address past it lies on, or None if it is not near it."""
        if self.base <= address < self.base + self.length:
            if address < self.address:
                return f"{self.address - address} B before {'/'.join(self.names)}"
            return f"{address - (self.address + self.size) + 1} B past the end of {'/'.join(self.names)}"
        return None


def _span_bytes(tensor: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the storage range the tensor can reach."""
    if tensor.numel() == 0:
        return tensor.data_ptr(), 0
    last = sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    return tensor.data_ptr(), (last + 1) * tensor.element_size()


class GuardedLaunch:
    """One kernel launch run from its lowered code, every tensor argument between guard pages."""

    def __init__(self, kernel: LoweredKernel, names: list[str], values: list[object], placement: str):
        self.kernel = kernel
        self.spans: list[GuardedSpan] = []
        self._where: dict[str, tuple[GuardedSpan, int]] = {}  # name -> (span, byte offset into it)
        by_storage: dict[int, list[tuple[str, torch.Tensor]]] = {}
        for name, value in zip(names, values):
            if isinstance(value, torch.Tensor):
                by_storage.setdefault(value.untyped_storage().data_ptr(), []).append((name, value))
        for tensors in by_storage.values():
            ranges = [_span_bytes(t) for _, t in tensors]
            start = min(address for address, _ in ranges)
            end = max(address + size for address, size in ranges)
            span = GuardedSpan(start, end - start, names=tuple(name for name, _ in tensors))
            span.place(placement)
            self.spans.append(span)
            for (name, _), (address, _) in zip(tensors, ranges):
                self._where[name] = (span, address - start)
        self.names, self.values = names, values

    def arguments(self) -> list[object]:
        workspace = (ctypes.c_int64 * 1024)()
        arguments: list[object] = []
        for _ in range(2):  # sync-block lock and workspace
            address = ctypes.addressof(workspace)
            arguments += [ctypes.c_void_p(address), ctypes.c_void_p(address), ctypes.c_int64(0),
                          ctypes.c_int64(1024 * 8), ctypes.c_int64(1)]
        self._workspace = workspace
        kinds = self.kernel.parameters[2:-6]
        if len(kinds) != len(self.names):
            raise RuntimeError(f"{self.kernel.name}: the lowered function takes {len(kinds)} kernel parameters, "
                               f"the launch passes {len(self.names)} ({self.names})")
        for name, value, kind in zip(self.names, self.values, kinds):
            if kind.startswith("memref"):
                span, offset = self._where[name]
                address = span.address + offset
                count = value.numel() if isinstance(value, torch.Tensor) else 0
                arguments += [ctypes.c_void_p(address), ctypes.c_void_p(address), ctypes.c_int64(0),
                              ctypes.c_int64(count), ctypes.c_int64(1)]
            elif kind == "i64":
                arguments.append(ctypes.c_int64(int(value)))
            elif kind in ("i32", "i1", "i8", "i16"):
                arguments.append(ctypes.c_int32(int(value)))
            elif kind == "f32":
                arguments.append(ctypes.c_float(float(value)))
            else:
                raise RuntimeError(f"{self.kernel.name}: parameter {name} of type {kind} is not supported here")
        return arguments

    def run(self, grid: tuple[int, ...]) -> None:
        function = getattr(ctypes.CDLL(str(self.kernel.library)), self.kernel.name)
        function.restype = None
        grid = tuple(grid) + (1,) * (3 - len(grid))
        arguments = self.arguments()
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    function(*arguments, *(ctypes.c_int32(v) for v in (*grid, x, y, z)))
        for span in self.spans:
            span.copy_back()

    def layout(self) -> list[tuple[int, int, str]]:
        """(mapping start, mapping end, tensors) of each span: what a fault address is looked up in."""
        return [(span.base, span.base + span.length, "/".join(span.names)) for span in self.spans]

    def release(self) -> None:
        for span in self.spans:
            span.release()
