"""The environment switch SPECOPS_VLLM and its grammar (docs/integrations.md, "The switch").

    value := "" | "0" | "1" | "all" | name ("," name)*

Spaces around the value and around each name are ignored; "0", "1" and "all" in any case; a name
is one of the plugin's point names, exactly. Unset, empty or "0": off. "1" or "all": every point
the installed release serves. A list: those points. Anything else (an unknown name, "true",
"all,", "1,input_ids", ",", ";" as a separator) is not understood: nothing is switched on, and
the reason names what was not understood (the plugin logs it once; `python -m specops` prints
it). A half-understood value is never taken for what it might mean.

The name does not start with VLLM_, so vLLM's check of unknown VLLM_* variables never sees it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

ENV = "SPECOPS_VLLM"


class Selection:
    def __init__(self, points: tuple[str, ...], reason: str, *, every: bool = False, problem: str | None = None):
        self.points = points  # the points switched on (empty: off)
        self.reason = reason  # why, in words
        self.every = every  # "1" / "all": every point the release serves
        self.problem = problem  # what the parser did not understand (None: all of it)


def selected_points(all_points: Sequence[str], environ: dict | None = None) -> Selection:
    raw = (os.environ if environ is None else environ).get(ENV)
    value = "" if raw is None else raw.strip()
    if value in ("", "0"):
        return Selection((), f"{ENV} is not set (set {ENV}=1, or a comma list of {', '.join(all_points)})")
    if value.lower() in ("1", "all"):
        return Selection(tuple(all_points), f"{ENV}={value}: every point", every=True)
    names = [name.strip() for name in value.split(",")]
    not_understood = []
    for name in names:
        if name == "":
            not_understood.append("an empty name (a stray comma)")
        elif ";" in name:
            not_understood.append(f"{name!r}: ';' is not a separator (names are separated by commas)")
        elif name.lower() in ("0", "1", "all"):
            not_understood.append(f"{name!r} inside a list")
        elif name not in all_points:
            not_understood.append(f"{name!r}, which is not a point")
    if not_understood:
        problem = (f"{ENV}={raw!r} is not understood ({'; '.join(dict.fromkeys(not_understood))}), so nothing is "
                   f"switched on; the value is 1, all, 0, or a comma list of {', '.join(all_points)}")
        return Selection((), problem, problem=problem)
    return Selection(tuple(name for name in all_points if name in names), f"{ENV}={value}")
