"""Every Triton kernel compiled for real targets with no GPU present (docs/device_readiness.md).

The kernels only ever run here under Triton's interpreter, which accepts code a real compiler
rejects and says nothing about registers. This suite compiles each kernel for CUDA sm_80, sm_90
and AMD gfx942 at the specializations its launcher really uses: the op table's valid calls
(and a few of its random valid calls) go through the Triton backend with launches intercepted,
and each launch's arguments pass through Triton's own JIT binder for each target
(specops.devtools). No signature is written by hand, so a changed launcher is compiled as
it now launches, and a kernel no op-table call launches fails the coverage test.

It fails on a compile error on any target and on register spills on sm_90: under the flags of
Triton's own cubin step and under ptxas's default register allocation of the same PTX. Triton
3.9's step adds --regAllocOptLevel=2 (a workaround for a ptxas 13.x bug); reading only its log,
this test once passed three kernels that `ptxas -v` on their PTX showed spilling
(_advance_draft_steps_kernel, _compressor_metadata_multi_kernel at the op table's valid calls,
_dspark_swa_indices_multi_kernel at the launchers' argument ranges). The compiles run once per
session in a child process without TRITON_INTERPRET (with a fresh Triton cache, so every build
is a real one); under xdist the workers share them through a lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import pickle
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from docs_figures import UPDATE_DOCS, assert_docs_say, docs_table_rows, rewrite_table_rows
from hypothesis import Phase, given, settings
from op_table import OP_TABLE

import specops
from specops.devtools import kernel_capture, kernel_compile, kernel_report
from specops.devtools.kernel_capture import Launch, Specialization, kernel_name
from specops.devtools.kernel_compile import KernelBuild
from specops.devtools.targets import NPU_TARGET, TARGETS, installed_targets

# What the installed Triton compiles for: CUDA and AMD with upstream Triton, the NPU with triton-ascend.
INSTALLED = installed_targets()

DRAWS_PER_OP = 3  # random valid calls per op on top of the fixed one: other dtypes, flags, sizes

KERNELS = kernel_capture.defined_kernels()
SPILL_TARGET = "sm_90"
# A kernel being rewritten on another branch; the lead drops the marker when it lands.
KNOWN_SPILLS: dict[str, str] = {}


def _draws(op) -> list[dict]:
    found: list[dict] = []

    @settings(max_examples=DRAWS_PER_OP, database=None, derandomize=True, phases=[Phase.generate])
    @given(op.draw_call)
    def collect(call):
        found.append(call)

    collect()
    return found


def capture_op_table_launches() -> list[Launch]:
    """Every launch of the op table's valid calls, DRAWS_PER_OP random ones and the calls of the
    ops' other modes, specialized for the installed targets, kernels not run."""
    captured: list[Launch] = []
    for op in OP_TABLE:
        calls = [(f"{op.name} {'valid call' if index == 0 else f'draw {index}'}", call)
                 for index, call in enumerate([op.valid_call(), *_draws(op)])]
        for label, call in calls + [(f"{op.name} {label}", call) for label, call in op.mode_calls()]:
            with specops.backend("triton"), \
                    kernel_capture.capture_launches(INSTALLED, execute=False, label=label) as calls:
                op.wrapper(**call)
            captured += calls
    return captured


@pytest.fixture(scope="session")
def launches() -> list[Launch]:
    unsupported = kernel_capture.binder_supported()
    if unsupported is not None:
        pytest.skip(f"the launches cannot be specialized here: {unsupported}")
    return capture_op_table_launches()


