"""The NPU compile route of triton-ascend 3.2, stage by stage, as far as it runs without CANN.

1. frontend and make_ttir: `triton.compile` with the NPU target, stopped where triton-ascend
   would call its adapter (the TTIR is what the adapter reads);
2. triton-adapter-opt with the pass list and options of triton-ascend's `ttir_to_linalg`: its
   passes up to --triton-to-unstructure once under valgrind's memcheck, then the whole list
   ATTEMPTS times plainly. Its heap bugs crash it on some inputs only for some address layouts:
   a mask of more than two comparisons on a load or store makes --discrete-mask-access-conversion
   read freed memory, and --triton-to-unstructure copies one entry of its value-to-offset map into
   a new one through a reference, which reads the freed table when that insertion regrows the map
   (a kernel hits it or not by how many values its pointers' offsets have).
   memcheck reports both on every run, so a kernel that only sometimes crashes the adapter fails
   every time here. Every run must succeed and print the same linalg;
3. ascendnpu-ir's bishengir-compile with the options of `linalg_to_bin_enable_npu_compile_A2_A3`
   on that linalg (mix_mode stripped as `_parse_linalg_metadata` does). It runs every BiShengIR
   pass and stops before hivmc, CANN's backend, which is not installed: the HIVMC_STOP message
   means every pass before it accepted the kernel.

Each result is cached in CACHE: the TTIR under the kernel, its specialization and a digest of
every kernel source file and of the installed Triton; the adapter's and bishengir's results under
the SHA-256 of their input text (the TTIR, the linalg). A kernel that did not change is not
recompiled, and `compile_all` answers from the cache alone when it can. The frontend needs
JITFunctions, so what is not cached is compiled in a child process without TRITON_INTERPRET: the
frontends one after the other (triton.compile is patched for them), the tools in parallel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("SPECOPS_ASCEND_CACHE", HERE.parents[1] / "build" / "ascend-cache"))
ATTEMPTS = 2  # memcheck finds the layout-dependent crashes; two plain runs must agree
HIVMC_STOP = "External hivmc run fails, returning module before running external compiler"
STAGES = ("frontend", "adapter", "bishengir")
# The compile options the adapter and bishengir command lines read (what the TTIR cache keeps).
_TOOL_OPTIONS = ("compile_on_910_95", "force_simt_template", "enable_nd2nz_on_vector", "enable_select_analysis",
                 "enable_linearize", "multibuffer", "enable_auto_bind_sub_block")


@dataclasses.dataclass
class NpuBuild:
    """One kernel at one specialization through the NPU route."""

    kernel: str
    specialization: str  # NpuSpecialization.describe()
    failed_stage: str | None = None  # one of STAGES, None when every stage passed
    error: str = ""
    linalg: str = ""  # the adapter's output (input of bishengir and of the x86 lowering)


class _StopBeforeAdapter(Exception):
    def __init__(self, ttir: str, metadata: dict):
        super().__init__("stopped before the adapter")
        self.ttir = ttir
        self.metadata = metadata


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]


def ttir_of(kernel: str, specialization) -> tuple[str, dict]:
    """The TTIR triton-ascend hands its adapter, and the compile metadata (its option flags)."""
    import triton
    from triton.backends import backends
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from launches import NPU_ARCH, kernel_function

    reached: list[_StopBeforeAdapter] = []

    def stop(mod, metadata, opt, **_):
        reached.append(_StopBeforeAdapter(str(mod), dict(metadata)))
        raise reached[-1]

    source = ASTSource(kernel_function(kernel), specialization.signature, specialization.constants,
                       specialization.descriptor())
    # Triton loads the backend's compiler.py under its own module name: its stages look the adapter
    # step up in the globals of the backend class's functions.
    stages = backends["ascend"].compiler.add_stages.__globals__
    original = stages["ttir_to_linalg"]
    stages["ttir_to_linalg"] = stop
    try:
        triton.compile(source, target=GPUTarget("npu", NPU_ARCH, 0), options=specialization.options)
    except Exception:
        if not reached:  # a frontend or TTIR error
            raise
    finally:
        stages["ttir_to_linalg"] = original
    if not reached:
        raise RuntimeError("triton.compile never reached the adapter")
    return reached[0].ttir, reached[0].metadata


def adapter_command(source: Path, output: Path, metadata: dict) -> list[str]:
    """triton-ascend 3.2's ttir_to_linalg command line (named ops, as its NPU stages ask)."""
    from triton.backends import backends

    on_910_95 = metadata["compile_on_910_95"]
    simt = metadata["force_simt_template"]
    command = [backends["ascend"].compiler.add_stages.__globals__["_get_triton_adapter_opt_path"](), str(source)]
    if metadata.get("enable_linearize"):
        command.append("--triton-linearize")
    return command + [
        f"--discrete-mask-access-conversion=compile-on-910-95={on_910_95} force-simt-template={simt}",
        "--triton-to-annotation",
        f"--triton-to-unstructure=compile-on-910-95={on_910_95} force-simt-template={simt}",
        "--triton-to-hivm", "--triton-to-hfusion", "--triton-to-llvm", "--bubble-up-operation",
        f"--triton-to-linalg=global-kernel=false named-ops=True "
        f"enable-nd2nz-on-vector={metadata['enable_nd2nz_on_vector']} "
        f"enable-select-analysis={metadata['enable_select_analysis']} compile-on-910-95={on_910_95}",
        "-o", str(output),
    ]


