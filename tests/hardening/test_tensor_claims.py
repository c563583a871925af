"""Values that claim to be tensors, and lists that change while a check walks them (hardening
round 5, item 2; docs/hardening.md, "Values that claim to be tensors").

isinstance(value, torch.Tensor) honours __class__: a unittest.mock.MagicMock(spec=torch.Tensor),
which runner tests pass about freely, says it is a tensor and has __index__. FastOp read such a
value as a tensor (a type confusion: the process died), and walked a list's item array while an
item's __class__, run by that isinstance, emptied the list. Now a tensor is one by its type on
both twins (FastOp and PlainOp) and on every backend; a value that only claims to be one is a
ValueError naming the argument, in every kind of argument; a list is walked through a tuple of
its items. `make test-asan` runs this file under AddressSanitizer."""

from __future__ import annotations

import enum
from unittest.mock import MagicMock, NonCallableMagicMock

import numpy as np
import pytest
import torch
from twins import Subclass, outcome, same

import specops
from specops import _fastpath

NATIVE = "native" in specops.available_backends()
needs_native = pytest.mark.skipif(not NATIVE, reason="native extension not built")
I32 = torch.int32


class Claims:
    """An object whose __class__ says torch.Tensor (isinstance agrees), with __index__ and a
    fixed repr (the messages quote it)."""

    @property
    def __class__(self):  # noqa: D401  (what isinstance reads)
        return torch.Tensor

    def __index__(self) -> int:
        return 16

    def __repr__(self) -> str:
        return "<claims to be a tensor>"


def claimants() -> list:
    return [MagicMock(spec=torch.Tensor), NonCallableMagicMock(spec=torch.Tensor), Claims(),
            MagicMock(spec=torch.nn.Parameter)]


CLAIM_IDS = ["MagicMock", "NonCallableMagicMock", "__class__ property", "MagicMock(Parameter)"]


def _entries(name: str):
    generic = getattr(torch.ops.specops, name.split("::")[1]).default._op
    return specops._C.FastOp(name, generic), _fastpath.PlainOp(name, generic)


def _slot_args(**replace) -> list:
    args = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=I32), positions=torch.tensor([0, 17, 5]),
                block_table=torch.tensor([[1, 2], [3, 4]], dtype=I32), block_size=16,
                out=torch.full((5,), 7, dtype=torch.int64), blocks_per_kv_block=1, cp_world_size=1, cp_rank=0,
                cp_interleave=1, idx_mapping=None, num_tokens_padded=4)
    args.update(replace)
    return list(args.values())


def _format_args(**replace) -> list:
    args = dict(slot_mappings=[torch.tensor([0, 17, 35]), torch.tensor([5, -1, 9])], block_sizes=[16, 4],
                num_slots=3, out=[torch.full((3, 2), 7, dtype=I32), torch.full((4, 2), 7, dtype=I32)])
    args.update(replace)
    return list(args.values())


def _max_lens_args(**replace) -> list:
    args = dict(query_start_loc=torch.tensor([0, 3, 4, 9], dtype=I32), seq_lens=torch.tensor([10, 4, 7], dtype=I32),
                num_input_tokens=12, cp_size=2, cp_rank=1, causal=True)
    args.update(replace)
    return list(args.values())


def _positions_args(**replace) -> list:
    table = torch.tensor([[1, 2], [3, 4]], dtype=I32)
    args = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=I32), positions=torch.tensor([0, 17, 5]),
                block_tables=[table, table.clone()], idx_mapping=None, block_sizes=[16, 16], blocks_per_kv_block=[1, 1],
                cp_sharded=[True, False], cp_world_size=1, cp_rank=0, cp_interleave=1, num_blocks=[], slot_mappings=[])
    args.update(replace)
    return list(args.values())


# Every kind of argument FastOp boxes: (op, its arguments with the claimant placed, the argument named).
SLOTS = {
    "tensor": ("specops::compute_slot_mapping", lambda v: _slot_args(positions=v), "positions"),
    "optional tensor": ("specops::compute_slot_mapping", lambda v: _slot_args(idx_mapping=v), "idx_mapping"),
    "int": ("specops::compute_slot_mapping", lambda v: _slot_args(block_size=v), "block_size"),
    "another int": ("specops::compute_slot_mapping", lambda v: _slot_args(cp_rank=v), "cp_rank"),
    "tensor list entry": ("specops::format_slot_mapping_blocks_multi",
                          lambda v: _format_args(slot_mappings=[torch.tensor([0, 17, 35]), v]), "slot_mappings[1]"),
    "int list entry": ("specops::format_slot_mapping_blocks_multi", lambda v: _format_args(block_sizes=[16, v]),
                       "block_sizes[1]"),
    "bool": ("specops::cp_local_max_lens", lambda v: _max_lens_args(causal=v), "causal"),
    "optional tensor, int list returned": ("specops::cp_local_max_lens", lambda v: _max_lens_args(seq_lens=v),
                                           "seq_lens"),
    "bool list entry": ("specops::check_slot_mapping_positions", lambda v: _positions_args(cp_sharded=[True, v]),
                        "cp_sharded[1]"),
}


