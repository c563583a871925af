"""prepare_spec_decode_inputs' fast path: `_C.spec_decode_sizes` packs exactly the sizes list the
wrapper's Python packs for every usual form of the arguments and declines (None) every other
form, and the wrapper gives the same results, the same errors and the same backend on both
paths. The Python path is forced by taking the helper away, as a process without the extension
has it."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from spec_decode_cases import PAD, expectation, fresh_outputs, i32
from strategies import assert_same, make_spec_decode_step
from test_prepare_spec_decode_inputs_rejects import BAD_INPUTS, _valid_call
from torch.overrides import TorchFunctionMode

import specops
from specops import _fastpath
from specops.ops.registry import OPS

# The module (specops.ops re-exports the wrapper function under the same name).
wrapper_module = importlib.import_module("specops.ops.prepare_spec_decode_inputs")

pytestmark = pytest.mark.skipif("native" not in specops.available_backends(), reason="native extension not built")

# The helper's positional arguments, in its order.
HELPER_ARGUMENTS = ("block_tables", "slot_mappings", "positions", "seq_lens", "num_tokens_padded", "num_reqs_padded",
                    "cp_world_size", "cp_rank", "cp_interleave", "block_sizes", "blocks_per_kv_block", "cp_sharded",
                    "slot_mapping_enabled")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def native_sizes(arguments: dict):
    return wrapper_module._native_sizes(*(arguments[name] for name in HELPER_ARGUMENTS))


def python_sizes(arguments: dict) -> list:
    """The sizes the wrapper's Python packs (its path for every form the helper declines)."""
    return wrapper_module._op_arguments(query_start_loc=i32([0]), **arguments).sizes


def expected_sizes(arguments: dict) -> list[int]:
    """The layout of specops._spec_decode_sizes, from the arguments' meaning: five scalars, then
    (block_size, blocks_per_kv_block, cp_sharded, slot_mapping_enabled) per group."""
    num_groups = len(arguments["block_tables"])

    def per_group(name):
        value = arguments[name]
        return list(value) if isinstance(value, list) else [value] * num_groups

    tokens, reqs = arguments["num_tokens_padded"], arguments["num_reqs_padded"]
    sizes = [arguments["positions"].numel() if tokens is None else tokens,
             arguments["seq_lens"].numel() if reqs is None else reqs,
             arguments["cp_world_size"], arguments["cp_rank"], arguments["cp_interleave"]]
    for block_size, kv_blocks, sharded, enabled in zip(per_group("block_sizes"), per_group("blocks_per_kv_block"),
                                                       per_group("cp_sharded"), per_group("slot_mapping_enabled")):
        sizes += [block_size, kv_blocks, 1 if sharded else 0, 1 if enabled else 0]
    return sizes


ints = st.one_of(st.integers(-3, 300), st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MIN, INT64_MAX]))


@st.composite
def usual_arguments(draw) -> dict:
    num_groups = draw(st.integers(0, 4))

    def per_group(values):
        return draw(st.one_of(values, st.lists(values, min_size=num_groups, max_size=num_groups)))

    return dict(
        block_tables=[torch.zeros(2, draw(st.integers(1, 3)), dtype=torch.int32) for _ in range(num_groups)],
        # Its own length: the op, not the helper, checks it against the groups.
        slot_mappings=[torch.zeros(draw(st.integers(0, 5)), dtype=torch.int64) for _ in range(draw(st.integers(0, 5)))],
        positions=torch.zeros(draw(st.integers(0, 6)), dtype=torch.int64),
        seq_lens=torch.zeros(draw(st.integers(0, 6)), dtype=torch.int32),
        num_tokens_padded=draw(st.one_of(st.none(), ints)), num_reqs_padded=draw(st.one_of(st.none(), ints)),
        cp_world_size=draw(ints), cp_rank=draw(ints), cp_interleave=draw(ints), block_sizes=per_group(ints),
        blocks_per_kv_block=per_group(ints), cp_sharded=per_group(st.booleans()),
        slot_mapping_enabled=per_group(st.booleans()))


