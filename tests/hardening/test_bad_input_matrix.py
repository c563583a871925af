"""The bad-input matrix: every op, every argument, every way to get it wrong (docs/hardening.md).

Generated from tests/op_table.py. For each tensor argument: each wrong dtype, a `meta` tensor
(the wrong device), one dimension more and one less, a last dimension that is not contiguous,
overlapping rows of an output; then each op's own shape, size and scalar errors. All of these are rejected on every backend
(the native op, the Triton launcher's check, the reference's check) with a ValueError that names
the argument, and every tensor of the call is byte-identical afterwards. Invalid values (a
position past the block table, a decreasing query_start_loc) are rejected by the native host op
the same way; device kernels cannot raise, test_guard_bands.py covers what they write instead.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from op_table import (HOST_HELPERS, OP_TABLE, Arg, Bad, Call, OpSpec, bad, get_arg, names_pattern, set_arg, takes_none,
                      tensor_keys)
from strategies import assert_same

import specops
from specops import _extension
from specops.ops.registry import OPS

WRONG_INTEGER = (torch.int64, torch.int32, torch.int16)


def _wrong_dtypes(arg: Arg) -> list[torch.dtype]:
    return [next(d for d in WRONG_INTEGER if d not in arg.dtypes), torch.float32]


def _one_dim_less(t: torch.Tensor) -> torch.Tensor:
    if t.dim() == 1:
        return t[0] if t.numel() else torch.zeros((), dtype=t.dtype)
    return t.flatten(0, 1)


def _strided_last_dim(t: torch.Tensor) -> torch.Tensor:
    wide = torch.zeros(*t.shape[:-1], 2 * t.size(-1), dtype=t.dtype)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def _overlapping_rows(t: torch.Tensor) -> torch.Tensor:
    """The same shape with a row stride one below a row's extent."""
    strides = list(t.contiguous().stride())
    strides[0] -= 1
    return torch.zeros(t.numel(), dtype=t.dtype).as_strided(t.shape, strides)


def _replace(key: str, make: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Call], None]:
    def change(call: Call) -> None:
        set_arg(call, key, make(get_arg(call, key)))
    return change


def _derived_cases(spec: OpSpec) -> list[Bad]:
    """dtype, device, rank and layout errors of every tensor argument (and overlapping rows of
    every output that accepts a row stride)."""
    call = spec.valid_call()
    cases = []
    for name, arg in spec.tensors.items():
        tensor = get_arg(call, name)
        if tensor is None and name in spec.exclusive:
            continue  # one of two alternatives the valid call cannot both give; covered by metadata_errors
        assert isinstance(tensor, torch.Tensor), f"{spec.name}: valid_call must give tensor {name}"
        for dtype in () if name in spec.any_dtype else _wrong_dtypes(arg):
            cases.append(Bad(f"{name} {str(dtype).removeprefix('torch.')}", (name,),
                             _replace(name, lambda t, dtype=dtype: t.to(dtype))))
        # An output alone on a device, beside the host copies (every other tensor), is the
        # host-planned form (the sas family: docs/sas_metadata.md), not a device mismatch.
        hosted = set(spec.tensors) - set(spec.outputs) <= set(spec.host_tensors)
        if not (name in spec.outputs and hosted):
            cases.append(Bad(f"{name} on meta", (name,), _replace(name, lambda t: t.to("meta"))))
        if tensor.dim() + 1 not in arg.other_dims:
            cases.append(Bad(f"{name} one dim more", (name,), _replace(name, lambda t: t.unsqueeze(0))))
        # A 0-D tensor (a scalar on the device) has no dimension to drop or stride.
        if tensor.dim() > 0 and tensor.dim() - 1 not in arg.other_dims:
            cases.append(Bad(f"{name} one dim less", (name,), _replace(name, _one_dim_less)))
        if tensor.dim() > 0 and tensor.size(-1) >= 2:
            cases.append(Bad(f"{name} strided last dim", (name,), _replace(name, _strided_last_dim)))
        if name in spec.outputs and arg.row_stride and tensor.size(0) >= 2:
            cases.append(Bad(f"{name} overlapping rows", (name,), _replace(name, _overlapping_rows)))
    return cases


