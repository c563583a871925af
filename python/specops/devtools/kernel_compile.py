"""Each captured specialization compiled for its target, and the resources the target's tools report.

`compile_jobs` compiles each distinct specialization (kernel_capture.py) and reads registers,
spill bytes and stack from `ptxas -v` on the PTX (CUDA), the register counts, spill counts and
scratch size from the AMDGPU kernel descriptor (AMD), and the shared memory Triton allocated.
On CUDA `ptxas -v` runs twice: with the flags of Triton's own cubin step, and with ptxas's own
defaults. Triton 3.9 adds `--regAllocOptLevel=2` (a workaround for a ptxas 13.x bug), under
which its cubins did not spill where ptxas's default allocation of the same PTX does (what
`ptxas -v` by hand, another Triton or a build without the workaround gives): a kernel must fit
under both.
Kernels are real `JITFunction`s only in a process that did not set TRITON_INTERPRET=1; from an
interpreter process the compile runs in a child process (devtools/_child.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterable
from pathlib import Path

from specops.devtools.kernel_capture import Launch, Specialization, kernel_function
from specops.devtools.targets import Target

PTXAS_USAGE = re.compile(r"Used (\d+) registers")
PTXAS_SPILLS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_SHARED = re.compile(r"(\d+) bytes smem")
# The flags of Triton 3.9's cubin step (triton/backends/nvidia/compiler.py, make_cubin) that
# change the resources; the second run passes none.
TRITON_PTXAS_FLAGS = ("-lineinfo", "--regAllocOptLevel=2")


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
    # CUDA, ptxas's default register allocation of the same PTX (no --regAllocOptLevel=2).
    default_registers: int | None = None
    default_spill_bytes: int | None = None
    num_warps: int | None = None
    seconds: float = 0.0
    skipped: str | None = None  # a stage the installed toolchain cannot run (NPU)


def _ptxas_log(ptx: str, arch: int, flags: tuple[str, ...] = TRITON_PTXAS_FLAGS) -> str:
    """`ptxas -v` on the PTX with `flags` (by default those of Triton's own cubin step, for a
    kernel that came out of Triton's cache: a fresh compile hands over its own log)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "kernel.ptx"
        source.write_text(ptx)
        result = subprocess.run(
            [get_ptxas(arch).path, "-v", *flags, f"--gpu-name={sm_arch_from_capability(arch)}", str(source), "-o",
             str(source.with_suffix(".o"))],
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

    fn = kernel_function(kernel)
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
            default = _ptxas_usage(_ptxas_log(compiled.asm["ptx"], target.arch, flags=()))
            if usage is None or default is None:
                raise RuntimeError("ptxas -v printed no resource usage")
            build.default_registers, build.default_spill_bytes = default["registers"], default["spill_bytes"]
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


def interpreting() -> bool:
    from triton import knobs

    return bool(knobs.runtime.interpret)


def compile_jobs(jobs: list[tuple[str, Target, Specialization]], *, cache_dir: str | None = None) -> list[KernelBuild]:
    """Compiles each job, in this process when its kernels are JITFunctions, else in a child
    process without TRITON_INTERPRET. cache_dir: Triton's cache for the child (a fresh folder
    makes every compile a real one)."""
    if not jobs:
        return []
    if not interpreting():
        return [compile_one(*job) for job in jobs]
    with tempfile.TemporaryDirectory() as folder:
        request, reply = Path(folder) / "jobs.pickle", Path(folder) / "builds.pickle"
        request.write_bytes(pickle.dumps(jobs))
        env = dict(os.environ, TRITON_INTERPRET="0")
        if cache_dir is not None:
            env["TRITON_CACHE_DIR"] = cache_dir
        result = subprocess.run([sys.executable, "-m", "specops.devtools._child", "--compile", str(request), str(reply)],
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
