"""The grids docs/device_readiness.md states (section "Kernel resources and grids"), as the
launchers size them for an A100, an H100 SXM and an MI300X (`assumed_cores`), on the benchmark
cases the page names: the figures are recomputed here and the page must state them."""

from __future__ import annotations

import functools

import pytest
import torch
from docs_figures import assert_docs_say

import specops
from specops.bench import BENCHMARKS
from specops.devtools.kernel_capture import capture_launches, kernel_name
from specops.devtools.targets import TARGETS
from specops.triton_kernels._launch import assumed_cores

PAGE = "device_readiness.md"


@functools.lru_cache(maxsize=None)
def _bench_case(op: str, label: str):
    (case,) = [case for case in BENCHMARKS[op].cases(torch.device("cpu"), False) if case.label == label]
    return case


def _programs(case, cores: int) -> list[tuple[str, int]]:
    """(kernel, programs) of every launch of a benchmark case's specops implementation on a
    device of `cores` cores, in order (kernels recorded, not run)."""
    with assumed_cores(cores), specops.backend("triton"), capture_launches((), execute=False) as launched:
        case.impls[case.subject]()
    return [(kernel_name(launch.kernel), launch.grid[0]) for launch in launched]


def _per_target(op: str, label: str, kernel: str) -> str:
    """The programs of the case's launches of `kernel` on each target, as the page writes them."""
    sizes = []
    for target in TARGETS:
        programs = {count for name, count in _programs(_bench_case(op, label), target.cores) if name == kernel}
        assert len(programs) == 1, (op, label, kernel, programs)
        sizes.append(str(programs.pop()))
    return " / ".join(sizes)


def test_the_targets_are_the_page_s():
    assert_docs_say(PAGE, "an A100 ({} SMs), an H100 SXM ({} SMs) and an MI300X ({} CUs)".format(
        *(target.cores for target in TARGETS)))


def test_dspark_and_gather_grids():
    dspark = _per_target("dspark_swa_indices", "R=1024 q=4 C=1", "_dspark_swa_indices_kernel")
    gather = _per_target("gather_block_tables", "R=1024 cols=32", "_gather_block_tables_kernel")
    assert_docs_say(PAGE, f"`dspark_swa_indices` at 1024 requests: {dspark} programs; `gather_block_tables` at 1024 "
                          f"requests: {gather}")


def _draft_step(label: str) -> dict[str, dict[str, list[int]]]:
    """target -> kernel -> the programs of each of its launches, for one draft step case."""
    found: dict[str, dict[str, list[int]]] = {}
    for target in TARGETS:
        for kernel, programs in _programs(_bench_case("drafting", label), target.cores):
            found.setdefault(target.name, {}).setdefault(kernel, []).append(programs)
    return found


def _same_everywhere(step: dict[str, dict[str, list[int]]], kernel: str) -> list[int]:
    (grids,) = {tuple(per_kernel.get(kernel, ())) for per_kernel in step.values()}
    return list(grids)


def test_draft_step_grids():
    """A 4-group draft step, causal and not: its single-program launches and the format launch
    (the same grid on every target), and on the non-causal step the DSpark launch per target."""
    causal, non_causal = _draft_step("G=4 R=256 k=7 causal"), _draft_step("G=4 R=256 k=7 non-causal")
    (cp,) = set(_same_everywhere(causal, "_cp_local_metadata_kernel") +
                _same_everywhere(non_causal, "_cp_local_metadata_kernel"))
    sas_causal, sas_non_causal = (_same_everywhere(step, "_sas_metadata_kernel") for step in (causal, non_causal))
    (sas,) = set(sas_causal + sas_non_causal)
    (fmt,) = set(_same_everywhere(causal, "_format_slot_mapping_blocks_multi_kernel") +
                 _same_everywhere(non_causal, "_format_slot_mapping_blocks_multi_kernel"))
    assert _same_everywhere(causal, "_dspark_swa_indices_multi_kernel") == [], "a causal step launched DSpark indices"
    dspark = " / ".join(str(non_causal[target.name]["_dspark_swa_indices_multi_kernel"][0]) for target in TARGETS)
    times = {1: "once", 2: "twice"}
    assert_docs_say(PAGE, f"a 4-group draft step at 256 requests and 7 speculative tokens: `cp_local_metadata` {cp}, "
                          f"`sas_metadata` {sas} ({times[len(sas_causal)]} on a causal step, "
                          f"{times[len(sas_non_causal)]} on a non-causal one), `format_slot_mapping_blocks_multi` "
                          f"{fmt} (two 1024-row tiles per group, dealt round-robin), `dspark_swa_indices_multi` on "
                          f"a non-causal step {dspark}")


@pytest.mark.parametrize("op", ["correct_num_computed_tokens", "correct_optimistic_seq_lens", "prepare_spec_decode_inputs",
                                "sas_metadata"])
def test_single_program_kernels_launch_one_program_everywhere(op):
    assert_docs_say(PAGE, "every single-program kernel (the corrections, `prepare_spec_decode_inputs` with a "
                          "correction, `sas_metadata`) launches 1 program everywhere")
    for case in BENCHMARKS[op].cases(torch.device("cpu"), True):
        if case.label.startswith("MRV2"):
            continue  # nothing to correct (the target step, whole or not): test_request_indexed_step_is_tiled
        for target in TARGETS:
            grids = {programs for _, programs in _programs(case, target.cores)}
            assert grids == {1}, (op, case.label, target.name, grids)


def test_request_indexed_step_is_tiled():
    """prepare_spec_decode_inputs with nothing to correct spreads its tiles over the cores."""
    (case,) = [case for case in BENCHMARKS["prepare_spec_decode_inputs"].cases(torch.device("cpu"), True)
               if case.label == "MRV2 target R=64 q=4 G=2 W=2"]
    grids = " / ".join(str({programs for _, programs in _programs(case, target.cores)}.pop()) for target in TARGETS)
    assert_docs_say(PAGE, f"`prepare_spec_decode_inputs` without a correction (its request-indexed mode, model "
                          f"runner V2's target step) at 64 requests and 2 groups: {grids} (8-row gather tiles)")