@needs_native
@pytest.mark.parametrize("claimant", range(len(CLAIM_IDS)), ids=CLAIM_IDS)
@pytest.mark.parametrize("slot", list(SLOTS))
def test_a_value_claiming_to_be_a_tensor_is_a_value_error_on_both_twins(slot, claimant):
    """Not read as a tensor (the process lived on before: a segfault), not handed to torch's
    entry (which gave it to the mock's __torch_function__: a call that wrote nothing and
    raised nothing); the same ValueError from FastOp and PlainOp, naming the argument."""
    name, make, argument = SLOTS[slot]
    value = claimants()[claimant]
    fast, plain = _entries(name)
    fast_args, plain_args = make(value), make(value)
    result = outcome(fast, *fast_args)
    assert outcome(plain, *plain_args) == result
    assert result[0] is ValueError and result[1].startswith(f"{argument} must be "), result
    assert f"got {type(value).__name__} {value!r}" in result[1]
    for args in (fast_args, plain_args):
        assert all((out == 7).all() for out in _outputs(name, args))


def _outputs(name: str, args: list) -> list[torch.Tensor]:
    """The buffers the op would write, filled with 7 by the arguments above."""
    if name == "specops::compute_slot_mapping":
        return [args[4]]
    return list(args[3]) if name == "specops::format_slot_mapping_blocks_multi" else []


@needs_native
@pytest.mark.parametrize("value", [Subclass(torch.tensor([0, 17, 5])),
                                   torch.nn.Parameter(torch.tensor([0, 17, 5]), requires_grad=False)],
                         ids=["subclass", "parameter"])
def test_real_tensor_types_stay_tensors(value):
    """A real subclass and a Parameter are tensors by their type: both twins run the op on them."""
    fast, plain = _entries("specops::compute_slot_mapping")
    fast_args, plain_args = _slot_args(positions=value), _slot_args(positions=value)
    assert outcome(fast, *fast_args) == outcome(plain, *plain_args) == ("returned", None)
    assert fast_args[4].tolist() == plain_args[4].tolist() == [16, 33, 53, -1, 7]


@pytest.mark.parametrize("claimant", range(len(CLAIM_IDS)), ids=CLAIM_IDS)
@pytest.mark.parametrize("argument", ["block_size", "positions", "idx_mapping", "cp_rank"])
def test_every_backend_refuses_a_claimant_and_writes_nothing(backend, argument, claimant):
    out = torch.full((5,), 7, dtype=torch.int64)
    call = dict(query_start_loc=torch.tensor([0, 2, 3], dtype=I32), positions=torch.tensor([0, 17, 5]),
                block_table=torch.tensor([[1, 2], [3, 4]], dtype=I32), block_size=16, out=out, num_tokens_padded=4)
    call[argument] = claimants()[claimant]
    with pytest.raises(ValueError, match=f"^{argument}"):
        specops.compute_slot_mapping(**call)
    assert out.tolist() == [7] * 5


@needs_native
@pytest.mark.parametrize("claimant", range(len(CLAIM_IDS)), ids=CLAIM_IDS)
def test_row_views_refuses_a_claimant_and_rows_below_leaves_it_to_the_caller(claimant):
    value = claimants()[claimant]
    same(specops._C.row_views, _fastpath.plain_row_views, [torch.zeros(4), value], [0, 2, 0, 1])
    assert outcome(specops._C.row_views, [value], [0, 1]) == (ValueError, "tensors[0] must be a tensor")
    assert same(specops._C.rows_below, _fastpath.plain_rows_below, [torch.zeros(4), value], 2) == ("returned", True)


# ------------------------------------------------------------------ lists that change while they are walked


class Emptier:
    """A list entry that empties its list when Python looks at it: through isinstance's
    __class__ (answering `kind`), through its repr, or through __index__."""

    def __init__(self, victim: list, kind: type):
        self.victim, self.kind = victim, kind

    @property
    def __class__(self):
        self.victim.clear()
        return self.kind

    def __index__(self) -> int:
        self.victim.clear()
        return 16

    def __repr__(self) -> str:
        self.victim.clear()
        return "<empties its list>"


def _victim_lists(valid: object, kind: type, entries: int = 64) -> tuple[list, list]:
    """Two lists (one per twin), each [valid, an Emptier answering `kind`, then `entries` times
    valid]: the walk reaches the Emptier with the item array allocated, and would read past it
    freed."""
    lists = []
    for _ in range(2):
        victim: list = []
        victim += [valid, Emptier(victim, kind)] + [valid] * entries
        lists.append(victim)
    return lists[0], lists[1]


