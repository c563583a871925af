"""The vLLM plugin's frame without vLLM (docs/integrations.md, "Releases", "Fingerprints"): a
stand-in runner package written into a temporary folder, release rows keyed by it, points that
patch its functions. What is tested: fingerprints from the code (comments and docstrings kept
out, any change in what the code does and any wrapper let in), the row chosen for the packages
present, points standing alone (one skipped with its warning, the others patched; a point
skipped with the point it needs; all or nothing inside a point), the report `python -m specops`
prints, and the fingerprints tool."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import sys
import textwrap

import pytest

from specops.integrations.vllm import apply, evaluate
from specops.integrations.vllm._frame import Patch, Point, Release, Runner
from specops.integrations.vllm._guard import fingerprint, fingerprint_of

_OPS = '''
"""The stand-in runner's functions."""


def double(x):
    """Twice x."""
    return x * 2  # the doubling


def triple(x, *, scale=1):
    return x * 3 * scale


class Table:
    def __init__(self, width):
        # The attribute the adapters read.
        self.width = width

    def fill(self, value):
        return [value] * self.width
'''


@pytest.fixture
def runner(tmp_path, monkeypatch):
    """A package `fakerunner` (version 1.0) with `ops` and `user` (which binds `double` by name)."""

    def write(name: str, files: dict[str, str]) -> None:
        (tmp_path / name).mkdir()
        for file, text in files.items():
            (tmp_path / name / file).write_text(textwrap.dedent(text))

    write("fakerunner", {"__init__.py": "", "version.py": "__version__ = '1.0'\n", "ops.py": _OPS,
                         "user.py": "from fakerunner.ops import double\n"})
    write("fakeaddon", {"__init__.py": "", "version.py": "__version__ = '2.0'\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0] in ("fakerunner", "fakeaddon", "fp_variant")]:
        del sys.modules[name]


def _module(tmp_path, name: str, text: str):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    __import__(name)
    return sys.modules[name]


_BASE = '''
def step(x, y=1):
    """Advance."""
    total = x + y  # one step
    return total
'''


@pytest.mark.parametrize("variant, same", [
    (_BASE, True),
    # A comment and a docstring changed, blank lines and a line break added: the same code.
    ('''
def step(x,
         y=1):
    """Advance by one step (reworded)."""

    # Added comment.
    total = x + y  # a different comment
    return total
''', True),
    ('''
def step(x, y=1):
    total = x + y
    return total
''', True),  # the docstring removed
    ('''
def step(x, y=2):
    """Advance."""
    total = x + y
    return total
''', False),  # a default
    ('''
def step(x, y=1):
    """Advance."""
    total = x - y
    return total
''', False),  # an operator
    ('''
def step(x, y: int = 1):
    """Advance."""
    total = x + y
    return total
''', False),  # an annotation
    ('''
import functools


@functools.lru_cache
def step(x, y=1):
    """Advance."""
    total = x + y
    return total
