"""`python -m specops.integrations.vllm [check | fingerprints]`: the plugin's status in a process
started with this environment (`check`: with every point switched on), or the fingerprints of the
installed runner's targets (docs/integrations.md, "Adding a release").

`fingerprints` works on any installed vLLM, supported or not: it lists every target of every
point the release table knows (as each row defines it), found with its fingerprint (the same as a
row's, or changed) or missing with why, which points have all their targets, and the row to add
for the installed release, to be added only after each of its points' adapters was checked
against that release.
"""

from __future__ import annotations

import sys

from specops.integrations.vllm import activate


def _variants(releases):
    """Each point as each row defines it (one entry for rows that define it alike)."""
    seen = {}
    for release in releases:
        for point in release.points:
            key = (point.name, point.targets)
            if key not in seen:
                seen[key] = (point, [])
            seen[key][1].append(release.key)
    return list(seen.values())


def fingerprints_report(releases) -> str:
    from specops.integrations.vllm._frame import Release, present
    from specops.integrations.vllm._guard import fingerprint

    here = present(releases)
    if not here:
        return "no runner package of the release table is installed here"
    key = Release(here, (), {}).key
    lines = [f"# {' + '.join(str(r) for r in here)}: every target of every point the release table knows"]
    found, why = {}, {}
    targets = sorted({t for release in releases for p in release.points for t in p.targets})
    for target in targets:
        try:
            found[target] = fingerprint(target)
        except Exception as exc:  # gone, renamed, unreadable: all "missing"
            why[target] = f"{type(exc).__name__}: {exc}"
    for target in targets:
        if target in why:
            lines.append(f"missing  {target}  ({why[target]})")
            continue
        rows = [r.key for r in releases if r.fingerprints.get(target) == found[target]]
        listed = [r.key for r in releases if target in r.fingerprints]
        mark = "same" if rows else "changed"
        detail = f"as in {', '.join(rows)}" if rows else f"differs from {', '.join(listed)}" if listed else "new"
        lines.append(f"{mark:<8} {target}  {found[target]}  ({detail})")
    complete, broken = [], []
    for point, rows in _variants(releases):
        gone = [t for t in point.targets if t not in found]
        label = f"{point.name} (as in {', '.join(rows)})"
        (broken if gone else complete).append(f"#   {label}" + (f": {gone[0]} missing" if gone else ""))
    lines += ["#", "# points with every target found:", *complete, "# points with a target missing:", *broken]
    row_targets = sorted({t for point, _ in _variants(releases) if all(t in found for t in point.targets)
                          for t in point.targets})
    names = list(dict.fromkeys(point.name for point, _ in _variants(releases)
                               if all(t in found for t in point.targets)))
    lines += ["#", f"# The row to add for {key}, once each point's adapters were checked against it:",
              f"# _releases.py: a Release of ({', '.join(repr(str(r)) for r in here)}) serving "
              f"{', '.join(names) or 'no point'}", "# _fingerprints.py:", f"    {key!r}: {{"]
    lines += [f"        {t!r}: {found[t]!r}," for t in row_targets]
    lines.append("    },")
    return "\n".join(lines)


def main() -> None:
    args = sys.argv[1:]
    if args == ["fingerprints"]:
        from specops.integrations.vllm._releases import RELEASES

        print(fingerprints_report(RELEASES))
        return
    if args not in ([], ["check"]):
        raise SystemExit("usage: python -m specops.integrations.vllm [check | fingerprints]")
    status = activate({"SPECOPS_VLLM": "1"} if args == ["check"] else None)
    print(f"active: {status.active}; {status.reason}")
    for state in status.states:
        print(f"  {state.name:<20} {state.state}" + (f": {state.reason}" if state.state == "skipped" else ""))


if __name__ == "__main__":
    main()
