"""specops._fastpath: every native speed helper beside its plain twin. SPECOPS_FASTPATH=0 selects
the twins for every user in the package (checked in a fresh process: the switch is read once);
each pair gives the same results and the same errors, messages included, on usual and odd
inputs (FastOp and PlainOp: test_fastpath_ops.py); and no other module of the package reaches the
helpers itself."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import NamedTuple
from unittest import mock

import numpy as np
import pytest
import torch
from twins import Subclass, foreign_values, outcome, same

import specops
from specops import _fastpath
from specops.ops.registry import OPS

ROOT = Path(__file__).resolve().parents[2]
NATIVE = "native" in specops.available_backends()
needs_native = pytest.mark.skipif(not NATIVE, reason="native extension not built")

# What a fresh process reports of the helpers every user of the package holds.
_REPORT = """
import importlib, json
from specops import _fastpath as f
buffers, plan, step, registry, cp_local_metadata, pcp_partition, checks = (
    importlib.import_module(f"specops.{name}") for name in (
        "drafting.buffers", "drafting.plan", "drafting.step", "ops.registry", "ops.cp_local_metadata",
        "ops.pcp_partition", "persistent.checks"))
entries = [op.native_entry for op in registry.OPS.values()] + [op.check for op in registry.OPS.values()]
entries += [cp_local_metadata._NATIVE_MAX_LENS, pcp_partition._NATIVE, checks.CHECK_POSITIONS]
helpers = dict(row_views=[f.row_views, buffers.row_views, plan.row_views], items=[f.items, step.items],
               items_each=[f.items_each, step.items_each], rows_below=[f.rows_below, step.rows_below])
arguments = importlib.import_module("specops.arguments")
prepare = importlib.import_module("specops.ops.prepare_spec_decode_inputs")
plain = {name: sorted({h is getattr(f, "plain_" + name) for h in found}) for name, found in helpers.items()}
plain.update(checked_tensor_list=[arguments.checked_tensor_list is arguments.plain_checked_tensor_list],
             group_settings=[arguments.group_settings is arguments.plain_group_settings],
             record_maker=[prepare._RESULT.__name__ == "plain_make"])
print(json.dumps(dict(enabled=f.ENABLED, entries=sorted({type(e).__name__ for e in entries}), plain=plain,
                      selects=sorted({op.select.__name__ for op in registry.OPS.values()}))))