def bishengir_path() -> str:
    import ascendnpuir

    return str(Path(ascendnpuir.__file__).parent / "bin" / "bishengir-compile")


def _bishengir_command(source: Path, output: Path, metadata: dict) -> list[str]:
    from launches import NPU_ARCH

    command = [bishengir_path(), str(source), f"--target={NPU_ARCH}"]
    if metadata["multibuffer"] is not None:
        command.append(f"--enable-auto-multi-buffer={metadata['multibuffer']}")
    if metadata["enable_auto_bind_sub_block"] is not None:
        command.append(f"--enable-auto-bind-sub-block={metadata['enable_auto_bind_sub_block']}")
    return command + ["--enable-hfusion-compile=true", "--enable-hivm-compile=true",
                      "--enable-triton-kernel-compile=true", "-o", str(output)]


def _tail(text: bytes | str, lines: int = 6) -> str:
    """The lines that say what went wrong (a tool's error or assertion, not its stack dump)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    all_lines = text.strip().splitlines()
    telling = [line for line in all_lines
               if re.search(r"error|UNREACHABLE|Assertion|Stack dump|failed|Invalid (read|write)|free'd", line, re.I)]
    return "\n".join((telling or all_lines)[-lines:])


def _cached(stage: str, key: str, compute=None) -> dict | None:
    """The cached result of `stage` under `key`; computed and stored when missing (None when
    missing and there is no `compute`)."""
    path = CACHE / stage / f"{key}.json"
    if path.exists():
        return json.loads(path.read_text())
    if compute is None:
        return None
    result = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result))
    return result


def _sources_digest() -> str:
    """What a kernel's TTIR depends on besides its specialization: every kernel source file (a
    kernel calls helpers of other modules) and the Triton that compiles it."""
    import triton

    import specops.triton_kernels as package

    files = sorted(Path(package.__path__[0]).glob("*.py"))
    return _digest(triton.__version__, *(f"{f.name}\0{f.read_text()}" for f in files))


def frontend(kernel: str, specialization, compute: bool = True) -> dict | None:
    """{"ttir": text, "metadata": the tool options} or {"error": why} (cached)."""
    def run() -> dict:
        try:
            ttir, metadata = ttir_of(kernel, specialization)
        except Exception as exc:  # the compile error is the result
            return {"error": f"{type(exc).__name__}: {_tail(str(exc), 12)}"}
        return {"ttir": ttir, "metadata": {k: metadata.get(k) for k in _TOOL_OPTIONS}}

    key = _digest(_sources_digest(), kernel, specialization.key())
    return _cached("ttir", key, run if compute else None)


def run_adapter(ttir: str, metadata: dict, compute: bool = True) -> dict | None:
    """{"linalg": text} or {"error": why}: ATTEMPTS runs, each must pass and agree."""
    def run() -> dict:
        outputs = []
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / "kernel.ttir.mlir"
            source.write_text(ttir)
            # The passes with known heap bugs, up to the unstructure conversion: the whole pipeline
            # under memcheck is slow.
            command = adapter_command(source, Path(folder) / "checked.mlir", metadata)
            last = next(i for i, a in enumerate(command) if a.startswith("--triton-to-unstructure"))
            checked = subprocess.run(["valgrind", "--error-exitcode=99", "--quiet", *command[:last + 1],
                                      "-o", str(Path(folder) / "checked.mlir")], capture_output=True)
            if checked.returncode != 0:
                return {"error": f"valgrind's memcheck finds the adapter reading or writing memory it must not "
                                 f"(exit {checked.returncode}): the crash it causes depends on the address layout\n"
                                 f"{_tail(checked.stderr, 4)}"}
            for attempt in range(ATTEMPTS):
                output = Path(folder) / f"kernel.{attempt}.ttadapter.mlir"
                result = subprocess.run(adapter_command(source, output, metadata), capture_output=True)
                if result.returncode != 0:
                    how = f"signal {-result.returncode}" if result.returncode < 0 else f"exit {result.returncode}"
                    return {"error": f"attempt {attempt + 1} of {ATTEMPTS}: {how}\n{_tail(result.stderr)}"}
                outputs.append(output.read_text())
        if len(set(outputs)) != 1:
            return {"error": f"the {ATTEMPTS} attempts printed different linalg"}
        return {"linalg": outputs[0]}

    keyed = {k: metadata[k] for k in ("compile_on_910_95", "force_simt_template", "enable_nd2nz_on_vector",
                                      "enable_select_analysis", "enable_linearize")}
    return _cached("adapter", _digest(ttir, repr(sorted(keyed.items())), str(ATTEMPTS), "memcheck-unstructure"),
                   run if compute else None)


def run_bishengir(linalg: str, metadata: dict, compute: bool = True) -> dict | None:
    """{} when every BiShengIR pass ran (it stopped at hivmc), else {"error": why}."""
    stripped = re.sub(r', mix_mode\s*=\s*"[^"]*"', "", linalg)

    def run() -> dict:
        with tempfile.TemporaryDirectory() as folder:
            source = Path(folder) / "kernel.ttadapter.mlir"
            source.write_text(stripped)
            result = subprocess.run(_bishengir_command(source, Path(folder) / "kernel", metadata),
                                    capture_output=True)
        log = (result.stdout + result.stderr).decode(errors="replace")
        if HIVMC_STOP in log:
            return {}
        return {"error": f"exit {result.returncode} before hivmc\n{_tail(log)}"}

    keyed = repr((metadata["multibuffer"], metadata["enable_auto_bind_sub_block"]))
    return _cached("bishengir", _digest(stripped, keyed), run if compute else None)


def _tools(build: NpuBuild, ttir: str, metadata: dict, compute: bool = True) -> NpuBuild | None:
    """The adapter and bishengir stages of `build` (None when compute=False and one is not cached)."""
    adapted = run_adapter(ttir, metadata, compute)
    if adapted is None:
        return None
    if "error" in adapted:
        build.failed_stage, build.error = "adapter", adapted["error"]
        return build
    build.linalg = adapted["linalg"]
    verdict = run_bishengir(build.linalg, metadata, compute)
    if verdict is None:
        return None
    if "error" in verdict:
        build.failed_stage, build.error = "bishengir", verdict["error"]
    return build


def cached_build(kernel: str, specialization) -> NpuBuild | None:
    """The build from the cache alone (no JIT needed), or None when some stage is not cached."""
    build = NpuBuild(kernel, specialization.describe())
    front = frontend(kernel, specialization, compute=False)
    if front is None:
        return None
    if "error" in front:
        build.failed_stage, build.error = "frontend", front["error"]
        return build
    return _tools(build, front["ttir"], front["metadata"], compute=False)


def compile_jobs(jobs: list[tuple[str, object]]) -> list[NpuBuild]:
    """Every stage of each job in this process (its kernels must be JITFunctions): the frontends
    in turn, then the tools of all jobs on as many threads as there are CPUs."""
    builds, fronts = [], []
    for kernel, specialization in jobs:
        builds.append(NpuBuild(kernel, specialization.describe()))
        fronts.append(frontend(kernel, specialization))

    def tools(index: int) -> NpuBuild:
        build, front = builds[index], fronts[index]
        if "error" in front:
            build.failed_stage, build.error = "frontend", front["error"]
            return build
        return _tools(build, front["ttir"], front["metadata"])

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(tools, range(len(jobs))))


def compile_all(jobs: list[tuple[str, object]]) -> list[NpuBuild]:
    """The build of each (kernel, specialization): from the cache where every stage is there, the
    rest compiled in a child process without TRITON_INTERPRET."""
    builds = [cached_build(kernel, specialization) for kernel, specialization in jobs]
    missing = [index for index, build in enumerate(builds) if build is None]
    if not missing:
        return builds
    with tempfile.TemporaryDirectory() as folder:
        request, reply = Path(folder) / "jobs.pickle", Path(folder) / "builds.pickle"
        request.write_bytes(pickle.dumps([jobs[index] for index in missing]))
        env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]),
                   TRITON_CACHE_DIR=str(CACHE / "triton"))
        result = subprocess.run([sys.executable, __file__, str(request), str(reply)], env=env,
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"the NPU compile process failed ({result.returncode}):\n{result.stderr[-4000:]}")
        for index, build in zip(missing, pickle.loads(reply.read_bytes())):
            builds[index] = build
    return builds


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import npu_compile  # the results pickle under the module's own name, not __main__

    jobs = pickle.loads(Path(sys.argv[1]).read_bytes())
    Path(sys.argv[2]).write_bytes(pickle.dumps(npu_compile.compile_jobs(jobs)))