def _session_folder(tmp_path_factory) -> Path:
    """A folder every xdist worker of this session shares (the base temp's parent under xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def builds(launches, tmp_path_factory):
    """builds(target) -> every distinct specialization of every kernel compiled for target; each
    target compiled once per session, by whichever worker asks first."""
    folder = _session_folder(tmp_path_factory) / "kernel-builds"
    folder.mkdir(exist_ok=True)
    results: dict[str, list[KernelBuild]] = {}

    def get(target) -> list[KernelBuild]:
        if target.name not in results:
            jobs = kernel_compile.distinct_jobs(launches, [target], per_variant=True)
            digest = hashlib.sha256(repr([(k, t.name, s.key()) for k, t, s in jobs]).encode()).hexdigest()[:16]
            path = folder / f"{target.name}-{digest}.pickle"
            with open(folder / f"{target.name}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not path.exists():
                    built = kernel_compile.compile_jobs(jobs, cache_dir=str(folder / "triton-cache"))
                    path.write_bytes(pickle.dumps(built))
            results[target.name] = pickle.loads(path.read_bytes())
        return results[target.name]

    return get


def test_every_kernel_is_launched_by_an_op_table_call(launches):
    launched = {launch.kernel for launch in launches}
    never = sorted(set(KERNELS) - launched)
    assert not never, (
        f"no valid call in tests/op_table.py launches {never}: give the op an OpSpec whose valid call (or "
        "draw_call) reaches the kernel, so it is compiled for the device targets")
    assert launched <= set(KERNELS), sorted(launched - set(KERNELS))


def _kernel_params(marks: dict[str, str] | None = None):
    return [pytest.param(kernel, id=kernel_name(kernel),
                         marks=[pytest.mark.xfail(strict=True, reason=marks[kernel_name(kernel)])]
                         if marks and kernel_name(kernel) in marks else [])
            for kernel in KERNELS]


def _builds_of(builds, kernel: str, target) -> list[KernelBuild]:
    found = [build for build in builds(target) if build.kernel == kernel]
    if not found:
        pytest.fail(f"{kernel_name(kernel)} was never launched, so never compiled for {target.name}")
    return found


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
@pytest.mark.parametrize("kernel", _kernel_params())
def test_kernel_compiles(kernel, target, builds):
    if not target.installed():
        pytest.skip(f"{target.name}: the installed Triton has no '{target.plugin}' backend")
    failures = [f"{build.specialization}\n  {build.error}"
                for build in _builds_of(builds, kernel, target) if build.error]
    assert not failures, f"{kernel_name(kernel)} does not compile for {target.name}:\n" + "\n".join(failures)


@pytest.mark.parametrize("kernel", _kernel_params(KNOWN_SPILLS))
def test_no_register_spills_on_sm90(kernel, builds):
    target = next(t for t in TARGETS if t.name == SPILL_TARGET)
    if not target.installed():
        pytest.skip(f"{target.name}: the installed Triton has no '{target.plugin}' backend")
    spilled = [_spills(build) for build in _builds_of(builds, kernel, target) if _spills(build)]
    assert not spilled, f"{kernel_name(kernel)} spills registers on {SPILL_TARGET}:\n" + "\n".join(spilled)


def _spills(build: KernelBuild) -> str:
    """What a build spills, under Triton's ptxas flags or ptxas's default allocation; "" for none."""
    found = []
    if build.spill_bytes:
        found.append(f"{build.spill_bytes} B stores, {build.spill_loads} B loads, {build.registers} registers")
    if build.default_spill_bytes:
        found.append(f"ptxas's default allocation: {build.default_spill_bytes} B stores, {build.default_registers} "
                     "registers")
    return f"{'; '.join(found)}: {build.specialization}" if found else ""


# Calls from the launchers' real argument ranges, where Triton specializes a kernel on the values
# of its int arguments (an int equal to 1 becomes a constant, one divisible by 16 gets a hint):
# the op table's few draws, compiled once per variant, never launched the DSpark multi-group
# kernel with a window of 1, block size 16 and one request, which spilled on sm_90. Every
# distinct specialization these calls give is compiled (not one per variant).
def _dspark_multi_range_calls() -> list[dict]:
    from specops.ops.dspark_swa_indices import default_width

    calls = []
    for num_groups in range(1, 5):
        for window, block_size, num_reqs, query_len, explicit_width in [
                (1, 16, 1, 4, False), (127, 64, 1, 1, False), (128, 128, 3, 2, False), (5, 1, 2, 3, True),
                (4096, 16, 1, 4, True)]:
            seq_len = 300
            cols = -(-seq_len // block_size)
            widths = [default_width(window, 3) if not explicit_width else window + 3 + query_len] * num_groups
            calls.append(dict(
                block_tables=[torch.randint(0, 1000, (num_reqs, cols), dtype=torch.int32) for _ in range(num_groups)],
                query_start_loc=torch.arange(0, (num_reqs + 1) * query_len, query_len, dtype=torch.int32),
                seq_lens=torch.full((num_reqs,), seq_len, dtype=torch.int32), windows=[window] * num_groups,
                num_speculative_tokens=3, block_sizes=[block_size] * num_groups, num_tokens=num_reqs * query_len,
                widths=widths, cp_size=1, cp_rank=0))
    return calls


def _dspark_range_calls() -> list[dict]:
    """The multi-group calls' first group, as the single op takes it (a window and block size of 1
    with one request spilled here)."""
    calls = []
    for call in _dspark_multi_range_calls() + [dict(_dspark_multi_range_calls()[0], windows=[1], block_sizes=[1],
                                                    block_tables=[torch.zeros((1, 300), dtype=torch.int32)])]:
        if len(call["block_tables"]) == 1:
            calls.append(dict(block_table=call["block_tables"][0], query_start_loc=call["query_start_loc"],
                              seq_lens=call["seq_lens"], window=call["windows"][0],
                              num_speculative_tokens=call["num_speculative_tokens"], block_size=call["block_sizes"][0],
                              num_tokens=call["num_tokens"], width=call["widths"][0]))
    return calls


RANGE_CALLS = {"dspark_swa_indices_multi": _dspark_multi_range_calls, "dspark_swa_indices": _dspark_range_calls}


@pytest.fixture(scope="session")
def range_builds(tmp_path_factory):
    target = next(t for t in TARGETS if t.name == SPILL_TARGET)
    if not target.installed() or kernel_capture.binder_supported() is not None:
        pytest.skip(f"{SPILL_TARGET}: not compiled by this Triton")
    captured: list[Launch] = []
    for op_name, make_calls in RANGE_CALLS.items():
        wrapper = getattr(specops, op_name)
        for index, call in enumerate(make_calls()):
            with specops.backend("triton"), \
                    kernel_capture.capture_launches([target], execute=False, label=f"{op_name} range {index}") as calls:
                wrapper(**call)
            captured += calls
    cache = _session_folder(tmp_path_factory) / "range-triton-cache"
    return kernel_compile.compile_jobs(kernel_compile.distinct_jobs(captured, [target]), cache_dir=str(cache))


def test_no_register_spills_at_the_launchers_argument_ranges(range_builds):
    assert range_builds, "the range calls launched nothing"
    spilled = [f"{kernel_name(b.kernel)}: {b.error or _spills(b)}" for b in range_builds if b.error or _spills(b)]
    assert not spilled, f"spills (or errors) on {SPILL_TARGET}:\n" + "\n".join(spilled)


def test_npu_target_as_far_as_the_toolchain_allows(builds):
    if not NPU_TARGET.installed():
        pytest.skip("npu: this venv's Triton has no 'ascend' backend; the NPU route is checked by "
                    "`make test-ascend` (tests/ascend), in a venv of its own with triton-ascend")
    built = [build for kernel in KERNELS for build in _builds_of(builds, kernel, NPU_TARGET)]
    errors = [f"{kernel_name(b.kernel)}: {b.specialization}\n  {b.error}" for b in built if b.error]
    assert not errors, "\n".join(errors)
    skipped = sorted({f"{kernel_name(b.kernel)}: {b.skipped}" for b in built if b.skipped})
    if skipped:
        pytest.skip(f"npu: {len(built) - len(skipped)} of {len(built)} builds complete; the others stopped "
                    "at a stage whose tool is not installed:\n" + "\n".join(skipped))


# ------------------------------------------------------------------ the machinery itself


@triton.jit
def _probe_kernel(values_ptr, out_ptr, count, scale, offset, FLAG: tl.constexpr):
    index = tl.arange(0, 16)
    value = tl.load(values_ptr + index, mask=index < count, other=0)
    if FLAG:
        value = value * scale + offset
    tl.store(out_ptr + index, value.to(out_ptr.dtype.element_ty), mask=index < count)


def test_launches_are_specialized_as_the_jit_does():
    """Triton's rules, written out: pointer dtypes; pointers and ints divisible by 16 get the
    divisibility hint; an int equal to 1 becomes a constexpr; an int past int32 is i64; AMD adds
    the 32-bit offset hint to pointers."""
    values = torch.zeros(64, dtype=torch.int32)
    out = torch.zeros(64, dtype=torch.int64)
    with kernel_capture.capture_launches(TARGETS, execute=False, label="probe") as captured:
        _probe_kernel[(3,)](values, out, 32, 1, 2**40 + 3, FLAG=True)
        _probe_kernel[(1,)](values[1:], out, 7, 5, 3, FLAG=False)  # a pointer 4 bytes past 16-byte alignment
    first, second = captured
    assert first.kernel.endswith(":_probe_kernel") and first.grid == (3,) and first.label == "probe"
    cuda = first.specializations["sm_90"]
    assert cuda.signature == {"values_ptr": "*i32", "out_ptr": "*i64", "count": "i32", "scale": "constexpr",
                              "offset": "i64", "FLAG": "constexpr"}
    assert cuda.constexprs == {(3,): 1, (5,): True}
    divisible = [["tt.divisibility", 16]]
    assert cuda.attrs[(0,)] == divisible and cuda.attrs[(1,)] == divisible and cuda.attrs[(2,)] == divisible
    assert cuda.attrs[(4,)] == [] and cuda.declared_constexprs == (5,)
    amd = first.specializations["gfx942"]
    assert amd.attrs[(0,)] == [["tt.divisibility", 16], ["tt.pointer_range", 32]]
    later = second.specializations["sm_90"]
    assert later.signature["count"] == "i32" and later.signature["scale"] == "i32" and later.attrs[(0,)] == []
    assert later.constexprs == {(5,): False}
    # One variant per pointer dtypes and declared constexprs: the two launches are two variants.
    assert cuda.variant() != later.variant()
    assert cuda.summary() == "FLAG=True; not *i32: out_ptr"


def test_what_ptxas_and_the_amdgpu_descriptor_report_is_read():
    log = """ptxas info    : Compiling entry function '_k' for 'sm_90a'
