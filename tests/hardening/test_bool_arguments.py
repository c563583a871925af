"""Bool arguments: one rule on every backend (docs/hardening.md, "Scalar types").

A bool argument is True or False, a NumPy bool, or a one-element bool tensor: the values
torch's schema reads as the bool they hold. Ints (0 and 1 too), floats, None, strings and other
tensors, which torch's schema would read by their truth value, are a ValueError naming the
argument, before any write. Once FastOp took a 0-d bool tensor and rejected a NumPy bool, the
Python backends the reverse, and the fused op's per-group flags took "no" as True.

Every bool argument of every wrapper, as a whole and (per-group flags) as one entry, on every
backend; the schema's own bools through torch.ops.specops too.
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
import torch
from op_table import OP_TABLE, get_arg, tensor_keys
from strategies import assert_same

import specops

SPECS = {spec.name: spec for spec in OP_TABLE}

# (op, argument, whether the argument takes one entry per group)
BOOL_ARGUMENTS = [
    ("sas_metadata", "has_ori_kv", False),
    ("sas_metadata", "has_cmp_kv", False),
    ("kv_quant_sas_metadata", "has_ori_kv", False),
    ("kv_quant_sas_metadata", "has_cmp_kv", False),
    ("cp_local_metadata", "causal", False),
    ("prepare_spec_decode_inputs", "cp_sharded", True),
    ("prepare_spec_decode_inputs", "slot_mapping_enabled", True),
]
# Bools whose other value the op's valid call does not fit (shift_input_ids sizes the outputs,
# request_indexed_counts needs no rows to correct):
# only their rejected values are tested here, the values they take in the op's own tests.
REJECTED_ONLY = [("expand_parallel_draft_inputs", "shift_input_ids", False),
                 ("prepare_spec_decode_inputs", "request_indexed_counts", False)]
# Schema bools a wrapper computes itself (from soc_version).
COMPUTED = {("sas_metadata", "ascend950"), ("kv_quant_sas_metadata", "ascend950"),
            ("lightning_indexer_metadata", "ascend950")}


def _accepted():
    return [True, False, np.True_, np.False_, torch.tensor(True), torch.tensor([False])]


def _rejected():
    return [1, 0, 2, 1.0, None, "no", "", torch.tensor(1), torch.tensor(0.0), torch.tensor([True, True]),
            np.int64(1)]


def _label(value) -> str:
    return f"{type(value).__name__}:{value!r}"


def _places(name: str, per_group: bool) -> list[tuple[str, int | None]]:
    return [(name, None)] + ([(name, 0), (name, 1)] if per_group else [])


def _with(call: dict, name: str, entry: int | None, value) -> tuple[dict, str]:
    """The call with the argument (or one of its entries) set; the name its error must give."""
    if entry is None:
        call[name] = value
        return call, name
    current = call.get(name, True)
    entries = list(current) if isinstance(current, (list, tuple)) else [current] * len(call["block_tables"])
    entries[entry] = value
    call[name] = entries
    return call, f"{name}[{entry}]"


ACCEPT_CASES = [(op, name, entry, i) for op, name, per_group in BOOL_ARGUMENTS for name, entry in
                _places(name, per_group) for i in range(len(_accepted()))]
REJECT_CASES = [(op, name, entry, i) for op, name, per_group in BOOL_ARGUMENTS + REJECTED_ONLY for name, entry in
                _places(name, per_group) for i in range(len(_rejected()))]


@pytest.mark.parametrize("op,name,entry,index", ACCEPT_CASES,
                         ids=[f"{o}-{n}{'' if e is None else f'[{e}]'}-{_label(_accepted()[i])}"
                              for o, n, e, i in ACCEPT_CASES])
def test_a_boolean_is_taken_as_the_bool_it_holds(backend, op, name, entry, index):
    spec = SPECS[op]
    value = _accepted()[index]
    expected, _ = _with(spec.valid_call(), name, entry, bool(value))
    spec.wrapper(**expected)
    call, _ = _with(spec.valid_call(), name, entry, value)
    spec.wrapper(**call)
    for output in spec.outputs:
        assert_same(get_arg(call, output), get_arg(expected, output), f"{output} with {name} = {value!r}")


@pytest.mark.parametrize("op,name,entry,index", REJECT_CASES,
                         ids=[f"{o}-{n}{'' if e is None else f'[{e}]'}-{_label(_rejected()[i])}"
                              for o, n, e, i in REJECT_CASES])
def test_anything_else_is_rejected_naming_the_argument(backend, op, name, entry, index):
    spec = SPECS[op]
    value = _rejected()[index]
    call, named = _with(spec.valid_call(), name, entry, value)
    before = {key: get_arg(call, key).clone() for key in tensor_keys(call)}
    with pytest.raises(ValueError) as error:
        spec.wrapper(**call)
    assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(named)}(?![A-Za-z0-9_])", str(error.value)), str(error.value)
    for key, tensor in before.items():
        assert torch.equal(get_arg(call, key), tensor), f"a rejected call wrote {key}"


def test_every_bool_of_every_schema_has_cases():
    """A new op with a bool argument needs a row in BOOL_ARGUMENTS."""
    listed = {(op, name) for op, name, _ in BOOL_ARGUMENTS + REJECTED_ONLY}
    for spec in OP_TABLE:
        schema = getattr(torch.ops.specops, spec.name).default._schema
        for argument in schema.arguments:
            if str(argument.type) == "bool" and (spec.name, argument.name) not in COMPUTED:
                assert (spec.name, argument.name) in listed, f"{spec.name}.{argument.name} has no bool cases"
    for op, name, _ in BOOL_ARGUMENTS + REJECTED_ONLY:
        assert name in inspect.signature(SPECS[op].wrapper).parameters, f"{op} takes no {name}"


def _schema_call(op: str, call: dict) -> list:
    """The wrapper's keywords as the schema's positional arguments (ops whose wrapper passes them
    through unchanged)."""
    return [call[argument.name] for argument in getattr(torch.ops.specops, op).default._schema.arguments]


@pytest.mark.parametrize("index", range(len(_accepted())), ids=[_label(v) for v in _accepted()])
def test_the_schema_reads_the_same_booleans(index):
    """torch.ops.specops.cp_local_metadata (torch's parser, as a compiled graph calls it) gives the
    wrapper's result for each accepted value."""
    spec = SPECS["cp_local_metadata"]
    value = _accepted()[index]
    expected = spec.valid_call()
    expected["causal"] = bool(value)
    with specops.backend("native"):
        spec.wrapper(**expected)
    call = spec.valid_call()
    call["causal"] = value
    torch.ops.specops.cp_local_metadata(*_schema_call("cp_local_metadata", call))
    for output in spec.outputs:
        assert_same(get_arg(call, output), get_arg(expected, output), output)