def _cases(kind: str) -> list[tuple[OpSpec, int, str]]:
    out = []
    for spec in OP_TABLE:
        listed = _derived_cases(spec) + spec.metadata_errors() if kind == "metadata" else spec.value_errors()
        out.extend((spec, index, f"{spec.name}-{case.label}") for index, case in enumerate(listed))
    return out


METADATA_CASES = _cases("metadata")
VALUE_CASES = _cases("values")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to the bit: a float buffer overlaid on integers may hold NaNs (a KV cache sharing
    memory with slot indices), which torch.equal never finds equal."""
    if a.is_floating_point():
        return a.dtype == b.dtype and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
    return torch.equal(a, b)


def assert_rejected(spec: OpSpec, case: Bad) -> None:
    """The call with `case` applied raises a ValueError naming case.names, and no tensor of the
    call changes (meta tensors hold nothing to compare)."""
    call = spec.valid_call()
    case.change(call)
    before = {key: get_arg(call, key).clone() for key in tensor_keys(call) if get_arg(call, key).device.type != "meta"}
    with pytest.raises(ValueError) as error:
        spec.wrapper(**call)
    message = str(error.value)
    for name in case.names:
        assert re.search(names_pattern(name), message), f"the error does not name {name}: {message}"
    for key, value in before.items():
        assert _same_bits(get_arg(call, key), value), f"a rejected call wrote {key}"


@pytest.mark.parametrize("spec,index", [(s, i) for s, i, _ in METADATA_CASES], ids=[i for _, _, i in METADATA_CASES])
def test_metadata_errors_on_every_backend(backend, spec, index):
    case = (_derived_cases(spec) + spec.metadata_errors())[index]
    assert_rejected(spec, case)


@pytest.mark.parametrize("spec,index", [(s, i) for s, i, _ in VALUE_CASES], ids=[i for _, _, i in VALUE_CASES])
def test_native_rejects_invalid_values(spec, index):
    with specops.backend("native"):
        assert_rejected(spec, spec.value_errors()[index])


@pytest.mark.parametrize("spec", OP_TABLE, ids=[s.name for s in OP_TABLE])
def test_valid_call_is_accepted(backend, spec):
    """The matrix means something only if the unchanged call passes."""
    spec.wrapper(**spec.valid_call())


# ---------------------------------------------------------------- aliasing: outputs sharing memory

def _sharing_memory(output: torch.Tensor, other: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Contiguous copies of output and other in one buffer, other starting halfway into output
    (at its first byte when output is short), whatever their dtypes. other keeps its values;
    the bytes of output under other hold other's."""
    output_bytes, other_bytes = output.numel() * output.element_size(), other.numel() * other.element_size()
    offset = output_bytes // 2 // 8 * 8
    storage = torch.zeros(max(output_bytes, offset + other_bytes), dtype=torch.uint8).untyped_storage()

    def placed(t: torch.Tensor, byte_offset: int) -> torch.Tensor:
        view = torch.empty(0, dtype=t.dtype).set_(storage, byte_offset // t.element_size(), t.shape,
                                                  t.contiguous().stride())
        view.copy_(t)
        return view

    return placed(output, 0), placed(other, offset)


def _alias_cases() -> list[tuple[OpSpec, str, str]]:
    """Every output against every other tensor of the valid call (each pair of outputs once)."""
    cases = []
    for spec in OP_TABLE:
        call = spec.valid_call()
        present = [key for key in spec.tensors
                   if isinstance(get_arg(call, key), torch.Tensor) and get_arg(call, key).numel()]
        for output in spec.outputs:
            for other in present:
                if other == output or (other in spec.outputs and spec.outputs.index(other) > spec.outputs.index(output)):
                    continue
                cases.append((spec, output, other))
    return cases


ALIAS_CASES = _alias_cases()


def _independent_copy(call: Call) -> Call:
    def copied(value):
        if isinstance(value, list):
            return [copied(item) for item in value]
        return value.clone() if isinstance(value, torch.Tensor) else value
    return {name: copied(value) for name, value in call.items()}


