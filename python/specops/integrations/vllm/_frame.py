"""The plugin's frame: release rows, points, and how a selection of points becomes patches
(docs/integrations.md, "Releases").

A release row (`Release`) is keyed by the runner packages it was checked against and their exact
versions (`vllm 0.33.0`; `vllm-ascend 0.26.0rc1 + vllm 0.26.0`). The row that applies is the one
whose runners are exactly the runner packages present, at exactly those versions: a runner
package another row names (vllm-ascend) counts as present wherever it is installed. No row: the
release is not supported and nothing is patched.

A row lists the points it serves. A point (`Point`) is a set of patches that stand or fall
together (a seam and its consuming ends); each patch names its target as `module:qualname` in
any package and the adapter factory that serves it (one factory may serve several releases).
A point also names the targets it only reads (fingerprinted, not patched), the modules whose
names bound at import must be imported before the rebinding scan, and the points it needs.

Points stand alone: a point switched on is patched when every one of its targets has the
fingerprint its row records, every point it needs is patched too, and its patches install; else
it is skipped with its reason and nothing of it is patched, while the other points go on.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Callable, Mapping

from specops.integrations.vllm._guard import Mismatch, check_target, resolve


@dataclasses.dataclass(frozen=True)
class Runner:
    """A runner package at one version."""

    distribution: str  # the name pip knows it by: vllm, vllm-ascend
    version: str
    label: str = ""  # how messages name it (vLLM)
    module: str = ""  # its import name (default: the distribution's, - as _)
    # `module:attribute` holding the version the package reports at run time (default: the
    # distribution's metadata).
    version_attr: str | None = None

    @property
    def package(self) -> str:
        return self.module or self.distribution.replace("-", "_")

    @property
    def name(self) -> str:
        return self.label or self.distribution

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclasses.dataclass(frozen=True)
class Patch:
    target: str  # module:qualname of what is replaced
    make: Callable  # make(original, *originals of `also`) -> adapter
    also: tuple[str, ...] = ()  # further originals the adapter falls back on (fingerprinted)


@dataclasses.dataclass(frozen=True)
class Point:
    name: str
    patches: tuple[Patch, ...]
    reads: tuple[str, ...] = ()  # targets whose attributes or call order the adapters rely on
    importers: tuple[str, ...] = ()  # modules whose names bound at import are rebound too
    needs: tuple[str, ...] = ()  # points without which this one is skipped

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([p.target for p in self.patches] + [t for p in self.patches for t in p.also]
                                   + list(self.reads)))


@dataclasses.dataclass(frozen=True)
class Release:
    runners: tuple[Runner, ...]
    points: tuple[Point, ...]
    fingerprints: Mapping[str, str]

    @property
    def key(self) -> str:
        """How _fingerprints.py names the row: `vllm 0.33.0`, `vllm-ascend 0.26.0rc1 + vllm 0.26.0`."""
        return " + ".join(f"{r.distribution} {r.version}" for r in self.runners)

    def __str__(self) -> str:
        return " + ".join(str(r) for r in self.runners)


def installed_version(runner: Runner) -> str | None:
    """The version of `runner`'s package installed here, or None when it is absent."""
    if importlib.util.find_spec(runner.package) is None:
        return None
    if runner.version_attr:
        module_name, attribute = runner.version_attr.split(":")
        return str(getattr(importlib.import_module(module_name), attribute))
    try:
        return importlib.metadata.version(runner.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class Unsupported(Exception):
    """No row for the runner packages present; the message names them and the supported ones."""


def present(releases: tuple[Release, ...]) -> tuple[Runner, ...]:
    """The runner packages some row names that are installed here, at their installed versions."""
    found = {}
    for release in releases:
        for runner in release.runners:
            if runner.distribution not in found:
                version = installed_version(runner)
                found[runner.distribution] = None if version is None else dataclasses.replace(runner, version=version)
    return tuple(r for r in found.values() if r is not None)


def release_for(releases: tuple[Release, ...]) -> Release:
    """The row for exactly the runner packages present (raises Unsupported)."""
    here = present(releases)
    have = {(r.distribution, r.version) for r in here}
    for release in releases:
        if {(r.distribution, r.version) for r in release.runners} == have:
            return release
    supported = "; ".join(str(r) for r in releases)
    if not here:
        names = sorted({r.name for release in releases for r in release.runners})
        raise Unsupported(f"{' or '.join(names)} is not installed (supported: {supported})")
    return_name = " + ".join(str(r) for r in here)
    raise Unsupported(f"{return_name} is not supported (supported: {supported})")


@dataclasses.dataclass(frozen=True)
class PointState:
    name: str
    state: str  # "active", "off" (not switched on), "skipped" (switched on, not patched)
    reason: str = ""
    warn: bool = False  # logged as a warning when the plugin activates


def check_point(point: Point, release: Release) -> str | None:
    """Why `point` cannot be patched on `release` (its first differing target), or None."""
    for target in point.targets:
        try:
            check_target(target, release.fingerprints.get(target))
        except Mismatch as mismatch:
            return str(mismatch)
    for name in point.importers:
        try:
            importlib.import_module(name)
        except Exception as exc:
            return f"{name} cannot be imported ({type(exc).__name__}: {exc})"
    return None


def plan(release: Release, names: tuple[str, ...], switched_on: tuple[str, ...], every: bool) -> list[PointState]:
    """Each of `names`' state on `release` with `switched_on` selected (before installing)."""
    served = {p.name: p for p in release.points}
    states: dict[str, PointState] = {}
    for name in names:
        if name not in switched_on:
            states[name] = PointState(name, "off", "not switched on")
        elif name not in served:
            # Asked for by name: worth a warning; under "every point", what the release serves.
            states[name] = PointState(name, "skipped", f"{release} has no {name} point", warn=not every)
        else:
            why = check_point(served[name], release)
            states[name] = (PointState(name, "active") if why is None
                            else PointState(name, "skipped", f"point {name}: {why}", warn=True))
    changed = True
    while changed:  # a point is skipped with any point it needs
        changed = False
        for name, state in states.items():
            if state.state != "active":
                continue
            missing = [f"{need} ({states[need].state if need in states else 'not a point here'})"
                       for need in served[name].needs if need not in states or states[need].state != "active"]
            if missing:
                states[name] = PointState(name, "skipped", f"point {name} needs {', '.join(missing)}", warn=True)
                changed = True
    return [states[name] for name in names]


def _patches_of(point: Point, originals: dict, packages: tuple[str, ...]) -> list[tuple]:
    """Where each adapter of `point` goes: (owner, attribute, adapter, value replaced, where)."""
    planned = []
    for patch in point.patches:
        original = originals[patch.target]
        adapter = patch.make(original, *(originals[t] for t in patch.also))
        module_name, qualname = patch.target.split(":")
        if "." in qualname:
            class_path, attribute = qualname.rsplit(".", 1)
            owner = resolve(f"{module_name}:{class_path}")
            planned.append((owner, attribute, adapter, vars(owner)[attribute], patch.target))
            continue
        # A function: every loaded module of the runner packages holding the original by that name.
        for loaded_name, module in list(sys.modules.items()):
            if loaded_name.split(".")[0] in packages and vars(module).get(qualname) is original:
                planned.append((module, qualname, adapter, original, f"{loaded_name}:{qualname}"))
    return planned


def install(release: Release, states: list[PointState]) -> tuple[list[PointState], dict[str, list[str]]]:
    """Patches every active point, each all or nothing; a point whose patches fail to install is
    rolled back and skipped. Returns the states after installing and where each point's adapters went."""
    packages = tuple(r.package for r in release.runners)
    served = {p.name: p for p in release.points}
    active = [served[s.name] for s in states if s.state == "active"]
    # Every original before any patch: one point's adapter may fall back on another's target.
    originals = {t: resolve(t) for p in active for patch in p.patches for t in (patch.target, *patch.also)}
    result = {s.name: s for s in states}
    where: dict[str, list[str]] = {}
    pending = list(active)
    while pending:
        # A point goes in after every point it needs; one whose needs failed to go in is skipped.
        ready = [p for p in pending if all(result[n].state == "active" and n not in {q.name for q in pending}
                                           for n in p.needs)]
        if not ready:
            for point in pending:
                result[point.name] = PointState(point.name, "skipped", f"point {point.name} needs "
                                                f"{', '.join(point.needs)}, which could not be installed", warn=True)
            break
        for point in ready:
            pending.remove(point)
            if any(result[n].state != "active" for n in point.needs):
                result[point.name] = PointState(point.name, "skipped", f"point {point.name} needs "
                                                f"{', '.join(point.needs)}, which could not be installed", warn=True)
                continue
            done = []
            try:
                for owner, attribute, adapter, replaced, target in _patches_of(point, originals, packages):
                    setattr(owner, attribute, adapter)
                    done.append((owner, attribute, replaced))
                    where.setdefault(point.name, []).append(target)
            except Exception as exc:
                for owner, attribute, replaced in reversed(done):
                    setattr(owner, attribute, replaced)
                where.pop(point.name, None)
                result[point.name] = PointState(point.name, "skipped", f"point {point.name} could not be "
                                                f"installed ({type(exc).__name__}: {exc})", warn=True)
    return [result[s.name] for s in states], where
