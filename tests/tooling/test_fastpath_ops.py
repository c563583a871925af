"""FastOp and its plain twin PlainOp (specops._fastpath): the same outcome, results or errors with
their messages, for every kind of argument, every call shape, every schema either refuses, and
every wrapper of the op table."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch
from op_table import OP_TABLE, OpSpec, get_arg, tensor_keys
from torch.overrides import TorchFunctionMode
from twins import FOREIGN_IDS, Subclass, foreign_values, outcome, same

import specops
from specops import _fastpath
from specops.ops.registry import OPS

NATIVE = "native" in specops.available_backends()
needs_native = pytest.mark.skipif(not NATIVE, reason="native extension not built")

SLOT_MAPPING = "specops::compute_slot_mapping"


def _slot_args(**replace):
    args = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=torch.int32), positions=torch.tensor([0, 17, 5]),
                block_table=torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), block_size=16,
                out=torch.full((5,), 7, dtype=torch.int64), blocks_per_kv_block=1, cp_world_size=1, cp_rank=0,
                cp_interleave=1, idx_mapping=None, num_tokens_padded=4)
    args.update(replace)
    return list(args.values())


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _entries(name: str):
    generic = getattr(torch.ops.specops, name.split("::")[1]).default._op
    return specops._C.FastOp(name, generic), _fastpath.PlainOp(name, generic)


def _slot_outcome(entry, args, kwargs, mode):
    """What entry does with the call: out (the fifth argument) afterwards, or the error."""
    if mode:
        with _Mode():
            result = outcome(entry, *args, **kwargs)
    else:
        result = outcome(entry, *args, **kwargs)
    return result[0], args[4].tolist() if result[0] == "returned" else result[1]


@needs_native
@pytest.mark.parametrize("mode", [False, True], ids=["eager", "function-mode"])
@pytest.mark.parametrize("label, replace", [
    ("valid", {}), ("numpy int", dict(block_size=np.int64(16))), ("int tensor", dict(block_size=torch.tensor(16))),
    ("int beyond int64", dict(block_size=2**70)), ("bool for an int", dict(block_size=True)),
    ("numpy bool for an int", dict(block_size=np.bool_(True))), ("bool tensor for an int", dict(cp_rank=torch.tensor(False))),
    ("float", dict(block_size=16.0)), ("None for an int", dict(block_size=None)), ("string", dict(cp_rank="0")),
    ("list for a tensor", dict(positions=[0, 17, 5])), ("None for a tensor", dict(positions=None)),
    ("string for an optional tensor", dict(idx_mapping="0")), ("subclass", dict(positions=torch.tensor([0, 17, 5])
                                                                                 .as_subclass(Subclass))),
    ("parameter", dict(positions=torch.nn.Parameter(torch.tensor([0.0]), requires_grad=False))),
    ("bad value", dict(block_size=0)),
])
def test_fast_op_and_plain_op_agree_on_every_kind_of_argument(label, replace, mode):
    fast, plain = _entries(SLOT_MAPPING)
    assert _slot_outcome(fast, _slot_args(**replace), {}, mode) == _slot_outcome(plain, _slot_args(**replace), {}, mode)


@needs_native
@pytest.mark.parametrize("positional, keywords", [(11, 0), (12, 0), (10, 0), (13, 0), (5, 6), (11, 1)])
def test_fast_op_and_plain_op_agree_on_the_call_shape(positional, keywords):
    """The defaulted argument given or not, one missing or too many, keywords: what the generic
    entry answers (out, the fifth, is always given: the outcome reads it)."""
    names = [argument.name for argument in torch._C._get_schema(SLOT_MAPPING, "").arguments]

    def call():
        full = _slot_args() + [None, None]
        return full[:positional], dict(zip(names[positional:], full[positional:positional + keywords]))

    fast, plain = _entries(SLOT_MAPPING)
    assert _slot_outcome(fast, *call(), False) == _slot_outcome(plain, *call(), False)


FORMAT_MULTI = "specops::format_slot_mapping_blocks_multi"


def _format_args(**replace):
    """format_slot_mapping_blocks_multi's arguments: two groups (tensor lists and an int list)."""
    args = dict(slot_mappings=[torch.tensor([0, 17, 35]), torch.tensor([5, -1, 9])], block_sizes=[16, 4],
                num_slots=3, out=[torch.full((3, 2), 7, dtype=torch.int32), torch.full((4, 2), 7, dtype=torch.int32)])
    args.update(replace)
    return list(args.values())


def _format_outcome(entry, args):
    result = outcome(entry, *args)
    return result[0], [out.tolist() for out in args[3]] if result[0] == "returned" else result[1]