ptxas info    : Function properties for _k
    48 bytes stack frame, 40 bytes spill stores, 52 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 48 bytes cumulative stack size, 1024 bytes smem
"""
    assert kernel_compile._ptxas_usage(log) == dict(registers=255, stack_bytes=48, spill_bytes=40, spill_loads=52)
    assert kernel_compile._ptxas_usage("ptxas info    : 0 bytes gmem") is None
    descriptor = """    .private_segment_fixed_size: 16
    .sgpr_count:     106
    .sgpr_spill_count: 12
    .vgpr_count:     49
    .vgpr_spill_count: 3
"""
    assert kernel_compile._amdgpu_usage(descriptor) == dict(registers=49, scalar_registers=106, spill_bytes=12,
                                                            scalar_spills=12, stack_bytes=16)


def test_kernels_are_the_jit_functions_no_jit_function_calls():
    names = {kernel_name(kernel) for kernel in KERNELS}
    assert "_compute_slot_mapping_kernel" in names and "_prepare_spec_decode_inputs_kernel" in names
    # Device helpers are compiled inside the kernels that call them, across modules too.
    assert not names & {"segment_of", "slots_of_tokens", "correct_counts", "positions_of_tokens"}
    assert all(name.endswith("_kernel") for name in names), names


def test_grids_are_sized_for_the_assumed_device():
    """The launchers' persistent grids: min(tiles, cores), for a device this machine lacks."""
    from specops.triton_kernels._launch import assumed_cores

    slots = torch.zeros(300 * 1024 + 5, dtype=torch.int64)  # 301 tiles of 1024 slots
    out = torch.empty(slots.numel(), 2, dtype=torch.int64)
    grids = []
    for cores in (132, 304, 1000):
        with assumed_cores(cores), specops.backend("triton"), \
                kernel_capture.capture_launches(TARGETS[:1], execute=False) as captured:
            specops.format_slot_mapping_blocks(slots, 16, out=out)
        grids += [launch.grid for launch in captured]
    assert grids == [(132,), (301,), (301,)]
    with pytest.raises(ValueError, match="cores"):
        with assumed_cores(0):
            pass


