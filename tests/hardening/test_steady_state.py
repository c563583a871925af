"""Steady state: with its outputs given, a wrapper allocates no tensor and never syncs.

A runner calls these every decode step, inside captured graphs: an allocation there breaks the
capture (or leaks a new address past it), a device-to-host read stalls the step. Counted with
tests/host_syncs.py (a TorchDispatchMode; see there for what counts as an allocation or a sync):

- native: the op on CPU tensors. The dispatch log shows what the wrapper does, the profiler's
  memory events what the C++ kernel does below the dispatcher.
- device stand-in: every tensor but the host copies (OpSpec.host_tensors) on `meta`, under the native
  backend: the wrapper and the op's check run as they would before a device launch, and any read
  of a tensor value fails.
- triton: the check and the launcher of the Triton backend, the interpreter's own copies left
  out (a compiled launch makes none).

Each step runs once before it is counted: a first call may import modules and fill caches.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

import pytest
import torch
from conftest import BACKENDS
from host_syncs import OpLog, native_allocations, triton_launches_unlogged
from op_table import DSPARK, OP_TABLE, SLOT_MAPPING, Call, OpSpec, t32, t64

import specops
from specops import drafting

LAUNCHING_BACKENDS = [name for name in ("native", "triton") if name in BACKENDS]


def _counted(step: Callable[[], object], backend: str) -> OpLog:
    with specops.backend(backend):
        step()
        with triton_launches_unlogged() if backend == "triton" else contextlib.nullcontext(), OpLog() as log:
            step()
    return log


def assert_steady(log: OpLog) -> None:
    assert log.allocations() == [], f"allocated: {log.allocations()}"
    assert log.host_syncs() == [], f"would sync: {log.host_syncs()}"


def _on_device_stand_in(spec: OpSpec, call: Call) -> Call:
    def moved(value):
        if isinstance(value, list):
            return [moved(item) for item in value]
        return value.to("meta") if isinstance(value, torch.Tensor) else value
    return {name: value if name in spec.host_tensors else moved(value) for name, value in call.items()}


@pytest.mark.parametrize("backend", LAUNCHING_BACKENDS)
@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_op_with_outputs_given(spec: OpSpec, backend: str):
    call = spec.valid_call()
    assert_steady(_counted(lambda: spec.wrapper(**call), backend))


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_native_kernel_allocates_nothing(spec: OpSpec):
    call = spec.valid_call()
    spec.wrapper(**call)
    assert native_allocations(lambda: spec.wrapper(**call)) == []


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_device_path_up_to_the_launch(spec: OpSpec):
    call = _on_device_stand_in(spec, spec.valid_call())
    assert_steady(_counted(lambda: spec.wrapper(**call), "native"))


# ---------------------------------------------------------------- per-step paths of several ops

@dataclasses.dataclass(frozen=True)
class StepPath:
    """A runner's per-step path: `build()` sets it up (allocating its persistent buffers) and
    returns the step, which must then run allocation- and sync-free on each backend."""

    name: str
    build: Callable[[], Callable[[], object]]


def _mappings() -> specops.PersistentMappings:
    groups = [specops.MappingGroup(16), specops.MappingGroup(4, blocks_per_kv_block=2, cp_sharded=False)]
    mappings = specops.PersistentMappings(groups, max_num_reqs=4, max_num_blocks_per_req=8, max_num_tokens=32,
                                          cp_world_size=2, cp_rank=1)
    for row in range(3):
        mappings.append_blocks(row, [[row + 1, row + 5], [10, 11, 12, 13]])
    mappings.apply_staged()
    return mappings


def _refresh() -> Callable[[], object]:
    mappings = _mappings()
    idx_mapping, query_start_loc, positions = t32(2, 0, -1), t32(0, 3, 4, 6), t64(0, 1, 2, 15, 7, 8)
    return lambda: mappings.refresh(idx_mapping, query_start_loc, positions, num_reqs_padded=4, num_tokens_padded=8)


def _prepare_step() -> Callable[[], object]:
    """The runner step: the fused correction, positions, seq_lens and slot mappings, then every
    group's gather, with a sliding-window group (its first positions scattered to request rows)."""
    groups = [specops.MappingGroup(16, name="full"), specops.MappingGroup(4, sliding_window_reach=6, name="swa")]
    mappings = specops.PersistentMappings(groups, max_num_reqs=4, max_num_blocks_per_req=8, max_num_tokens=32)
    for row in range(3):
        mappings.append_blocks(row, [[row + 1, row + 5], [10, 11, 12, 13, 14, 15, 16, 17]])
    mappings.apply_staged()
    counts, initial = t32(5, 9, 0, 0), t32(5, 9, 0, 0)
    inputs = (counts, t32(0, 0, 0, 0), t32(1, 0, -1), t32(2, 1), t32(2, 0), t32(0, 0, 3, 0), t32(0, 3, 4, 6),
              t32(2, 0, -1))

    def step():
        counts.copy_(initial)  # the same step each time: the correction moves the counts
        return mappings.prepare_step(*inputs, num_reqs_padded=4, num_tokens_padded=8)
    return step