@pytest.mark.parametrize("spec,output,other", ALIAS_CASES,
                         ids=[f"{s.name}-{o}-{i}" for s, o, i in ALIAS_CASES])
def test_outputs_share_memory_only_with_inputs_read_first(backend, spec, output, other):
    """An output overlapping another output, or an input the op reads while it stores, is
    rejected before any write; an input every backend reads in full first (OpSpec.reads_first)
    may overlap, and the result is the one its values give in a buffer of their own."""
    def share(call: Call) -> None:
        output_view, other_view = _sharing_memory(get_arg(call, output), get_arg(call, other))
        set_arg(call, output, output_view)
        set_arg(call, other, other_view)

    if other not in spec.reads_first:
        assert_rejected(spec, Bad(f"{output} sharing {other}", (output, other), share))
        return
    call = spec.valid_call()
    share(call)
    separate = _independent_copy(call)
    spec.wrapper(**separate)
    spec.wrapper(**call)
    for name in spec.outputs:
        assert_same(get_arg(call, name), get_arg(separate, name), f"{name} with {output} sharing {other}")


def _schema_arguments(name: str) -> list:
    return getattr(torch.ops.specops, name).default._schema.arguments


def _scalars(spec: OpSpec) -> list[str]:
    """The wrapper's int arguments: the schema's, unless the spec lists them (a packed int[])."""
    if spec.scalars is not None:
        return list(spec.scalars)
    return [a.name for a in _schema_arguments(spec.name) if str(a.type) == "int"]


def _names(name: str, named: set[str]) -> bool:
    return any(n == name or n.startswith(name + "[") for n in named)


# Where int64 arithmetic on sizes overflows, and where int32 index math stops.
EXTREMES = (0, -1, 2**31 - 1, 2**31, 2**32, 2**62 + 1, 2**63 - 1, -(2**63))


WITH_INTS = [spec for spec in OP_TABLE if _scalars(spec)]


@pytest.mark.parametrize("spec", WITH_INTS, ids=[s.name for s in WITH_INTS])
def test_extreme_scalars_are_rejected_or_handled_alike(spec):
    """Up to three int arguments at once at an extreme: no crash, hang or undefined behaviour
    (the ASan/UBSan run sees the last), a ValueError on the native path wherever a Python check
    rejects, and where every backend accepts, the same outputs."""
    ints = _scalars(spec)

    @settings(max_examples=examples(30))
    @given(changed=st.dictionaries(st.sampled_from(ints), st.sampled_from(EXTREMES), min_size=1, max_size=3))
    def check(changed):
        results = {}
        for backend in BACKENDS:
            call = {**spec.valid_call(), **changed}
            try:
                with specops.backend(backend):
                    spec.wrapper(**call)
                results[backend] = {name: get_arg(call, name) for name in spec.outputs}
            except ValueError as error:
                results[backend] = error
        rejected = {backend for backend, result in results.items() if isinstance(result, ValueError)}
        if rejected - {"native"} and "native" in results:
            assert "native" in rejected, f"Python checks reject {changed}, the native op accepts"
        if "native" in results and "native" not in rejected:
            accepted = [backend for backend in results if backend not in rejected]
            assert accepted == list(results), f"native accepts {changed}, {sorted(rejected)} reject"
            for backend in accepted:
                for name in spec.outputs:
                    assert_same(results[backend][name], results["native"][name], f"{backend} {name} {changed}")

    check()


NON_INTS = (0.5, 7.9, None, "3", True)  # a bool is not an int either (torch's schema reads True as 1)
SCALAR_CASES = [(spec, name, value) for spec in WITH_INTS for name in _scalars(spec) for value in NON_INTS
                if not (value is None and takes_none(spec, name))]


@pytest.mark.parametrize("spec,name,value", SCALAR_CASES,
                         ids=[f"{s.name}-{n}-{v!r}" for s, n, v in SCALAR_CASES])
