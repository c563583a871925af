"""Every Triton kernel through triton-ascend 3.2's NPU compile route, at every specialization the
launchers use (docs/device_readiness.md, "The NPU").

The specializations are captured from real launches of the op table's calls (launches.py), so a
changed launcher is compiled as it now launches, and a kernel that no op-table call launches
fails. Each distinct specialization goes through the frontend and TTIR, triton-adapter-opt
(several attempts: a crash on any attempt fails) and bishengir-compile up to hivmc
(npu_compile.py).
"""

from __future__ import annotations

import pytest

import launches as capture
import npu_compile

KERNELS = capture.defined_kernels()


@pytest.fixture(scope="session")
def npu_builds(captured_launches) -> list[npu_compile.NpuBuild]:
    jobs = {}
    for launch in captured_launches:
        if launch.error:
            continue
        specialization = capture.specialization(launch)
        jobs.setdefault((launch.kernel, specialization.key()), (launch.kernel, specialization))
    builds = npu_compile.compile_all(list(jobs.values()))
    counts = {stage: sum(b.failed_stage == stage for b in builds) for stage in npu_compile.STAGES}
    print(f"\nNPU route: {len(builds)} specializations of {len({b.kernel for b in builds})} kernels; "
          f"failed at frontend {counts['frontend']}, adapter {counts['adapter']}, bishengir {counts['bishengir']}")
    return builds


def test_every_kernel_is_launched_by_an_op_table_call(captured_launches):
    launched = {launch.kernel for launch in captured_launches}
    never = sorted(capture.kernel_name(k) for k in set(KERNELS) - launched if not capture.host_routed(k))
    assert not never, (f"no op-table call launches {never}, so they are never compiled for the NPU: give the op "
                       "a valid call (or draw) that reaches the kernel")
    assert launched <= set(KERNELS), sorted(launched - set(KERNELS))


def test_kernels_are_discovered_generically():
    names = {capture.kernel_name(k) for k in KERNELS}
    assert "_compute_slot_mapping_kernel" in names and "_gather_block_tables_kernel" in names
    assert not names & {"segment_of", "slots_of_tokens", "format_tile"}, names  # device helpers


def test_host_routed_kernels_are_not_launched_on_the_npu_route(captured_launches):
    routed = [k for k in KERNELS if capture.host_routed(k)]
    # The sas family's two kernels (docs/device_readiness.md says why).
    assert {capture.kernel_name(k) for k in routed} <= {"_sas_metadata_kernel", "_finish_pairs_kernel"}, routed
    assert not [launch for launch in captured_launches if launch.kernel in routed]


NPU_KERNELS = [k for k in KERNELS if not capture.host_routed(k)]


@pytest.mark.parametrize("kernel", [pytest.param(k, id=capture.kernel_name(k)) for k in NPU_KERNELS])
def test_kernel_passes_the_npu_route(kernel, captured_launches, npu_builds):
    uncaptured = sorted({f"{launch.label}: {launch.error}" for launch in captured_launches
                         if launch.kernel == kernel and launch.error})
    assert not uncaptured, (f"{capture.kernel_name(kernel)}: launches triton-ascend 3.2 cannot specialize:\n"
                            + "\n".join(uncaptured))
    builds = [build for build in npu_builds if build.kernel == kernel]
    if not builds:
        pytest.fail(f"{capture.kernel_name(kernel)} was never launched, so never compiled for the NPU")
    failures = [f"[{build.failed_stage}] {build.specialization}\n  {build.error}"
                for build in builds if build.failed_stage]
    assert not failures, (f"{capture.kernel_name(kernel)}: {len(failures)} of {len(builds)} specializations "
                          "fail triton-ascend's NPU route:\n" + "\n".join(failures))


def test_the_docs_state_the_route_figures(npu_builds):
    """docs/device_readiness.md's figures of this check, at the default number of draws."""
    from docs_figures import assert_docs_say

    if capture.DRAWS != capture.DEFAULT_DRAWS:
        pytest.skip(f"the docs state the figures of {capture.DEFAULT_DRAWS} draws per op, this run has {capture.DRAWS}")
    kernels = {build.kernel for build in npu_builds}
    routed = sorted(capture.kernel_name(k) for k in KERNELS if capture.host_routed(k))
    assert_docs_say("device_readiness.md", f"{len(npu_builds)} distinct specializations of the {len(kernels)} "
                                           f"kernels launched on the NPU route")
    assert_docs_say("device_readiness.md", f"{len(KERNELS)} kernels, {len(routed)} of them "
                                           f"({', '.join(f'`{name}`' for name in routed)}) never launched there")