@needs_native
@pytest.mark.parametrize("label, replace", [
    ("valid", {}), ("tuples", dict(block_sizes=(16, 4))), ("numpy ints", dict(block_sizes=[np.int64(16), 4])),
    ("int tensor in an int list", dict(block_sizes=[16, torch.tensor(4)])),
    ("bool in an int list", dict(block_sizes=[16, True])), ("float in an int list", dict(block_sizes=[16, 4.0])),
    ("None in an int list", dict(block_sizes=[None, 4])), ("int for an int list", dict(block_sizes=16)),
    ("tensor for a tensor list", dict(slot_mappings=torch.zeros(3, dtype=torch.int64))),
    ("string in a tensor list", dict(slot_mappings=[torch.zeros(3, dtype=torch.int64), "x"])),
    ("subclass in a tensor list", dict(slot_mappings=[torch.tensor([0, 17, 35]).as_subclass(Subclass),
                                                      torch.tensor([5, -1, 9])])),
    ("list subclass", dict(block_sizes=type("Sizes", (list,), {})([16, 4]))),
    ("empty lists", dict(slot_mappings=[], block_sizes=[], out=[])), ("bad value", dict(block_sizes=[16, 0])),
])
def test_fast_op_and_plain_op_agree_on_list_arguments(label, replace):
    fast, plain = _entries(FORMAT_MULTI)
    assert _format_outcome(fast, _format_args(**replace)) == _format_outcome(plain, _format_args(**replace))


@needs_native
@pytest.mark.parametrize("causal", [True, False, 1, 0, None, "True", np.bool_(True), torch.tensor(False),
                                    torch.tensor([True, False]), torch.tensor(1)])
def test_fast_op_and_plain_op_agree_on_bool_arguments(causal):
    fast, plain = _entries("specops::cp_local_max_lens")
    args = (torch.tensor([0, 3, 4, 9], dtype=torch.int32), torch.tensor([10, 4, 7], dtype=torch.int32), 12, 2, 1,
            causal)
    same(fast, plain, *args)


CHECK_POSITIONS = "specops::check_slot_mapping_positions"


def _check_positions_args(**replace):
    """check_slot_mapping_positions' arguments: two tables, their per-group lists (a bool list among them)."""
    table = torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)
    args = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=torch.int32), positions=torch.tensor([0, 17, 5]),
                block_tables=[table, table.clone()], idx_mapping=None, block_sizes=[16, 16], blocks_per_kv_block=[1, 1],
                cp_sharded=[True, False], cp_world_size=1, cp_rank=0, cp_interleave=1, num_blocks=[], slot_mappings=[])
    args.update(replace)
    return list(args.values())


@needs_native
@pytest.mark.parametrize("label, replace", [
    ("valid", {}), ("tuple", dict(cp_sharded=(True, False))), ("numpy bool", dict(cp_sharded=[np.bool_(True), False])),
    ("bool tensor", dict(cp_sharded=[torch.tensor(True), False])), ("int in a bool list", dict(cp_sharded=[1, False])),
    ("None in a bool list", dict(cp_sharded=[None, False])), ("bool for a bool list", dict(cp_sharded=True)),
    ("short bool list", dict(cp_sharded=[True])),
])
def test_fast_op_and_plain_op_agree_on_bool_lists(label, replace):
    fast, plain = _entries(CHECK_POSITIONS)
    same(fast, plain, *_check_positions_args(**replace))


@needs_native
def test_fast_op_and_plain_op_return_alike():
    fast, plain = _entries("specops::cp_local_max_lens")
    query_start_loc = torch.tensor([0, 3, 4, 9], dtype=torch.int32)
    seq_lens = torch.tensor([10, 4, 7], dtype=torch.int32)
    for args in [(query_start_loc, seq_lens, 12, 2, 1, True), (query_start_loc, None, 9, 4, 0, False),
                 (query_start_loc, seq_lens, 12, 2, 1, 1), (query_start_loc, seq_lens, 12, 2, 7, True)]:
        expected = same(fast, plain, *args)
        if expected[0] == "returned":
            assert type(fast(*args)) is type(plain(*args))


@needs_native
@pytest.mark.parametrize("name", ["specops::no_such_op", "no_namespace", "aten::add", "aten::relu", "aten::clone"])
def test_fast_op_and_plain_op_refuse_the_same_schemas(name):
    same(specops._C.FastOp, _fastpath.PlainOp, name, None)


def _wrapper_outcome(spec: OpSpec, call: dict, entry):
    op = OPS[spec.name]
    saved, op.native_entry = op.native_entry, entry
    try:
        with specops.backend("native"):
            spec.wrapper(**call)
    except Exception as error:  # noqa: BLE001  (comparing whatever is raised)
        return type(error), str(error)
    finally:
        op.native_entry = saved
    return {key: get_arg(call, key).clone() for key in tensor_keys(call) if get_arg(call, key).device.type != "meta"}