"""

_HELPERS = ("row_views", "items", "items_each", "rows_below", "checked_tensor_list", "group_settings", "record_maker")


# A torch other than the one the extension was built against: the extension is not loaded.
_UNLOADED = 'import torch\ntorch.__version__ = "9.9.9+other"\n'


def _report(switch: str | None, prelude: str = "") -> dict:
    env = {key: value for key, value in os.environ.items() if key != "SPECOPS_FASTPATH"}
    if switch is not None:
        env["SPECOPS_FASTPATH"] = switch
    result = subprocess.run([sys.executable, "-c", prelude + _REPORT], env=env, capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.splitlines()[-1])


@needs_native
@pytest.mark.parametrize("switch, enabled", [("0", False), ("1", True), (None, True)])
def test_the_switch_selects_the_helpers_or_their_plain_twins_for_every_user(switch, enabled):
    report = _report(switch)
    assert report["enabled"] is enabled
    assert report["entries"] == (["FastOp"] if enabled else ["PlainOp"])
    assert report["plain"] == {name: [not enabled] for name in _HELPERS}
    assert report["selects"] == (["select"] if enabled else ["plain_select"])


def test_without_the_extension_every_user_gets_the_plain_twins():
    report = _report("1", _UNLOADED)
    assert report["enabled"] is False
    assert report["entries"] == ["NoneType"]  # no native entry: the wrappers run their Python backends
    assert report["plain"] == {name: [True] for name in _HELPERS}
    assert report["selects"] == ["plain_select"]


def test_this_process_uses_what_the_switch_says():
    expected = NATIVE and os.environ.get("SPECOPS_FASTPATH", "1") != "0"
    assert _fastpath.ENABLED is expected
    assert (_fastpath.row_views is _fastpath.plain_row_views) is not expected
    from specops import arguments

    assert (arguments.group_settings is arguments.plain_group_settings) is not expected
    assert (arguments.checked_tensor_list is arguments.plain_checked_tensor_list) is not expected
    assert all(isinstance(op.native_entry, _fastpath.PlainOp) is not expected
               for op in OPS.values() if op.native_entry is not None)


# Modules that reach specops._C for something other than a fast-path helper: _extension loads it
# (the op registrations); arguments takes checks.h's shared checks from it.
_OTHER_USERS = {"_extension.py", "arguments.py"}


def test_no_other_module_reaches_the_helpers():
    package = ROOT / "python" / "specops"
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative == "_fastpath.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "specops" and \
                    any(alias.name == "_C" for alias in node.names) and relative not in _OTHER_USERS:
                found.append(f"{relative}: from specops import _C")
            if isinstance(node, ast.Attribute) and node.attr in ("FastOp", "row_views", "items", "items_each",
                                                                 "rows_below", "usual_tensor_list",
                                                                 "usual_group_settings", "record_maker") and \
                    isinstance(node.value, ast.Name) and node.value.id == "_C":
                found.append(f"{relative}: _C.{node.attr}")
            if isinstance(node, ast.Attribute) and node.attr == "__new__" and \
                    isinstance(node.value, ast.Name) and node.value.id == "tuple":
                found.append(f"{relative}: tuple.__new__")
    assert not found, "the fast-path helpers are reached through specops._fastpath alone:\n" + "\n".join(found)


# --- each pair, outcome for outcome ---------------------------------------------------------------

class _Index:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        if isinstance(self.value, Exception):
            raise self.value
        return self.value


class _Once(list):
    """An argument passed as a fresh iterator over these items (a one-pass iterable)."""


def _call(function, case: tuple) -> tuple:
    return outcome(function, *(iter(value) if isinstance(value, _Once) else value for value in case))


def _same_views(native: list, plain: list) -> None:
    assert type(native) is type(plain) is list and len(native) == len(plain)
    for a, b in zip(native, plain):
        assert type(a) is type(b) is torch.Tensor
        assert (a.shape, a.stride(), a.dtype, a.data_ptr(), a.storage_offset()) == \
               (b.shape, b.stride(), b.dtype, b.data_ptr(), b.storage_offset())
        assert (a.requires_grad, a.grad_fn, a._is_view(), a.is_inference(), a.is_quantized) == \
               (b.requires_grad, b.grad_fn, b._is_view(), b.is_inference(), b.is_quantized)
        assert torch.equal(a.int_repr(), b.int_repr()) if a.is_quantized else torch.equal(a, b)
        if not a.is_inference() and not a.is_quantized:
            version = a._version
            b.add_(0)
            assert a._version == version + 1  # one version counter, the base's


def _row_view_cases() -> list[tuple]:
    grid = torch.arange(40, dtype=torch.int64).view(10, 4)
    with torch.inference_mode():
        inference = torch.arange(12, dtype=torch.int32).view(6, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_tensor(torch.linspace(0, 1, 12).view(6, 2), 0.1, 3, torch.quint8)
    trained = torch.zeros(5, 2, requires_grad=True)
    return [
        ((grid, grid[:, 2:], grid[0]), [2, 5, 7, 10, 1, 3]),
        ([grid], (0, 0)),
        ([grid, inference, quantized, trained, torch.nn.Parameter(torch.ones(4))], [1, 2, 0, 6, 2, 5, 1, 4, 0, 4]),
        ([grid.as_subclass(Subclass)], [3, 6]),
        (_Once([grid]), _Once([1, 2])),
        ([grid], [np.int64(2), True]),
        ([grid], [torch.tensor(1), _Index(4)]),
        ([], []),
        ([grid], [3, 11]), ([grid], [-1, 2]), ([grid], [4, 3]),
        ([grid], [0]), ([grid], [0, 1, 2]),
        ([grid], [0, 2.0]), ([grid], [2.0, "x"]), ([grid], [0, 2**70]), ([grid], [None, 1]),
        ([grid], [0, np.float64(1)]), ([grid], [_Index(ValueError("no")), 1]), ([grid], [0, torch.tensor(1.5)]),
        ([grid, "grid"], [0, 1, 0, 1]), ([torch.zeros(())], [0, 1]), ([torch.zeros(())], [0, 1.5]),
        (5, [0, 1]), ([grid], 5), (None, None),
    ]


@needs_native
@pytest.mark.parametrize("case", range(len(_row_view_cases())))
def test_row_views_and_its_twin_agree(case):
    arguments = _row_view_cases()[case]
    expected, actual = _call(specops._C.row_views, arguments), _call(_fastpath.plain_row_views, arguments)
    assert expected[0] == actual[0], (expected, actual)
    if expected[0] == "returned":
        _same_views(expected[1], actual[1])
    else:
        assert expected[1] == actual[1]


@needs_native
@pytest.mark.parametrize("args, kwargs", [((), {}), (([],), {}), (([], [], []), {}), (([],), {"bounds": []})])
def test_row_views_calls_of_the_wrong_shape_agree(args, kwargs):
    same(specops._C.row_views, _fastpath.plain_row_views, *args, **kwargs)


class _Loud(dict):
    def __getitem__(self, key):
        if key == "boom":
            raise RuntimeError("boom")
        return super().__getitem__(key)


_MAPPING = {"swa": torch.zeros(3), "dspark": torch.ones(2), 3: "three"}


@needs_native
@pytest.mark.parametrize("mapping, keys", [
    (_MAPPING, ["dspark", "swa", "dspark"]), (_MAPPING, ("swa",)), (_MAPPING, []), (_MAPPING, _Once(["swa", 3])),
    (_MAPPING, "swa"), (_MAPPING, ["swa", "missing"]), (_MAPPING, [["swa"]]), (_MAPPING, 5), (_MAPPING, None),
    ([10, 20, 30], [2, 0]), ([10], [3]), (5, [0]), (_Loud(a=1), ["a", "boom"]),
])
def test_items_and_its_twin_agree(mapping, keys):
    expected = _call(specops._C.items, (mapping, keys))
    actual = _call(_fastpath.plain_items, (mapping, keys))
    assert expected == actual
    if expected[0] == "returned":
        assert all(a is b for a, b in zip(expected[1], actual[1]))


@needs_native
@pytest.mark.parametrize("mapping, key_lists", [
    (_MAPPING, [["dspark", "swa"], [], ("swa",)]), (_MAPPING, []), (_MAPPING, [["missing"]]), (_MAPPING, [5]),
    (_MAPPING, 5), (_MAPPING, ["ab"]), ([10, 20], [[1], [0, 1]]),
])
def test_items_each_and_its_twin_agree(mapping, key_lists):
    same(specops._C.items_each, _fastpath.plain_items_each, mapping, key_lists)


@needs_native
@pytest.mark.parametrize("function", ["items", "items_each"])
@pytest.mark.parametrize("args, kwargs", [((), {}), (({},), {}), (({}, [], []), {}), (({}, []), {"x": 1})])
def test_lookup_calls_of_the_wrong_shape_agree(function, args, kwargs):
    same(getattr(specops._C, function), getattr(_fastpath, f"plain_{function}"), *args, **kwargs)


def _rows_below_cases() -> list[tuple]:
    long = torch.zeros(6, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_tensor(torch.zeros(6), 0.1, 3, torch.quint8)
    return [
        ([long, long[1:], long.t()[0]], 5), ([long, long[2:]], 5), ([long, torch.zeros(())], 0),
        ([long, "short", None, 3], 6), ([long], 7), ([], 5), ((long,), 6), (_Once([long[3:]]), 5),
        ([long.as_subclass(Subclass)], 1), ([torch.nn.Parameter(long)], 6), ([long.to_sparse()], 1),
        ([quantized], 1), ([torch.zeros(5, 0)], 5),
        ([long], True), ([long], np.int64(7)), ([long], _Index(7)), ([long], -(2**63)),
        ([long], "5"), ([long], 5.0), ([long], None), ([long], 2**70), ([long], -(2**70)),
        ([long], _Index(ValueError("no"))), (5, 1), (None, 1),
    ]


@needs_native
@pytest.mark.parametrize("case", range(len(_rows_below_cases())))
def test_rows_below_and_its_twin_agree(case):
    arguments = _rows_below_cases()[case]
    assert _call(specops._C.rows_below, arguments) == _call(_fastpath.plain_rows_below, arguments)


@needs_native
@pytest.mark.parametrize("args, kwargs", [((), {}), (([],), {}), (([], 1, 2), {}), (([],), {"minimum": 1})])
def test_rows_below_calls_of_the_wrong_shape_agree(args, kwargs):
    same(specops._C.rows_below, _fastpath.plain_rows_below, *args, **kwargs)


def test_select_and_its_twin_agree(monkeypatch):
    """An op's select() hands out the entry on the eager native backend, the Python backends'
    call elsewhere, and the registered op while torch.compiler traces (here: its flag, which
    torch.export's non-strict tracing sets; Dynamo folds is_dynamo_compiling() itself)."""
    native, entry, other = object(), object(), object()
    for make in (_fastpath._selector, _fastpath.plain_selector):
        select = make(native, entry, other)
        assert select() is entry
        with specops.backend("reference"):
            assert select() is other
        assert make(native, None, other)() is other  # no entry (no extension): the Python backends' call
        with monkeypatch.context() as patch:
            patch.setattr(torch.compiler, "_is_compiling_flag", True)
            assert select() is native


class _Pair(NamedTuple):
    first: int
    second: list


_MAKE_PAIR = _fastpath.record_maker(_Pair)  # once: a native maker registers its twin with Dynamo


def test_the_helpers_compile_as_their_twins():
    """Dynamo cannot look into a C function: a compiled graph traces each argument-form helper
    and record maker as its twin (torch.compiler.substitute_in_graph), with no graph break."""
    from specops import arguments

    def step(x: torch.Tensor) -> tuple:
        tables = arguments.checked_tensor_list((x, x + 1), "block_tables")
        sizes, per_kv_block, sharded, enabled = arguments.group_settings([16, 32], 1, True, [True, False], len(tables))
        return _MAKE_PAIR((tables[1] * sizes[1] + per_kv_block[0], [sharded, enabled]))

    x = torch.arange(4)
    compiled = torch.compile(step, fullgraph=True, backend="eager")(x)
    eager = step(x)
    assert type(compiled) is type(eager) is _Pair and torch.equal(compiled.first, eager.first)
    assert compiled.second == eager.second == [[True, True], [True, False]]


def test_record_maker_and_its_twin_agree():
    """A wrapper's NamedTuple result: the same type, fields and values (the same objects) from
    both makers."""
    values = (1, [2])
    for make in (_fastpath.record_maker, _fastpath.plain_record_maker):
        record = make(_Pair)(values)
        assert type(record) is _Pair and record == values and record.first == 1 and record.second is values[1]
        assert record._asdict() == {"first": 1, "second": [2]}


@needs_native
@pytest.mark.parametrize("args, kwargs", [(((1, [2]),), {}), (((1, [2], 3),), {}), (((1,),), {}), (([1, [2]],), {}),
                                          ((5,), {}), ((None,), {}), ((), {}),
                                          (((1, [2]), (1, [2])), {}), ((), {"values": (1, [2])})])
def test_the_native_record_maker_and_its_twin_agree(args, kwargs):
    """A call that is not one tuple of every field is the twin's own (TypeError and message included)."""
    native = specops._C.record_maker(_Pair, _fastpath.plain_record_maker(_Pair))
    returned = same(native, _fastpath.plain_record_maker(_Pair), *args, **kwargs)
    if returned[0] == "returned":
        assert type(returned[1]) is _Pair


class _Listed(list):
    """A list subclass: the plain function's own (it may iterate its own way)."""


def _tensor_list_cases() -> list[tuple]:
    a, b = torch.zeros(2), torch.ones(3, dtype=torch.int32)
    return [([a, b],), ((a, b),), ([],), ((),), ([a, None],), ((a, "b"),), ([torch.nn.Parameter(a)],),
            ([a.as_subclass(Subclass)],), ([mock.MagicMock(spec=torch.Tensor)],), (a,), (None,), ("ab",),
            (_Listed([a]),), (iter([a]),), ({0: a},), ([a, 1.5],), ([np.int64(1)],),
            *[([v],) for v in foreign_values()]]


@needs_native
@pytest.mark.parametrize("case", range(len(_tensor_list_cases())))
def test_checked_tensor_list_and_its_twin_agree(case):
    from specops import arguments

    value = _tensor_list_cases()[case][0]
    native = specops._C.usual_tensor_list(arguments.plain_checked_tensor_list)
    returned = same(native, arguments.plain_checked_tensor_list, value, "block_tables",
                    compare=lambda x, y: (type(x) is type(y) is list and len(x) == len(y)
                                          and all(p is q for p, q in zip(x, y)) and x is not value))
    assert returned[0] != "returned" or returned[1] is not value  # a new list, the result's own


@needs_native
@pytest.mark.parametrize("args, kwargs", [((), {}), (([],), {}), (([], "x", 1), {}), (([],), {"name": "x"})])
def test_checked_tensor_list_calls_of_the_wrong_shape_agree(args, kwargs):
    from specops import arguments

    same(specops._C.usual_tensor_list(arguments.plain_checked_tensor_list), arguments.plain_checked_tensor_list,
         *args, **kwargs)


def _group_settings_cases() -> list[tuple]:
    ints, flags = [16, 32], [True, False]
    odd = [(16, 32), np.int64(16), np.int32(2), torch.tensor(16), torch.tensor([16]), 16.0, None, "16", True,
           np.bool_(True), torch.tensor(True), 1, 0, [16, "x"], [np.int64(1)], _Listed([1]), range(2),
           *foreign_values()]
    cases = [(ints, 1, flags, True, 2), (16, 1, True, False, 2), ([16], [1], [True], [False], 1), ([], [], [], [], 0),
             (16, 1, True, True, 0), (16, 1, True, True, -1), (16, 1, True, True, 2**70), (16, 1, True, True, 2**20),
             (16, 1, True, True, True), (16, 1, True, True, np.int64(2)), (16, 1, True, True, 2.0),
             (16, 1, True, True, None)]
    for value in odd:
        cases += [(value, 1, True, True, 2), (16, value, True, True, 2), (16, 1, value, True, 2),
                  (16, 1, True, value, 2)]
    return cases


@needs_native
@pytest.mark.parametrize("case", range(len(_group_settings_cases())))
def test_group_settings_and_its_twin_agree(case):
    from specops import arguments

    args = _group_settings_cases()[case]
    native = specops._C.usual_group_settings(arguments.plain_group_settings)
    returned = same(native, arguments.plain_group_settings, *args, compare=_same_settings)
    if returned[0] == "returned":
        assert all(setting is not given for setting, given in zip(returned[1], args))  # new lists, the call's own


def _same_settings(native: list, plain: list) -> None:
    assert type(native) is type(plain) is list and len(native) == len(plain) == 4
    for x, y in zip(native, plain):
        assert type(x) is type(y) is list and len(x) == len(y) and all(p is q for p, q in zip(x, y))


@needs_native
@pytest.mark.parametrize("args, kwargs", [((), {}), (([16], 1, True, True), {}), (([16], 1, True, True, 1, 2), {}),
                                          (([16], 1, True, True), {"num_groups": 1})])
def test_group_settings_calls_of_the_wrong_shape_agree(args, kwargs):
    from specops import arguments

    same(specops._C.usual_group_settings(arguments.plain_group_settings), arguments.plain_group_settings, *args,
         **kwargs, compare=_same_settings)


@needs_native
def test_the_usual_forms_are_taken_in_c():
    """The forms a runner passes never reach the Python function the helper fronts (else the
    helper would be a detour); every other form does."""
    reached = []

    def plain(*args, **kwargs):
        reached.append(args)
        return "plain"

    tensor_list, group_settings = specops._C.usual_tensor_list(plain), specops._C.usual_group_settings(plain)
    make = specops._C.record_maker(_Pair, plain)
    a = torch.zeros(1)
    assert tensor_list([a], "x") == [a] and tensor_list((a, a), "x") == [a, a] and tensor_list([], "x") == []
    assert group_settings([16, 32], 2, [True, False], True, 2) == [[16, 32], [2, 2], [True, False], [True, True]]
    assert make((1, [2])) == (1, [2]) and not reached
    assert tensor_list([a, None], "x") == group_settings(16, np.int64(2), True, True, 2) == make((1,)) == "plain"
    assert len(reached) == 3