def test_a_non_int_scalar_is_rejected_on_every_backend(backend, spec, name, value):
    """Once: cp_rank=0.5 gave all PAD on the Python backends, a float num_input_tokens wrote the
    outputs and then raised, a None scalar raised a bare TypeError. Now every backend rejects
    what torch's schema rejects (and a float or None everywhere), naming it, before any write."""
    assert_rejected(spec, bad(f"{name}={value!r}", name, **{name: value}))


def _as_numpy(value):
    if isinstance(value, list):
        return [np.int32(item) for item in value]
    return np.int64(value)


@pytest.mark.parametrize("spec", WITH_INTS, ids=[s.name for s in WITH_INTS])
def test_numpy_ints_are_taken_as_ints(backend, spec):
    """Once: a NumPy num_tokens_padded made the fused op write its outputs and then raise."""
    expected = spec.valid_call()
    spec.wrapper(**expected)
    call = spec.valid_call()
    for name in _scalars(spec):
        call[name] = _as_numpy(call[name])
    spec.wrapper(**call)
    for name in spec.outputs:
        assert_same(get_arg(call, name), get_arg(expected, name), name)


@pytest.mark.parametrize("spec", OP_TABLE, ids=[s.name for s in OP_TABLE])
def test_without_the_extension_only_the_reference_runs(backend, spec, monkeypatch):
    """The checks (each op's Meta kernel) and the argument record come from the extension: without
    it the native and Triton backends say why (the reason import logged), writing nothing, and the
    reference runs on the wrapper's keywords as they are, unchecked, computing what it computes
    with the extension."""
    op = OPS[spec.name]
    expected = spec.valid_call()
    if backend == "reference":
        spec.wrapper(**expected)
    reason = "the native extension is not built (a test's stand-in reason)"
    monkeypatch.setattr(_extension, "EXTENSION", dataclasses.replace(_extension.EXTENSION, loaded=False,
                                                                    error=reason))
    monkeypatch.setattr(op, "select", lambda: op._call_selected_backend)
    call = spec.valid_call()
    before = {key: get_arg(call, key).clone() for key in tensor_keys(call)}
    if backend == "reference":
        spec.wrapper(**call)
        for key in tensor_keys(call):
            assert torch.equal(get_arg(call, key), get_arg(expected, key)), f"{key} differs without the extension"
        return
    with pytest.raises(RuntimeError, match=f"specops.{spec.name}: native backend unavailable: .*stand-in"):
        spec.wrapper(**call)
    for key, value in before.items():
        assert torch.equal(get_arg(call, key), value), f"a refused call wrote {key}"


def test_every_schema_has_a_row():
    schemas = {s.name.removeprefix("specops::") for s in torch._C._jit_get_all_schemas()
               if s.name.startswith("specops::")}
    described = {spec.name for spec in OP_TABLE} | set(HOST_HELPERS)
    missing = sorted(schemas - described)
    assert not missing, f"write tests/op_specs/NAME.py for {missing} (docs/adding_an_op.md; OP_TABLE finds it by name)"
    assert described - schemas == set()


@pytest.mark.parametrize("spec", OP_TABLE, ids=[s.name for s in OP_TABLE])
def test_every_argument_is_covered(spec):
    """Every tensor argument of the schema (each list of tensors: an element) is in the table;
    every int argument of the wrapper has at least one rejected value."""
    named = {name for case in spec.metadata_errors() + spec.value_errors() for name in case.names}
    for argument in _schema_arguments(spec.name):
        kind = str(argument.type)
        if kind in ("Tensor", "Optional[Tensor]"):
            assert argument.name in spec.tensors, f"{spec.name}: tensor argument {argument.name} is not described"
        elif kind == "List[Tensor]":
            assert _names(argument.name, set(spec.tensors)), f"{spec.name}: no element of {argument.name} described"
        elif kind == "List[int]":
            assert spec.scalars is not None, f"{spec.name}: {argument.name} packs ints: list them in OpSpec.scalars"
        else:
            assert kind in ("int", "Optional[int]", "bool", "List[bool]"), \
                f"{spec.name}: argument {argument.name} of type {kind}: describe it"
    for scalar in _scalars(spec):
        assert _names(scalar, named), f"{spec.name}: no rejected value of {scalar}"