''', False),  # a decorator
])
def test_fingerprints_follow_the_code_not_its_text(runner, variant, same):
    base = _module(runner, "fp_variant_base", _BASE).step
    other = _module(runner, f"fp_variant_{abs(hash(variant))}", variant).step
    assert (fingerprint_of(base) == fingerprint_of(other)) is same


def test_a_wraps_wrapper_fails_the_fingerprint(runner):
    """A target another plugin wrapped with functools.wraps: inspect.unwrap (and so inspect's source
    and signature) sees the original; the fingerprint sees the wrapper."""
    import fakerunner.ops as ops

    original = ops.double

    @functools.wraps(original)
    def wrapper(x):
        return original(x) + 1

    assert inspect.getsource(wrapper) == inspect.getsource(original)  # what unwrap would hash
    assert inspect.signature(wrapper) == inspect.signature(original)
    before = fingerprint("fakerunner.ops:double")
    ops.double = wrapper
    assert fingerprint("fakerunner.ops:double") != before


def test_a_launcher_object_is_fingerprinted_with_its_kind(runner):
    """A dispatcher object holding the function (as vLLM's kernel launchers do, update_wrapper
    and all) is one layer: its fingerprint is stable, and not the bare function's."""
    import fakerunner.ops as ops

    class Launcher:
        def __init__(self, function):
            functools.update_wrapper(self, function)

        def __getattr__(self, name):  # forwards what it lacks, as vLLM's launcher does
            return getattr(ops, name)

    assert fingerprint_of(Launcher(ops.triple)) == fingerprint_of(Launcher(ops.triple))
    assert fingerprint_of(Launcher(ops.triple)) != fingerprint_of(ops.triple)


def test_a_class_target_is_its_init(runner):
    import fakerunner.ops as ops

    assert fingerprint("fakerunner.ops:Table") == fingerprint_of(ops.Table.__init__)
    assert fingerprint("fakerunner.ops:Table") != fingerprint("fakerunner.ops:Table.fill")


def _fake() -> Runner:
    return Runner("fakerunner", "1.0", label="Fake", version_attr="fakerunner.version:__version__")


def _adding(amount):
    def make(original):
        def adapter(x, *args, **kwargs):
            return original(x, *args, **kwargs) + amount
        return adapter
    return make


def _points():
    return (Point("p_double", (Patch("fakerunner.ops:double", _adding(100)),), importers=("fakerunner.user",)),
            Point("p_triple", (Patch("fakerunner.ops:triple", _adding(1000)),), reads=("fakerunner.ops:Table",)),
            Point("p_fill", (Patch("fakerunner.ops:Table.fill", _adding_list()),), needs=("p_triple",)))


def _adding_list():
    def make(original):
        def fill(self, value):
            return original(self, value) + ["specops"]
        return fill
    return make


def _row(runners, points=None, drop=()) -> Release:
    points = _points() if points is None else points
    prints = {t: fingerprint(t) for p in points for t in p.targets if t not in drop}
    return Release(runners, points, prints)


NAMES = ("p_double", "p_triple", "p_fill")


@pytest.fixture
def names(monkeypatch):
    import specops.integrations.vllm as plugin

    monkeypatch.setattr(plugin, "POINT_NAMES", NAMES)
    return NAMES


def test_every_point_patched_on_the_release_s_row(runner, names, caplog):
    import fakerunner.ops as ops
    import fakerunner.user as user

    with caplog.at_level(logging.WARNING):
        state = apply({"SPECOPS_VLLM": "1"}, (_row((_fake(),)),))
    assert state.active and state.points == names and state.release == "Fake 1.0"
    assert caplog.records == []
    assert ops.double(1) == 102 and user.double(1) == 102  # rebound where imported by name too
    assert ops.triple(1) == 1003 and ops.Table(2).fill(0) == [0, 0, "specops"]


def test_an_unsupported_release_patches_nothing_and_warns_once_naming_it(runner, names, caplog):
    import fakerunner.ops as ops

    rows = tuple(_row((Runner("fakerunner", version, label="Fake", version_attr="fakerunner.version:__version__"),))
                 for version in ("0.9", "1.1"))
    with caplog.at_level(logging.WARNING):
        state = apply({"SPECOPS_VLLM": "1"}, rows)
    assert not state.active and ops.double(1) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "specops: patched nothing: Fake 1.0 is not supported (supported: Fake 0.9; Fake 1.1)"]


def test_the_row_is_keyed_by_every_runner_package_present(runner, names):
    addon = Runner("fakeaddon", "2.0", version_attr="fakeaddon.version:__version__")
    alone, both = _row((_fake(),), _points()[:1]), _row((addon, _fake()), _points()[1:2])
    assert both.key == "fakeaddon 2.0 + fakerunner 1.0"
    assert evaluate({"SPECOPS_VLLM": "1"}, (alone, both))[0].release == "fakeaddon 2.0 + Fake 1.0"
    # An installed package some row names counts: the row without it does not apply.
    assert evaluate({"SPECOPS_VLLM": "1"}, (alone, _row((dataclasses.replace(addon, version="3.0"), _fake()), ())))[0].reason == (
        "patched nothing: Fake 1.0 + fakeaddon 2.0 is not supported (supported: Fake 1.0; fakeaddon 3.0 + Fake 1.0)")
    # A package no installed copy of which exists does not count.
    absent = Runner("fakeabsent", "2.0")
    assert evaluate({"SPECOPS_VLLM": "1"}, (alone, _row((absent, _fake()), ())))[0].release == "Fake 1.0"


def test_a_point_with_a_changed_target_is_skipped_alone_and_the_point_needing_it_with_it(runner, names, caplog):
    import fakerunner.ops as ops

    row = _row((_fake(),))
    row = Release(row.runners, row.points, dict(row.fingerprints, **{"fakerunner.ops:triple": "0" * 20}))
    with caplog.at_level(logging.WARNING):
        state = apply({"SPECOPS_VLLM": "1"}, (row,))
    assert state.points == ("p_double",) and ops.double(1) == 102 and ops.triple(1) == 3
    assert ops.Table(2).fill(0) == [0, 0]
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("specops: point p_triple: fakerunner.ops:triple differs")
    assert messages[1] == "specops: point p_fill needs p_triple (skipped)"
    assert [(s.name, s.state) for s in state.states] == [("p_double", "active"), ("p_triple", "skipped"),
                                                         ("p_fill", "skipped")]


def test_a_missing_target_or_a_missing_fingerprint_skips_its_point(runner, names, caplog):
    points = (Point("p_double", (Patch("fakerunner.ops:double", _adding(100)),)),
              Point("p_triple", (Patch("fakerunner.gone:triple", _adding(1000)),)),
              Point("p_fill", (Patch("fakerunner.ops:Table.fill", _adding_list()),)))
    row = _row((_fake(),), points, drop=("fakerunner.gone:triple", "fakerunner.ops:Table.fill"))
    state, warnings = evaluate({"SPECOPS_VLLM": "1"}, (row,))
    assert state.points == ("p_double",)
    assert "fakerunner.gone:triple cannot be read (ModuleNotFoundError" in warnings[0]
    assert "fakerunner.ops:Table.fill has no fingerprint" in warnings[1]


def test_inside_a_point_it_is_all_or_nothing(runner, names, caplog):
    import fakerunner.ops as ops

    def broken(original):
        raise RuntimeError("this adapter cannot be made")

    points = (Point("p_double", (Patch("fakerunner.ops:double", _adding(100)),
                                 Patch("fakerunner.ops:triple", broken))),)
    with caplog.at_level(logging.WARNING):
        state = apply({"SPECOPS_VLLM": "p_double"}, (_row((_fake(),), points),))
    assert not state.active and ops.double(1) == 2 and ops.triple(1) == 3
    assert "point p_double could not be installed (RuntimeError: this adapter cannot be made)" in caplog.text


def test_the_report_lists_every_point(runner, names):
    from specops.integrations.vllm import _point_lines

    row = _row((_fake(),))
    row = Release(row.runners, row.points, dict(row.fingerprints, **{"fakerunner.ops:triple": "0" * 20}))
    state, _ = evaluate({"SPECOPS_VLLM": "p_double,p_triple"}, (row,))
    lines = _point_lines(state.states).splitlines()
    assert lines[0].split() == ["p_double", "active"]
    assert lines[1].startswith("p_triple  skipped: point p_triple: fakerunner.ops:triple differs")
    assert lines[2].split() == ["p_fill", "off"]


def test_a_point_the_release_does_not_serve(runner, names):
    row = _row((_fake(),), _points()[:1])
    state, warnings = evaluate({"SPECOPS_VLLM": "p_double,p_triple"}, (row,))
    assert state.points == ("p_double",) and warnings == ["Fake 1.0 has no p_triple point"]
    state, warnings = evaluate({"SPECOPS_VLLM": "all"}, (row,))  # every point the release has
    assert state.points == ("p_double",) and warnings == []


def test_the_fingerprints_tool_lists_targets_and_the_row_to_add(runner, names):
    from specops.integrations.vllm.__main__ import fingerprints_report

    old = Runner("fakerunner", "0.9", label="Fake", version_attr="fakerunner.version:__version__")
    points = _points() + (Point("p_gone", (Patch("fakerunner.gone:f", _adding(1)),)),)
    prints = {t: fingerprint(t) for p in _points() for t in p.targets}
    prints["fakerunner.ops:triple"] = "0" * 20  # changed since that release
    report = fingerprints_report((Release((old,), points, prints),)).splitlines()
    assert report[0] == "# Fake 1.0: every target of every point the release table knows"
    assert f"same     fakerunner.ops:double  {prints['fakerunner.ops:double']}  (as in fakerunner 0.9)" in report
    assert any(line.startswith("changed  fakerunner.ops:triple ") for line in report)
    assert any(line.startswith("missing  fakerunner.gone:f  (ModuleNotFoundError") for line in report)
    assert "#   p_gone (as in fakerunner 0.9): fakerunner.gone:f missing" in report
    assert "    'fakerunner 1.0': {" in report
    assert f"        'fakerunner.ops:double': {prints['fakerunner.ops:double']!r}," in report
    assert not any("fakerunner.gone" in line for line in report[report.index("    'fakerunner 1.0': {"):])
