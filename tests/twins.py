"""Comparing a native fast-path helper with its plain twin (tests/tooling/test_fastpath*.py)."""

from __future__ import annotations

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
