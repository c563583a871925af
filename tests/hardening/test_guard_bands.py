"""Guard bands: no op writes (or reads) one element outside its tensors, on any backend.

Every tensor of a call is a view in the middle of a larger buffer: 2-D and 3-D tensors whose
op accepts a row stride are a sub-block of a buffer with GUARD extra rows above and below and
GUARD extra columns left and right (so the row stride is wider than the row), the others a
slice of a flat buffer with GUARD elements on each side. Output buffers are surrounded by
OUTPUT_CANARY; input buffers by INPUT_CANARY, a large positive value that, read by mistake as
a block id or a position, changes the result. After each call every band is intact, every
input buffer is unchanged, and the outputs agree exactly with the reference.

Two families per op (cases from tests/op_table.py):
- valid random calls: native, Triton (interpreter) and reference agree exactly;
- one invalid value (positions past the block table, negative block ids, idx_mapping past the
  table, ...): the Triton kernel writes what the reference writes (PAD, NULL or the documented
  neutral value) or, where the input contradicts itself, at least nothing out of bounds; the
  native op raises and writes nothing, unless the value is one it maps to PAD too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from op_table import OP_TABLE, Arg, Call, OpSpec, extreme_values, get_arg, set_arg
from strategies import assert_same

import specops

GUARD = 4
OUTPUT_CANARY = {torch.int32: -0x21524111, torch.int64: -0x2152411021524111}  # 0xDEADBEEF, 0xDEADBEEFDEADBEEF
INPUT_CANARY = {torch.int32: 0x3EADBEEF, torch.int64: 0x3EADBEEF3EADBEEF}
# A bool input is only read: True around it is its canary (prepare_next_token_ids' discard mask;
# pcp_gathered_slot_mappings' write mask, where a band read as set would write).
INPUT_CANARY[torch.bool] = True
# A bool output (expand_parallel_draft_inputs' masks) is set around it, where the op only ever
# stores False past its real tokens.
OUTPUT_CANARY[torch.bool] = True
# Float tensors (compressor_metadata's RoPE rows): values exact in bfloat16 that no op computes.
OUTPUT_CANARY.update({torch.float32: -12288.0, torch.bfloat16: -12288.0})
# build_tree_kernel_efficient's bit-packed mask words (uint8 / uint16 / uint32 as SGLang sizes them).
OUTPUT_CANARY.update({torch.uint8: 0xA5, torch.uint16: 0xBEEF, torch.uint32: 0xDEADBEEF})
INPUT_CANARY.update({torch.float32: -20480.0, torch.bfloat16: -20480.0})
# KV caches (move_kv_cache_entries) in float16 and int8 as well.
OUTPUT_CANARY.update({torch.float16: -12288.0, torch.int8: -99})
INPUT_CANARY.update({torch.float16: -20480.0, torch.int8: -77})
DEVICE_BACKENDS = [name for name in BACKENDS if name != "reference"]  # the reference is the oracle


@dataclasses.dataclass
class Banded:
    """`view` is the tensor the op sees; `buffer` holds it at `region`, surrounded by `fill`."""

    view: torch.Tensor
    buffer: torch.Tensor
    region: tuple[slice, ...]
    fill: int

    def breach(self) -> str | None:
        """Where the band no longer holds `fill`: the first such index of `buffer`, or None."""
        outside = self.buffer.clone()
        outside[self.region] = self.fill
        changed = (outside != self.fill).nonzero()
        if changed.numel() == 0:
            return None
        index = tuple(changed[0].tolist())
        return (f"buffer{list(index)} = {outside[index].item()} ({changed.size(0)} changed), the view is "
                f"buffer[{', '.join(f'{r.start}:{r.stop}' if r.start is not None else ':' for r in self.region)}]")


def banded(t: torch.Tensor, arg: Arg, fill: int) -> Banded:
    if arg.row_stride and t.dim() >= 2:
        shape = (t.size(0) + 2 * GUARD, *t.shape[1:-1], t.size(-1) + 2 * GUARD)
        region = (slice(GUARD, GUARD + t.size(0)), *[slice(None)] * (t.dim() - 2), slice(GUARD, GUARD + t.size(-1)))
        buffer = torch.full(shape, fill, dtype=t.dtype)
        view = buffer[region]
    else:
        region = (slice(GUARD, GUARD + t.numel()),)
        buffer = torch.full((t.numel() + 2 * GUARD,), fill, dtype=t.dtype)
        view = buffer[region].view(t.shape)
    view.copy_(t)
    return Banded(view, buffer, region, fill)


@dataclasses.dataclass
class Outcome:
    error: Exception | None
    outputs: dict[str, torch.Tensor]  # copies of the output views after the call
    host_values: dict[str, Any]  # the non-tensor parts of the result (CPLocalMetadata's ints)


def _present(call: Call, key: str) -> bool:
    """Whether the call has the argument (a list argument may be shorter than the table's keys)."""
    name, _, index = key.partition("[")
    return name in call and (not index or int(index[:-1]) < len(call[name] or []))


def _host_values(result: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(result):
        return {field.name: getattr(result, field.name) for field in dataclasses.fields(result)
                if not isinstance(getattr(result, field.name), torch.Tensor)}
    return {}


def run_banded(spec: OpSpec, call: Call, backend: str, *, may_raise: type[Exception] | tuple = ()) -> Outcome:
    """Runs spec.wrapper on banded copies of the call's tensors under `backend` and checks that
    no band changed, no input changed, and a raising call changed no output either."""
    bands = {}
    for key, arg in spec.tensors.items():
        tensor = get_arg(call, key) if _present(call, key) else None
        if isinstance(tensor, torch.Tensor):
            bands[key] = banded(tensor, arg, (OUTPUT_CANARY if key in spec.outputs else INPUT_CANARY)[tensor.dtype])
    before = {key: band.buffer.clone() for key, band in bands.items()}
    args = dict(call)
    for key, band in bands.items():
        set_arg(args, key, band.view)
    error = None
    result = None
    with specops.backend(backend):
        try:
            result = spec.wrapper(**args)
        except may_raise as exc:
            error = exc
    for name, band in bands.items():
        breach = band.breach()
        assert breach is None, f"{backend}: {spec.name} wrote outside {name}: {breach}"
        if name not in spec.outputs or isinstance(error, ValueError):
            assert torch.equal(band.buffer, before[name]), f"{backend}: {spec.name} changed {name}"
    return Outcome(error, {key: bands[key].view.clone() for key in spec.outputs if key in bands}, _host_values(result))


def assert_agree(spec: OpSpec, actual: Outcome, expected: Outcome, backend: str) -> None:
    assert actual.outputs.keys() == expected.outputs.keys()
    for name in actual.outputs:
        assert_same(actual.outputs[name], expected.outputs[name], f"{backend} {spec.name} {name}")
    assert actual.host_values == expected.host_values, backend


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_valid_calls_stay_inside_their_buffers_and_agree(spec):
    @settings(max_examples=examples(spec.guard_examples))
    @given(call=spec.draw_call)
    def check(call):
        expected = run_banded(spec, call, "reference")
        for backend in DEVICE_BACKENDS:
            assert_agree(spec, run_banded(spec, call, backend), expected, backend)

    check()


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_invalid_values_stay_inside_their_buffers(spec):
    @settings(max_examples=examples(2 * spec.guard_examples))
    @given(data=st.data())
    def check(data):
        call = data.draw(spec.draw_call)
        corruption = data.draw(st.sampled_from(spec.corruptions))
        native_must_raise = corruption.apply(data.draw, call)
        agree = corruption.device == "agree"
        # Where the input contradicts itself the reference may fail; nothing is compared then.
        expected = run_banded(spec, call, "reference", may_raise=() if agree else Exception)
        for backend in DEVICE_BACKENDS:
            if backend == "native":
                outcome = run_banded(spec, call, "native", may_raise=ValueError)
                assert (outcome.error is not None) == native_must_raise, f"native, {corruption.label}: {outcome.error}"
            else:
                outcome = run_banded(spec, call, backend)
            if agree and outcome.error is None:
                assert_agree(spec, outcome, expected, f"{backend}, {corruption.label}")

    check()


# Ops whose reference, on host tensors, is the host op and refuses what it refuses (docs/hardening.md,
# store_kv_block_metadata): their extreme values may be refused there too.
HOST_REFERENCES = {"store_kv_block_metadata"}


@pytest.mark.parametrize("spec", OP_TABLE, ids=[spec.name for spec in OP_TABLE])
def test_extreme_values_stay_inside_their_buffers(spec):
    """Up to three entries of one input tensor at an extreme (extreme_values: INT32_MIN, INT32_MAX
    and their neighbours; INT64 ones in int64 tensors), where int32 index math wraps. The native
    op rejects (writing nothing) or agrees with the reference; Triton agrees with the reference,
    or for the offsets tensors (OpSpec.offsets, a layout contradicting itself) stays in bounds."""
    inputs = [key for key in spec.tensors if key not in spec.outputs]

    @settings(max_examples=examples(spec.guard_examples))
    @given(data=st.data())
    def check(data):
        call = data.draw(spec.draw_call)
        present = [key for key in inputs if _present(call, key) and isinstance(get_arg(call, key), torch.Tensor)
                   and get_arg(call, key).numel()]
        if not present:
            return
        key = data.draw(st.sampled_from(present))
        entries = get_arg(call, key).view(-1)
        for _ in range(data.draw(st.integers(1, 3))):
            entries[data.draw(st.integers(0, entries.numel() - 1))] = data.draw(st.sampled_from(extreme_values(entries.dtype)))
        agree = key not in spec.offsets
        host = spec.name in HOST_REFERENCES
        expected = run_banded(spec, call, "reference", may_raise=ValueError if host else () if agree else Exception)
        for backend in DEVICE_BACKENDS:
            outcome = run_banded(spec, call, backend, may_raise=ValueError if backend == "native" else ())
            if host and expected.error is not None:
                # The host op's reference refused the value: the native op refuses it alike, the
                # Triton kernel (a device's) only stays inside its buffers.
                if backend == "native":
                    assert str(outcome.error) == str(expected.error), f"native, extremes in {key}: {outcome.error}"
                continue
            if agree and outcome.error is None:
                assert_agree(spec, outcome, expected, f"{backend}, extremes in {key}")

    check()


def test_bands_catch_a_write_one_past_the_end():
    """The detector itself: a write one element past a view lands in its band."""
    for arg, shape in ((Arg((torch.int32,), 1), (5,)), (Arg((torch.int64,), 2, row_stride=True), (3, 4)),
                       (Arg((torch.int32,), 2), (3, 4))):
        dtype = arg.dtypes[0]
        band = banded(torch.zeros(shape, dtype=dtype), arg, OUTPUT_CANARY[dtype])
        assert band.breach() is None
        flat = band.buffer.view(-1)
        last = band.view[(-1,) * len(shape)]
        offset = last.data_ptr() - flat.data_ptr()
        flat[offset // flat.element_size() + 1] = 7
        assert "= 7 (1 changed)" in band.breach(), shape