def test_the_report_lists_builds_and_each_cases_grids():
    kernel = "specops.triton_kernels.x:_x_kernel"
    spec = Specialization({"p": "*i32", "BLOCK": "constexpr"}, {(1,): 256}, {(0,): []}, {}, (1,))
    launches = [Launch(kernel, (grid,), {t.name: spec}, "op R=4", t.name) for t, grid in zip(TARGETS, (5, 7, 9))]
    launches.append(Launch(kernel, (5,), {TARGETS[0].name: spec}, "op R=4", TARGETS[0].name))
    builds = [KernelBuild(kernel, "sm_90", spec.describe(), spec.summary(), registers=40, spill_bytes=0,
                          spill_loads=0, stack_bytes=0, shared_bytes=512, num_warps=4),
              KernelBuild(kernel, "gfx942", spec.describe(), spec.summary(), error="CompilationError: boom")]
    lines = kernel_report.report_lines(launches, builds, TARGETS)
    build_rows = [line.split() for line in lines if line.startswith("  _x_kernel")]
    assert build_rows[0][:9] == ["_x_kernel", "sm_90", "40", "-", "0", "-", "0", "512", "4"]
    assert build_rows[0][9:] == ["BLOCK=256"]
    assert build_rows[1][:3] == ["_x_kernel", "gfx942", "FAILED:"]
    (grid_row,) = [line.split() for line in lines if line.startswith("  op R=4")]
    assert grid_row[-5:] == ["_x_kernel", "2", "5", "7", "9"]