def _apply_staged(packed: bool) -> Callable[[], object]:
    mappings = _mappings()
    if packed:
        mappings._staging.stage_through_copy(pin_memory=False)  # the device path's single staging copy, on CPU

    def step():
        mappings.append_blocks(1, [[7], [8, 9]], overwrite=True)
        mappings.apply_staged()
    return step


def _draft_step(causal: bool = True) -> Callable[[], object]:
    """One draft step over a sliding-window, a full and a DSpark group, under CP (2 ranks), with
    the host copy of seq_lens given (without it the layer makes its one sync per step); the
    DSpark group builds its indices on the non-causal step."""
    model = drafting.ModelConfig(num_heads_q=8, num_heads_kv=2, head_dim=64,
                                 rope_cos_sin_cache=torch.rand(256, 8, generator=torch.Generator().manual_seed(0)),
                                 num_speculative_tokens=3, cp_size=2, cp_rank=1, num_cube_cores=4, num_vector_cores=8,
                                 soc_version="Ascend910B1")
    groups = [drafting.GroupConfig("swa", block_size=16, storage_block_size=16, sliding_window=24),
              drafting.GroupConfig("full", block_size=16, storage_block_size=4, sliding_window=None),
              drafting.GroupConfig("dspark", block_size=8, storage_block_size=8, sliding_window=24, dspark=True)]
    builders = [drafting.DraftMetadataBuilder(model, group, max_num_reqs=8, max_num_tokens=32) for group in groups]
    query_start_loc, seq_lens = t32(0, 4, 5, 9), t32(40, 17, 100)
    positions = t64(36, 37, 38, 39, 16, 96, 97, 98, 99)
    generator = torch.Generator().manual_seed(1)
    common = drafting.CommonDraftInputs(
        query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc.clone(), seq_lens=seq_lens,
        seq_lens_cpu=seq_lens.clone(), positions=positions, num_reqs=3, num_actual_tokens=9, num_input_tokens=12,
        causal=causal,
        block_tables={g.name: torch.randint(0, 1000, (3, 16), dtype=torch.int32, generator=generator) for g in groups},
        slot_mappings={g.name: torch.randint(0, 10000, (9,), generator=generator) for g in groups})
    return lambda: drafting.build_draft_attn_metadata(builders, common, draft_index=1)


# A runner's per-step paths. Add one as StepPath(name, build); docs/hardening.md.
STEP_PATHS = [
    StepPath("PersistentMappings.refresh", _refresh),
    StepPath("PersistentMappings.prepare_step", _prepare_step),
    StepPath("PersistentMappings.apply_staged", lambda: _apply_staged(packed=False)),
    StepPath("PersistentMappings.apply_staged packed", lambda: _apply_staged(packed=True)),
    StepPath("drafting.build_draft_attn_metadata", _draft_step),
    StepPath("drafting.build_draft_attn_metadata non-causal", lambda: _draft_step(causal=False)),
]


@pytest.mark.parametrize("backend", LAUNCHING_BACKENDS)
@pytest.mark.parametrize("path", STEP_PATHS, ids=[path.name for path in STEP_PATHS])
def test_step_path(path: StepPath, backend: str):
    step = path.build()
    assert_steady(_counted(step, backend))


@pytest.mark.parametrize("path", STEP_PATHS, ids=[path.name for path in STEP_PATHS])
def test_step_path_native_kernels_allocate_nothing(path: StepPath):
    step = path.build()
    step()
    assert native_allocations(step) == []


def test_the_counters_see_allocations_and_syncs():
    """The detectors themselves: an allocating wrapper, a value read, a C++ allocation."""
    call = SLOT_MAPPING.valid_call()
    call.pop("out")
    log = _counted(lambda: specops.compute_slot_mapping(**call), "native")
    assert log.allocations() == ["aten.empty.memory_format"] and log.host_syncs() == []
    query_start_loc = DSPARK.valid_call()["query_start_loc"]
    log = _counted(lambda: int(query_start_loc[-1]), "native")
    assert log.host_syncs() == ["aten._local_scalar_dense.default"]
    assert native_allocations(lambda: torch.ops.aten.nonzero(t32(0, 1, 2)))
    with triton_launches_unlogged(), OpLog() as log:
        torch.zeros(3).add_(1)
    assert log.allocations() == ["aten.zeros.default"]