@settings(max_examples=examples(60))
@given(arguments=usual_arguments())
def test_the_helper_packs_what_the_python_packs(arguments):
    sizes = native_sizes(arguments)
    assert sizes == expected_sizes(arguments)
    assert sizes == python_sizes(arguments)
    assert all(type(value) is int for value in sizes), [type(value) for value in sizes]


def _base() -> dict:
    """Usual arguments of two groups (the helper packs them), for one change each below."""
    return dict(block_tables=[torch.zeros(2, 2, dtype=torch.int32), torch.zeros(2, 4, dtype=torch.int32)],
                slot_mappings=[torch.zeros(4, dtype=torch.int64), torch.zeros(4, dtype=torch.int32)],
                positions=torch.zeros(4, dtype=torch.int64), seq_lens=torch.zeros(3, dtype=torch.int32),
                num_tokens_padded=None, num_reqs_padded=None, cp_world_size=2, cp_rank=1, cp_interleave=1,
                block_sizes=[16, 8], blocks_per_kv_block=1, cp_sharded=[True, False], slot_mapping_enabled=True)


class _Subclass(torch.Tensor):
    pass


class _ListSubclass(list):
    pass


def _subclass(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.as_subclass(_Subclass)


# (what, change): each form the wrapper's Python takes (converting it or raising its error).
OTHER_FORMS = [
    ("block_tables tuple", dict(block_tables=(torch.zeros(2, 2, dtype=torch.int32),) * 2)),
    ("block_tables list subclass", dict(block_tables=_ListSubclass([torch.zeros(2, 2, dtype=torch.int32)] * 2))),
    ("block_tables entry None", dict(block_tables=[torch.zeros(2, 2, dtype=torch.int32), None])),
    ("block_tables entry subclass", dict(block_tables=[_subclass(torch.zeros(2, 2, dtype=torch.int32))] * 2)),
    ("block_tables entry Parameter",
     dict(block_tables=[torch.nn.Parameter(torch.zeros(2, 2), requires_grad=False)] * 2)),
    ("slot_mappings None", dict(slot_mappings=None)),
    ("slot_mappings tuple", dict(slot_mappings=(torch.zeros(4, dtype=torch.int64),) * 2)),
    ("slot_mappings entry subclass", dict(slot_mappings=[_subclass(torch.zeros(4, dtype=torch.int64))] * 2)),
    ("positions None", dict(positions=None)),
    ("seq_lens None", dict(seq_lens=None)),
    ("positions subclass", dict(positions=_subclass(torch.zeros(4, dtype=torch.int64)))),
    ("seq_lens a list", dict(seq_lens=[0, 0, 0])),
    ("num_tokens_padded NumPy", dict(num_tokens_padded=np.int64(4))),
    ("num_tokens_padded bool", dict(num_tokens_padded=True)),
    ("num_tokens_padded float", dict(num_tokens_padded=4.0)),
    ("num_tokens_padded past int64", dict(num_tokens_padded=INT64_MAX + 1)),
    ("num_reqs_padded below int64", dict(num_reqs_padded=INT64_MIN - 1)),
    ("num_reqs_padded NumPy", dict(num_reqs_padded=np.int32(3))),
    ("cp_world_size bool", dict(cp_world_size=True)),
    ("cp_world_size NumPy", dict(cp_world_size=np.int64(2))),
    ("cp_rank past int64", dict(cp_rank=2**64)),
    ("cp_rank None", dict(cp_rank=None)),
    ("cp_interleave float", dict(cp_interleave=1.0)),
    ("block_sizes bool", dict(block_sizes=True)),
    ("block_sizes NumPy", dict(block_sizes=np.int64(16))),
    ("block_sizes tuple", dict(block_sizes=(16, 8))),
    ("block_sizes list subclass", dict(block_sizes=_ListSubclass([16, 8]))),
    ("block_sizes short", dict(block_sizes=[16])),
    ("block_sizes long", dict(block_sizes=[16, 8, 4])),
    ("block_sizes entry bool", dict(block_sizes=[16, True])),
    ("block_sizes entry NumPy", dict(block_sizes=[np.int64(16), 8])),
    ("block_sizes entry past int64", dict(block_sizes=[16, 2**63])),
    ("blocks_per_kv_block None", dict(blocks_per_kv_block=None)),
    ("blocks_per_kv_block entry float", dict(blocks_per_kv_block=[1, 1.0])),
    ("cp_sharded int", dict(cp_sharded=1)),
    ("cp_sharded NumPy bool", dict(cp_sharded=np.bool_(True))),
    ("cp_sharded tuple", dict(cp_sharded=(True, False))),
    ("cp_sharded short", dict(cp_sharded=[True])),
    ("cp_sharded entry int", dict(cp_sharded=[True, 0])),
    ("slot_mapping_enabled None", dict(slot_mapping_enabled=None)),
    ("slot_mapping_enabled entry NumPy bool", dict(slot_mapping_enabled=[np.bool_(True), True])),
    # No group reads a per-group value, but the Python judges a tuple's length all the same.
    ("no group, block_sizes tuple",
     dict(block_tables=[], block_sizes=(16,), cp_sharded=True)),
    ("no group, cp_sharded int", dict(block_tables=[], block_sizes=16, cp_sharded=1)),
]


def test_the_base_arguments_are_packed():
    assert native_sizes(_base()) == [4, 3, 2, 1, 1, 16, 1, 1, 1, 8, 1, 0, 1]


@pytest.mark.parametrize("change", [change for _, change in OTHER_FORMS], ids=[what for what, _ in OTHER_FORMS])
def test_the_helper_declines_every_other_form(change):
    assert native_sizes({**_base(), **change}) is None


class _PassThrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_a_torch_function_mode_sees_the_numel_calls():
    # positions.numel() goes through an active mode: the Python makes the call; given sizes
    # make no call, so the helper packs them.
    with _PassThrough():
        assert native_sizes(_base()) is None
        assert native_sizes({**_base(), "num_tokens_padded": 4, "num_reqs_padded": 3})[:2] == [4, 3]


@pytest.fixture
def python_path(monkeypatch):
    """A call that takes the helper away for the rest of the test: the wrapper then packs in
    Python, as without the extension."""
    def take_the_helper_away():
        monkeypatch.setattr(wrapper_module, "_native_sizes", None)
    return take_the_helper_away


def _outcome(call: dict):
    """What the wrapper does with `call`: every tensor it wrote and returned, or the error."""
    written = [call["num_computed_tokens"], call["num_accepted_tokens"]]
    try:
        result = specops.prepare_spec_decode_inputs(**call)
    except (ValueError, RuntimeError) as error:
        return type(error), str(error), [t.tolist() for t in written]
    assert type(result) is specops.SpecDecodeInputs
    if call.get("slot_mappings") is not None:
        assert result.slot_mappings is not call["slot_mappings"]  # the result's own list
        assert all(out is given for out, given in zip(result.slot_mappings, call["slot_mappings"]))
    return [t.tolist() for t in written], result.positions.tolist(), result.seq_lens.tolist(), \
        [t.tolist() for t in result.slot_mappings]


def _cloned(call: dict) -> dict:
    def cloned(value):
        if isinstance(value, (list, tuple)):
            return type(value)(cloned(item) for item in value)
        return value.clone() if isinstance(value, torch.Tensor) else value
    return {key: cloned(value) for key, value in call.items()}


def _outcomes_on_both_paths(call: dict, python_path, monkeypatch):
    """(fast path outcome, what the helper returned, Python path outcome) of the same call."""
    returned = []
    helper = wrapper_module._native_sizes

    def recording(*args):
        returned.append(helper(*args))
        return returned[-1]

    twin = _cloned(call)
    monkeypatch.setattr(wrapper_module, "_native_sizes", recording)
    fast = _outcome(call)
    python_path()
    return fast, returned, _outcome(twin)


# Values in int64 that the op rejects, which the helper packs as they are.
LARGE_VALUES = [
    ("block_sizes", dict(block_sizes=[2**40, 8])),
    ("blocks_per_kv_block", dict(blocks_per_kv_block=2**31)),
    ("num_tokens_padded", dict(num_tokens_padded=2**62)),
    ("num_reqs_padded", dict(num_reqs_padded=INT64_MIN)),
    ("cp_interleave", dict(cp_interleave=-1)),
    ("cp_rank", dict(cp_rank=INT64_MAX)),
]
BOTH_PATHS_BAD_INPUTS = BAD_INPUTS + LARGE_VALUES


@pytest.mark.parametrize("argument,change", BOTH_PATHS_BAD_INPUTS,
                         ids=[f"{a}-{i}" for i, (a, _) in enumerate(BOTH_PATHS_BAD_INPUTS)])
def test_bad_input_raises_the_same_error_on_both_paths(backend, argument, change, python_path, monkeypatch):
    fast, returned, python = _outcomes_on_both_paths({**_valid_call(), **change}, python_path, monkeypatch)
    assert len(returned) == 1
    assert fast == python
    assert isinstance(fast[0], type) and issubclass(fast[0], (ValueError, RuntimeError))
    assert re.search(argument, fast[1]), fast[1]


# Forms the Python converts or names (the helper declines each): the same outcome on both
# paths, and where the form is valid, the result of the usual form.
ODD_CALLS = [
    ("block_tables tuple", dict(block_tables=tuple(_valid_call()["block_tables"]))),
    ("block_sizes tuple", dict(block_sizes=(16, 8))),
    ("block_sizes NumPy", dict(block_sizes=[np.int64(16), np.int32(8)])),
    ("cp_world_size NumPy", dict(cp_world_size=np.int64(1))),
    ("num_tokens_padded NumPy", dict(num_tokens_padded=np.int64(4))),
    ("cp_sharded tuple", dict(cp_sharded=(True, False))),
    ("slot_mappings tuple", dict(slot_mappings=tuple(_valid_call()["slot_mappings"]))),
    ("outputs allocated", dict(positions=None, seq_lens=None, slot_mappings=None)),
    ("cp_rank None (an error)", dict(cp_rank=None)),
    ("block_sizes entry None (an error)", dict(block_sizes=[16, None])),
    ("cp_sharded entry int (an error)", dict(cp_sharded=[True, 2])),
    ("block_sizes short (an error)", dict(block_sizes=[16])),
    ("block_tables entry None (an error)", dict(block_tables=[i32([[1, 2], [3, 4]]), None])),
]


@pytest.mark.parametrize("change", [change for _, change in ODD_CALLS], ids=[what for what, _ in ODD_CALLS])
def test_other_forms_take_the_python_on_both_paths(change, python_path, monkeypatch):
    usual = _outcome(_valid_call())
    fast, returned, python = _outcomes_on_both_paths({**_valid_call(), **change}, python_path, monkeypatch)
    assert returned == [None]
    assert fast == python
    if not isinstance(fast[0], type):
        assert fast == usual


@settings(max_examples=examples(15))
@given(num_reqs=st.integers(0, 8), groups=st.lists(st.sampled_from([(16, 1, True), (4, 2, True), (8, 1, False)]),
                                                    min_size=0, max_size=4),
       cp=st.sampled_from([(1, 0, 1), (2, 1, 1), (4, 3, 2)]), with_idx_mapping=st.booleans(),
       one_value=st.booleans(), padded=st.booleans(), enabled=st.lists(st.booleans(), min_size=4, max_size=4),
       seed=st.integers(0, 2**16))
def test_the_fast_path_matches_the_expectation(num_reqs, groups, cp, with_idx_mapping, one_value, padded, enabled,
                                              seed):
    step = make_spec_decode_step(torch.Generator().manual_seed(seed), num_reqs=num_reqs, num_prev_rows=num_reqs,
                                 max_query_len=4, groups=groups, cp_world_size=cp[0],
                                 with_idx_mapping=with_idx_mapping)
    tokens, reqs = step.num_tokens + 2, num_reqs + 1
    outputs = fresh_outputs(step, tokens, reqs)
    enabled = enabled[: len(groups)]
    expected_step, expected = expectation(step, outputs, *cp, enabled, tokens, reqs)
    # One value for all groups where they share it, else one per group.
    def argument(values):
        return values[0] if one_value and values and len(set(values)) == 1 else list(values)
    returned = []
    helper = wrapper_module._native_sizes
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(wrapper_module, "_native_sizes", lambda *args: returned.append(helper(*args)) or returned[-1])
        result = specops.prepare_spec_decode_inputs(
            *step.correction.args(), step.query_start_loc, step.block_tables, argument(step.block_sizes),
            blocks_per_kv_block=argument(step.blocks_per_kv_block), cp_sharded=argument(step.cp_sharded),
            slot_mapping_enabled=argument(enabled), cp_world_size=cp[0], cp_rank=cp[1], cp_interleave=cp[2],
            idx_mapping=step.idx_mapping, num_tokens_padded=tokens if padded else None,
            num_reqs_padded=reqs if padded else None, **outputs)
    assert returned and returned[0] is not None
    assert_same(step.correction.num_computed_tokens, expected_step.correction.num_computed_tokens)
    assert_same(step.correction.num_accepted_tokens, expected_step.correction.num_accepted_tokens)
    assert_same(result.positions, expected["positions"])
    assert_same(result.seq_lens, expected["seq_lens"])
    for g, (actual, wanted) in enumerate(zip(result.slot_mappings, expected["slot_mappings"], strict=True)):
        assert_same(actual, wanted, f"slot_mappings[{g}]")


def _usual_call_on_the_fast_path() -> dict:
    call = _valid_call()
    assert native_sizes({"slot_mapping_enabled": True, **call}) is not None
    return call


def test_the_fast_path_runs_the_selected_backend(monkeypatch):
    # Eager on the native backend: the op's FastOp.
    calls = []
    op = OPS["prepare_spec_decode_inputs"]
    entry = op.native_entry
    assert isinstance(entry, specops._C.FastOp if _fastpath.ENABLED else _fastpath.PlainOp)
    monkeypatch.setattr(op, "native_entry", lambda *args: calls.append("entry") or entry(*args))
    specops.prepare_spec_decode_inputs(**_usual_call_on_the_fast_path())
    assert calls == ["entry"]
    # The reference backend: the reference, not the native op.
    reference = op.reference
    monkeypatch.setattr(op, "reference", lambda *args: calls.append("reference") or reference(*args))
    with specops.backend("reference"):
        result = specops.prepare_spec_decode_inputs(**_usual_call_on_the_fast_path())
    assert calls == ["entry", "reference"]
    assert result.slot_mappings[0].tolist()[-1] == PAD
    # While torch.export traces without Dynamo: the registered op, as select() gives it.
    native = op._native
    monkeypatch.setattr(op, "_native", lambda *args: calls.append("registered op") or native(*args))
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
    assert op.select() is op._native
    specops.prepare_spec_decode_inputs(**_usual_call_on_the_fast_path())
    assert calls == ["entry", "reference", "registered op"]


WITHOUT_THE_EXTENSION = """
import importlib
import torch
torch.__version__ = "9.9.9+other"   # the extension is not loaded for another torch
import specops

# The module (specops.ops re-exports the wrapper function under the same name).
wrapper_module = importlib.import_module("specops.ops.prepare_spec_decode_inputs")
assert not specops.EXTENSION.loaded and wrapper_module._native_sizes is None
i32 = lambda values: torch.tensor(values, dtype=torch.int32)
with specops.backend("reference"):
    result = specops.prepare_spec_decode_inputs(
        i32([10, 20]), i32([0, 0]), i32([-1, -1]), i32([1]), i32([1]), i32([17, 3]), i32([0, 2, 3]),
        [i32([[1, 2], [3, 4]])], 16, positions=torch.zeros(4, dtype=torch.int64),
        seq_lens=torch.zeros(2, dtype=torch.int32), slot_mappings=[torch.zeros(4, dtype=torch.int64)])
print(result.positions.tolist(), result.slot_mappings[0].tolist())
"""


def test_without_the_extension_the_python_packs(tmp_path):
    result = subprocess.run([sys.executable, "-c", WITHOUT_THE_EXTENSION], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == f"[17, 18, 3, 0] [{2 * 16 + 1}, {2 * 16 + 2}, {3 * 16 + 3}, {PAD}]"