@needs_native
@pytest.mark.parametrize("spec", OP_TABLE, ids=[s.name for s in OP_TABLE])
def test_every_wrapper_gives_the_same_outcome_on_either_entry(spec):
    """Each op's wrapper on its valid call and on its bad ones, once through FastOp and once
    through PlainOp: the same tensors afterwards, or the same error."""
    fast, plain = _entries(f"specops::{spec.name}")
    calls = [spec.valid_call()]
    for case in spec.metadata_errors() + spec.value_errors():
        call = spec.valid_call()
        case.change(call)
        calls.append(call)
    for call in calls:
        twin = copy.deepcopy(call)
        expected, actual = _wrapper_outcome(spec, call, fast), _wrapper_outcome(spec, twin, plain)
        if isinstance(expected, tuple):
            assert expected == actual
            continue
        assert isinstance(actual, dict) and expected.keys() == actual.keys(), actual
        assert all(torch.equal(expected[key], actual[key]) for key in expected)


@needs_native
def test_plain_op_messages_name_the_argument():
    """The message is FastOp's (tests/tooling/test_fast_call.py holds FastOp to it)."""
    _, plain = _entries(SLOT_MAPPING)
    with pytest.raises(ValueError, match=re.escape("idx_mapping must be a tensor or None, got str '0'")):
        plain(*_slot_args(idx_mapping="0"))


# ------------------------------------------------------------------ type names in the messages

# Every kind of argument, with a value placed: (op, arguments, the argument the message names).
_FOREIGN_SLOTS = {
    "tensor": (SLOT_MAPPING, lambda v: _slot_args(positions=v), "positions"),
    "optional tensor": (SLOT_MAPPING, lambda v: _slot_args(idx_mapping=v), "idx_mapping"),
    "int": (SLOT_MAPPING, lambda v: _slot_args(block_size=v), "block_size"),
    "tensor list entry": (FORMAT_MULTI, lambda v: _format_args(slot_mappings=[torch.tensor([0, 17, 35]), v]),
                          "slot_mappings[1]"),
    "int list entry": (FORMAT_MULTI, lambda v: _format_args(block_sizes=[16, v]), "block_sizes[1]"),
    "list": (FORMAT_MULTI, lambda v: _format_args(block_sizes=v), "block_sizes"),
    "bool list entry": (CHECK_POSITIONS, lambda v: _check_positions_args(cp_sharded=[True, v]), "cp_sharded[1]"),
}


@needs_native
@pytest.mark.parametrize("index", range(len(FOREIGN_IDS)), ids=FOREIGN_IDS)
@pytest.mark.parametrize("slot", list(_FOREIGN_SLOTS))
def test_fast_op_and_plain_op_name_every_type_alike(slot, index):
    """The refusal quotes type(value).__name__ on both twins ("got array", never "got
    array.array" on one of them), for C types, NumPy's, Python classes and a renamed class."""
    name, make, argument = _FOREIGN_SLOTS[slot]
    value = foreign_values()[index]
    fast, plain = _entries(name)
    result = same(fast, plain, *make(value))
    if hasattr(type(value), "__index__") and slot in ("int", "int list entry"):
        return  # an int to both twins (a NumPy array): torch's entry takes or refuses it
    assert result[0] is ValueError, result
    assert result[1].startswith(f"{argument} must be ") and f", got {type(value).__name__} " in result[1], result


@needs_native
@pytest.mark.parametrize("index", range(len(FOREIGN_IDS)), ids=FOREIGN_IDS)
def test_row_views_and_its_twin_name_a_bound_s_type_alike(index):
    value = foreign_values()[index]
    result = same(specops._C.row_views, _fastpath.plain_row_views, [torch.zeros(4)], [0, value])
    assert result == (TypeError, f"bounds[1] must be an int, got {type(value).__name__}"), result


@pytest.mark.parametrize("index", range(len(FOREIGN_IDS)), ids=FOREIGN_IDS)
def test_every_backend_words_a_foreign_int_alike(backend, index):
    """The wrappers' message for an int argument of another type is the same on every backend
    (FastOp's on the native one, the scalar check's on the Python ones)."""
    value = foreign_values()[index]
    out = torch.full((3,), 7)
    with pytest.raises(ValueError) as raised:
        specops.compute_slot_mapping(torch.tensor([0, 2, 3], dtype=torch.int32), torch.tensor([0, 17, 5]),
                                     torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), value, out=out)
    assert str(raised.value) == f"block_size must be an int, got {type(value).__name__} {value!r}"
    assert out.tolist() == [7] * 3