@needs_native
@pytest.mark.parametrize("kind", [torch.Tensor, int, object], ids=["claims a tensor", "claims an int", "no claim"])
@pytest.mark.parametrize("argument", ["slot_mappings", "block_sizes"])
def test_a_list_emptied_while_it_is_checked_gives_the_same_outcome_on_both_twins(argument, kind):
    """format_slot_mapping_blocks_multi's tensor list and int list with an entry that clears the
    list when its __class__, __index__ or repr runs: the walk reads the entries it started with
    (no freed item array: a segfault before, and an ASan report), and both twins end alike."""
    fast, plain = _entries("specops::format_slot_mapping_blocks_multi")
    fast_list, plain_list = _victim_lists(torch.tensor([0, 17, 35]) if argument == "slot_mappings" else 16, kind)
    fast_args, plain_args = _format_args(**{argument: fast_list}), _format_args(**{argument: plain_list})
    result = outcome(fast, *fast_args)
    assert outcome(plain, *plain_args) == result
    assert result[0] in (ValueError, RuntimeError), result
    assert fast_list == [] and plain_list == []  # Python ran and emptied each list


@needs_native
def test_a_block_table_list_emptied_while_it_is_checked():
    """The finding itself: gather_block_tables_multi's src_block_tables, an entry whose
    __class__ empties the list (isinstance ran it while FastOp walked the list's items)."""
    fast, plain = _entries("specops::gather_block_tables_multi")
    tables = []
    for _ in range(2):
        victim: list = []
        table = torch.tensor([[1, 2], [3, 4]], dtype=I32)
        victim += [table, Emptier(victim, torch.Tensor)] + [table.clone() for _ in range(64)]
        tables.append(victim)
    args = []
    for victim in tables:
        groups = 66
        args.append([victim, [torch.tensor([2, 2], dtype=I32)] * groups, torch.tensor([1, 0], dtype=I32),
                     [torch.full((2, 2), 9, dtype=I32) for _ in range(groups)], 2, None, [0] * groups, [16] * groups])
    expected, actual = outcome(fast, *args[0]), outcome(plain, *args[1])
    assert expected == actual and expected[0] is ValueError, (expected, actual)
    assert expected[1].startswith("src_block_tables[1] must be a tensor, got Emptier")
    assert all((out == 9).all() for out in args[0][3])


@needs_native
def test_the_numpy_bool_and_int_rules_hold_on_the_tuple_walk():
    """The walk through a tuple keeps what each entry is: NumPy ints and one-element int tensors
    are ints, NumPy bools and bool tensors are not (docs/hardening.md, "Scalar types")."""
    fast, plain = _entries("specops::format_slot_mapping_blocks_multi")
    for sizes, ok in [([np.int64(16), torch.tensor(4)], True), ([16, np.bool_(True)], False),
                      ([16, torch.tensor(True)], False)]:
        result = same(fast, plain, *_format_args(block_sizes=sizes))
        assert (result[0] == "returned") is ok, (sizes, result)


class _Index:
    """An object of a class of its own with __index__: torch's schema would take it."""

    def __index__(self) -> int:
        return 16

    def __repr__(self) -> str:
        return "_Index()"


class _Size(enum.IntEnum):
    SIXTEEN = 16


# What an int argument takes (an int subclass, a NumPy integer, a one-element integer tensor of
# any rank) and what it refuses though it has __index__ (FastOp handed these to torch's entry,
# which truncated a float tensor and raised RuntimeErrors, where the Python backends refuse them).
INTS = [(_Size.SIXTEEN, True), (np.int32(16), True), (np.uint8(16), True), (torch.tensor(16, dtype=torch.uint8), True),
        (torch.tensor([16]), True), (torch.tensor([[16]], dtype=I32), True), (torch.tensor(16.0), False),
        (torch.tensor(16, dtype=torch.complex64), False), (torch.tensor([16, 2]), False), (np.array([16, 2]), False),
        (np.array(16), False), (_Index(), False), (np.float64(16.0), False), (torch.tensor(True), False)]


@pytest.mark.parametrize("index", range(len(INTS)), ids=[repr(value)[:24] for value, _ in INTS])
def test_every_backend_takes_and_refuses_the_same_ints(backend, index):
    value, taken = INTS[index]
    out = torch.full((3,), 7)
    call = (torch.tensor([0, 2, 3], dtype=I32), torch.tensor([0, 17, 5]), torch.tensor([[1, 2], [3, 4]], dtype=I32))
    result = outcome(specops.compute_slot_mapping, *call, value, out=out)
    if taken:
        assert result[0] == "returned" and out.tolist() == [16, 33, 53], result
    else:
        assert result == (ValueError, f"block_size must be an int, got {type(value).__name__} {value!r}")
        assert out.tolist() == [7] * 3
