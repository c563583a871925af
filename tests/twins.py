"""Comparing a native fast-path helper with its plain twin (tests/tooling/test_fastpath*.py)."""

from __future__ import annotations

import array
import collections
import datetime
import decimal
import fractions
import functools
import io
import itertools
import operator
import re
import types

import numpy as np
import torch


class Subclass(torch.Tensor):
    """A tensor subclass with nothing of its own: the helpers take it as the generic entry does."""


def outcome(function, *args, **kwargs):
    try:
        return "returned", function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001  (comparing whatever is raised)
        return type(error), str(error)


def same(native, plain, *args, compare=None, **kwargs):
    """Both give the same outcome: equal results (or compare(native's, plain's)), or the same
    exception type and message."""
    expected, actual = outcome(native, *args, **kwargs), outcome(plain, *args, **kwargs)
    assert expected[0] == actual[0], (expected, actual)
    if expected[0] != "returned":
        assert expected[1] == actual[1]
    elif compare is not None:
        compare(expected[1], actual[1])
    else:
        assert expected[1] == actual[1]
    return expected


def foreign_values() -> list:
    """Values of types the helpers' messages name: the standard library's C types, whose C name
    (tp_name) carries their module ("array.array", "functools.partial", "re.Pattern") where
    type(value).__name__ does not, and NumPy's, Python-level and builtin ones beside them. A
    fresh list each call (some are mutable)."""
    renamed = type("Original", (), {"__repr__": lambda self: "<renamed>"})
    renamed.__name__ = "Renamed"
    return [array.array("i", [1]), functools.partial(int), operator.itemgetter(1), re.compile("a"),
            collections.deque([1]), collections.OrderedDict(a=1), itertools.count(), decimal.Decimal("1.5"),
            datetime.date(2020, 1, 1), memoryview(b"a"), bytearray(b"a"), io.StringIO("a"), slice(1),
            types.SimpleNamespace(a=1), fractions.Fraction(1, 2), np.float64(1.5), np.array([1, 2]), 1.5, "1", b"1",
            {1: 2}, renamed()]


FOREIGN_IDS = [type(value).__name__ for value in foreign_values()]