# ------------------------------------------------------------------ the figures docs/device_readiness.md states


def test_the_docs_give_the_build_count_of_the_capture(launches):
    counts = {len(kernel_compile.distinct_jobs(launches, [target], per_variant=True)) for target in INSTALLED}
    assert len(counts) == 1, f"the targets build different counts of variants: {counts}"
    assert_docs_say("device_readiness.md", f"{counts.pop()} builds per target")


def resource_rows(builds) -> dict[str, list[str]]:
    """The resource table's row of each kernel from the builds: variants (sm_90 builds), the most
    registers and spill bytes over the variants per CUDA/AMD target, the most registers and spill
    bytes on sm_90 under ptxas's default allocation, the most shared memory on sm_90 / gfx942."""
    by_target = {target.name: builds(target) for target in TARGETS}
    rows = {}
    for kernel in KERNELS:
        per_target = {name: [b for b in built if b.kernel == kernel] for name, built in by_target.items()}

        def most(field: str, target: str) -> str:
            return str(max(getattr(build, field) or 0 for build in per_target[target]))

        names = [target.name for target in TARGETS]
        rows[f"`{kernel_name(kernel)}`"] = [
            str(len(per_target["sm_90"])), " / ".join(most("registers", name) for name in names),
            " / ".join(most("spill_bytes", name) for name in names),
            f"{most('default_registers', 'sm_90')} / {most('default_spill_bytes', 'sm_90')}",
            f"{most('shared_bytes', 'sm_90')} / {most('shared_bytes', 'gfx942')}"]
    return rows


def test_the_docs_resource_table_is_the_builds(builds):
    """A new kernel's row is generated: `SPECOPS_UPDATE_DOCS=1` rewrites the table from the builds."""
    if not all(target.installed() for target in TARGETS):
        pytest.skip("the table's figures come from the CUDA and AMD builds; this Triton lacks one of them")
    if UPDATE_DOCS:
        rewrite_table_rows("device_readiness.md", "`_", resource_rows(builds))
    assert docs_table_rows("device_readiness.md", "`_") == resource_rows(builds)
