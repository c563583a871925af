"""Every op bumps the version of every tensor it writes, as torch's in-place ops do.

Caches keyed by a tensor's `_version` (autograd's saved tensors, the drafting layer's StepCache)
must see a specops write. Once no specops op bumped anything: torch's ADInplaceOrView fallback
for custom ops bumps only mutated returns, and specops ops return nothing. The native path
(FastOp, torch.ops.specops.*, compiled graphs) bumps in one ADInplaceOrView kernel
(csrc/written_versions.h), the Python backends in SpecOp. Derived from tests/op_table.py.
"""

from __future__ import annotations

import pytest
import torch
from op_table import OP_TABLE, Call, OpSpec, get_arg, tensor_keys

import specops
from specops.ops.registry import OPS


def _versions(call: Call) -> dict[str, int]:
    return {key: get_arg(call, key)._version for key in tensor_keys(call)}


def _assert_written_bumped(spec: OpSpec, call: Call, before: dict[str, int], path: str) -> None:
    after = _versions(call)
    for key in tensor_keys(call):
        if key in spec.outputs:
            assert after[key] > before[key], f"{path}: {spec.name} wrote {key} without a new version"
        elif key not in spec.reads_first or not any(get_arg(call, key) is get_arg(call, o) for o in spec.outputs):
            assert after[key] == before[key], f"{path}: {spec.name} bumped its input {key}"


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_every_written_tensor_gets_a_new_version(backend, spec):
    call = spec.valid_call()
    before = _versions(call)
    spec.wrapper(**call)
    _assert_written_bumped(spec, call, before, backend)


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_the_generic_entry_bumps_too(spec):
    """torch.ops.specops.* called as torch's own entry (no FastOp), with the wrapper's arguments."""
    op = OPS[spec.wrapper.__module__.rpartition(".")[2]]
    call = spec.valid_call()
    before = _versions(call)
    entry, op.native_entry = op.native_entry, op._native
    try:
        spec.wrapper(**call)
    finally:
        op.native_entry = entry
    _assert_written_bumped(spec, call, before, "torch.ops")


def test_a_compiled_call_bumps_and_a_rejected_call_does_not():
    spec = next(spec for spec in OP_TABLE if spec.name == "compute_slot_mapping")
    call = spec.valid_call()

    def step(query_start_loc, positions, block_table, out, idx_mapping):
        specops.compute_slot_mapping(query_start_loc, positions, block_table, 16, out=out, idx_mapping=idx_mapping,
                                     num_tokens_padded=4)
        return out + 1

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    args = [call[name] for name in ("query_start_loc", "positions", "block_table", "out", "idx_mapping")]
    before = call["out"]._version
    compiled(*args)
    assert call["out"]._version > before
    before = call["out"]._version
    with pytest.raises(ValueError):
        specops.compute_slot_mapping(call["query_start_loc"], call["positions"], call["block_table"], 16,
                                     out=call["out"], cp_rank=3)
    assert call["out"]._version == before


def test_inference_tensors_need_no_version(backend):
    """An inference tensor has no version counter to bump: the native and Triton paths write one
    outside inference mode as before (the plain-torch reference keeps torch's rule, which
    forbids in-place writes to it there)."""
    if backend == "reference":
        pytest.skip("torch's own in-place ops refuse inference tensors outside inference mode")
    with torch.inference_mode():
        out = torch.full((3,), 7, dtype=torch.int64)
    query_start_loc = torch.tensor([0, 2], dtype=torch.int32)
    specops.compute_slot_mapping(query_start_loc, torch.tensor([0, 1]), torch.tensor([[4]], dtype=torch.int32), 16,
                                 out=out)
    assert out.tolist() == [64, 65, -1]
