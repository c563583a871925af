"""FastOp (csrc/fastpath/fast_call.h): the wrappers' way into the dispatcher behaves as torch's generic
entry (OpOverload._op) does, output for output and error for error, and hands every call it
does not box exactly (tensor subclasses, torch-function modes, NumPy integers) to it. Arguments of
the wrong kind (None or a float for an int, anything but a tensor for a tensor) are a ValueError
naming them, as on the Python backends."""

from __future__ import annotations

import contextlib
import copy
import re

import numpy as np
import pytest
import torch
from op_table import OP_TABLE, OpSpec, get_arg, tensor_keys
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import specops
from specops import _fastpath
from specops.ops.registry import OPS

pytestmark = pytest.mark.skipif("native" not in specops.available_backends(), reason="native extension not built")

SLOT_MAPPING = torch.ops.specops.compute_slot_mapping.default


def _spec_op(spec: OpSpec):
    return OPS[spec.name]


@contextlib.contextmanager
def _generic_entry(spec: OpSpec):
    """Makes the wrapper of `spec` call torch's generic entry instead of its FastOp."""
    op = _spec_op(spec)
    fast = op.native_entry
    op.native_entry = op._native._op
    try:
        yield
    finally:
        op.native_entry = fast


def _outcome(spec: OpSpec, call: dict):
    """What the wrapper does with `call`: every tensor afterwards, or the error it raised."""
    try:
        spec.wrapper(**call)
    except Exception as error:  # noqa: BLE001  (comparing whatever is raised)
        return type(error), str(error)
    return {key: get_arg(call, key).clone() for key in tensor_keys(call) if get_arg(call, key).device.type != "meta"}


def _assert_same_outcome(spec: OpSpec, call: dict) -> None:
    twin = copy.deepcopy(call)
    with specops.backend("native"):
        fast = _outcome(spec, call)
        with _generic_entry(spec):
            generic = _outcome(spec, twin)
    if isinstance(generic, tuple):
        assert fast == generic
        return
    assert isinstance(fast, dict), f"FastOp raised {fast} where the generic entry did not"
    assert fast.keys() == generic.keys()
    for key in fast:
        assert torch.equal(fast[key], generic[key]), key


@pytest.mark.parametrize("spec", OP_TABLE, ids=[s.name for s in OP_TABLE])
def test_every_wrapper_takes_the_entry_the_switch_selects(spec):
    # FastOp, or under SPECOPS_FASTPATH=0 its plain twin (specops._fastpath.PlainOp).
    expected = specops._C.FastOp if _fastpath.ENABLED else _fastpath.PlainOp
    assert type(_spec_op(spec).native_entry) is expected


@pytest.mark.parametrize("spec", OP_TABLE, ids=[s.name for s in OP_TABLE])
def test_fast_and_generic_entries_agree(spec):
    _assert_same_outcome(spec, spec.valid_call())
    for case in spec.metadata_errors() + spec.value_errors():
        call = spec.valid_call()
        case.change(call)
        _assert_same_outcome(spec, call)


def _slot_args(**replace):
    out = torch.full((5,), 7, dtype=torch.int64)
    args = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=torch.int32),
                positions=torch.tensor([0, 17, 5]), block_table=torch.tensor([[1, 2], [3, 4]], dtype=torch.int32),
                block_size=16, out=out, blocks_per_kv_block=1, cp_world_size=1, cp_rank=0, cp_interleave=1,
                idx_mapping=None, num_tokens_padded=4)
    args.update(replace)
    return list(args.values())


def _fast_slot_mapping():
    return specops._C.FastOp("specops::compute_slot_mapping", SLOT_MAPPING._op)


EXPECTED = [16, 33, 53, -1, 7]  # row 0: 0 -> block 1, 17 -> block 2 slot 1; row 1: 5 -> block 3 slot 5; PAD; untouched


def test_fast_op_writes_in_place():
    args = _slot_args()
    _fast_slot_mapping()(*args)
    assert args[4].tolist() == EXPECTED


@pytest.mark.parametrize("label,replace", [
    ("int beyond int64", dict(block_size=2**70)),
    ("tensor for an int", dict(block_size=torch.tensor(16))),
    ("numpy int", dict(block_size=np.int64(16))),
])
def test_arguments_it_does_not_box_get_torchs_own_answer(label, replace):
    """Such calls go down the generic path: torch accepts or rejects them exactly as it would."""
    fast_args, generic_args = _slot_args(**replace), _slot_args(**replace)
    try:
        SLOT_MAPPING._op(*generic_args)
    except Exception as error:  # noqa: BLE001
        with pytest.raises(type(error)) as raised:
            _fast_slot_mapping()(*fast_args)
        assert str(raised.value) == str(error)
    else:
        _fast_slot_mapping()(*fast_args)
        assert fast_args[4].tolist() == generic_args[4].tolist()


