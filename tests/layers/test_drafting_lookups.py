"""The drafting step's per-group lookups (specops._fastpath: items, items_each, rows_below), the
native helpers and their plain twins: both against the comprehension and the check they replace,
on good and bad input (tests/tooling/test_fastpath.py holds each pair to the same outcome)."""

from __future__ import annotations

import pytest
import torch

import specops
from specops import _fastpath

NATIVE = "native" in specops.available_backends()
IMPLEMENTATIONS = [pytest.param((_fastpath.plain_items, _fastpath.plain_items_each, _fastpath.plain_rows_below),
                                id="python")]
if NATIVE:
    IMPLEMENTATIONS.append(pytest.param((specops._C.items, specops._C.items_each, specops._C.rows_below),
                                        id="native"))


class _Subclass(torch.Tensor):
    pass


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_items_are_the_values_by_key_and_a_missing_key_is_its_key_error(implementation):
    items, items_each, _ = implementation
    tensors = {"swa": torch.zeros(3), "dspark": torch.ones(2), "full": torch.arange(4)}
    found = items(tensors, ["dspark", "swa", "dspark"])
    assert isinstance(found, list) and len(found) == 3
    assert found[0] is tensors["dspark"] and found[1] is tensors["swa"] and found[2] is tensors["dspark"]
    assert items(tensors, ()) == []
    nested = items_each(tensors, [["full"], ["swa", "dspark"], []])
    assert nested == [[tensors["full"]], [tensors["swa"], tensors["dspark"]], []]
    assert all(type(values) is list for values in nested)
    assert items_each(tensors, []) == []
    with pytest.raises(KeyError) as missing:
        items(tensors, ["swa", "c4"])
    assert missing.value.args == ("c4",)
    with pytest.raises(KeyError) as missing:
        items_each(tensors, [["swa"], ["full", "c128"]])
    assert missing.value.args == ("c128",)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_rows_below_never_misses_a_tensor_that_may_be_short(implementation):
    rows_below = implementation[2]
    long = torch.zeros(8, 2, dtype=torch.int64)
    for short in (long[:4], torch.tensor(3), long[:0], torch.zeros(4).as_subclass(_Subclass)):
        assert rows_below([long, short, long], 5) is True
    assert rows_below(["not a tensor", None], 5) is False  # the op rejects those itself
    assert rows_below([], 0) is False


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_rows_below_passes_long_enough_tensors_and_bad_arguments_are_refused(implementation):
    items, items_each, rows_below = implementation
    long = torch.zeros(8, 2, dtype=torch.int64)
    assert rows_below([long, long[3:], long.t()[0]], 5) is False
    assert rows_below([long, torch.zeros(5, 0)], 5) is False
    assert rows_below([long[:4]], 5) is True
    with pytest.raises(TypeError, match="2 positional arguments"):
        rows_below([long])
    with pytest.raises(TypeError, match="values must be a sequence"):
        rows_below(5, 1)
    with pytest.raises(TypeError):
        rows_below([long], "5")
    with pytest.raises(TypeError, match="2 positional arguments"):
        items({})
    with pytest.raises(TypeError, match="keys must be a sequence"):
        items({}, 3)
    with pytest.raises(TypeError, match="key_lists must be a sequence"):
        items_each({}, 3)