@pytest.mark.parametrize("label,replace,message", [
    ("float block_size", dict(block_size=16.0), "block_size must be an int, got float 16.0"),
    ("None block_size", dict(block_size=None), "block_size must be an int, got None"),
    ("list for a tensor", dict(positions=[0, 17, 5]), "positions must be a tensor, got list [0, 17, 5]"),
    ("None for a tensor", dict(positions=None), "positions must be a tensor, got None"),
    ("string for an optional tensor", dict(idx_mapping="0"), "idx_mapping must be a tensor or None, got str '0'"),
])
def test_arguments_of_the_wrong_kind_are_a_value_error_naming_them(label, replace, message):
    """torch rejects these with a RuntimeError (or takes None for an undefined tensor and fails
    later with "tensor does not have a device"); the wrappers say which argument, as the Python
    backends do, and write nothing."""
    args = _slot_args(**replace)
    with pytest.raises(ValueError, match=re.escape(message)):
        _fast_slot_mapping()(*args)
    assert args[4].tolist() == [7] * 5


def test_missing_arguments_get_torchs_own_error():
    with pytest.raises(Exception) as generic:
        SLOT_MAPPING._op(*_slot_args()[:-1])
    with pytest.raises(type(generic.value)) as fast:
        _fast_slot_mapping()(*_slot_args()[:-1])
    assert str(fast.value) == str(generic.value)


class _RecordingTensor(torch.Tensor):
    calls: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls.append(func)
        return super().__torch_function__(func, types, args, kwargs or {})


def test_tensor_subclass_sees_its_torch_function():
    args = _slot_args()
    args[1] = args[1].as_subclass(_RecordingTensor)
    _RecordingTensor.calls.clear()
    _fast_slot_mapping()(*args)
    assert SLOT_MAPPING in _RecordingTensor.calls
    assert args[4].tolist() == EXPECTED


class _RecordingFunctionMode(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


class _RecordingDispatchMode(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode_type", [_RecordingFunctionMode, _RecordingDispatchMode])
def test_modes_see_the_call(mode_type):
    """A torch-function mode sends the call down the generic path; a dispatch mode sees it
    from the dispatcher, as it does any op's."""
    args = _slot_args()
    with mode_type() as mode:
        _fast_slot_mapping()(*args)
    assert mode.seen == [SLOT_MAPPING]
    assert args[4].tolist() == EXPECTED


def test_fake_tensors_run_the_fake_kernel():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in _slot_args()]
        _fast_slot_mapping()(*args)
        args[3] = 0
        with pytest.raises(ValueError, match="block_size"):
            _fast_slot_mapping()(*args)


def test_int_list_returns_match_the_generic_entry():
    generic_entry = torch.ops.specops.cp_local_max_lens.default._op
    fast = specops._C.FastOp("specops::cp_local_max_lens", generic_entry)
    query_start_loc = torch.tensor([0, 3, 4, 9], dtype=torch.int32)
    seq_lens = torch.tensor([10, 4, 7], dtype=torch.int32)
    for args in [(query_start_loc, seq_lens, 12, 2, 1, True), (query_start_loc, None, 9, 4, 0, False)]:
        expected = generic_entry(*args)
        assert fast(*args) == expected
        assert type(fast(*args)) is type(expected)


def test_unconvertible_returns_are_refused():
    with pytest.raises(ValueError, match="returns a Tensor"):
        specops._C.FastOp("aten::relu", torch.ops.aten.relu.default._op)


def _slot_outcome(entry, args):
    try:
        entry(*args)
    except Exception as error:  # noqa: BLE001  (comparing whatever is raised)
        return type(error), str(error)
    return args[4].tolist()


@pytest.mark.parametrize("value", [0, 1, -1, 2**30 - 1, 2**30, -(2**30), 2**30 + 1, 2**31 + 5, -(2**62), 2**63 - 1,
                                   -(2**63)])
def test_ints_of_every_size_are_read_as_the_generic_entry_reads_them(value):
    """Small ints are read from their one digit, larger ones through CPython's conversion: the
    same value either way (the slots, or the message quoting the value)."""
    expected = _slot_outcome(SLOT_MAPPING._op, _slot_args(block_size=value))
    assert _slot_outcome(_fast_slot_mapping(), _slot_args(block_size=value)) == expected
    assert expected != [7] * 5  # the value was read: written, or quoted in a refusal


def test_keyword_arguments_get_torchs_own_answer():
    """FastOp takes the schema's arguments positionally; a keyword call goes down the generic path."""
    names = [argument.name for argument in SLOT_MAPPING._schema.arguments]
    args = _slot_args()
    keywords = dict(zip(names[4:], args[4:]))
    _fast_slot_mapping()(*args[:4], **keywords)
    assert args[4].tolist() == EXPECTED


class _NestedCallMode(TorchDispatchMode):
    """Calls a second op through FastOp from inside the first one's dispatch, as a mode's Python may."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if self.inner is not None:
            inner, self.inner = self.inner, None
            _fast_slot_mapping()(*inner)
        return func(*args, **(kwargs or {}))


def test_a_call_from_inside_a_call_gets_its_own_stack():
    """The boxed stack is reused from call to call; a call made while another is in flight must
    not disturb the outer call's arguments."""
    inner = _slot_args(positions=torch.tensor([1, 2, 3]))
    outer = _slot_args()
    with _NestedCallMode(inner):
        _fast_slot_mapping()(*outer)
    assert outer[4].tolist() == EXPECTED
    assert inner[4].tolist() == [17, 18, 51, -1, 7]  # row 0: 1, 2 -> block 1; row 1: 3 -> block 3
    _fast_slot_mapping()(*outer)  # and the pooled stacks are usable again afterwards
    assert outer[4].tolist() == EXPECTED
