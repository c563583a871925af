"""The environment switch: SPECOPS_VLLM.

Unset, empty or "0": off. "1" (or "all"): every point. Otherwise a comma list of point names.
The name does not start with VLLM_, so vLLM's check of unknown VLLM_* variables never sees it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

ENV = "SPECOPS_VLLM"


class Selection:
    def __init__(self, points: tuple[str, ...], reason: str):
        self.points = points  # the points switched on (empty: off)
        self.reason = reason  # why, in words


def selected_points(all_points: Sequence[str], environ: dict | None = None) -> Selection:
    value = (os.environ if environ is None else environ).get(ENV, "").strip()
    if value in ("", "0"):
        return Selection((), f"{ENV} is not set (set {ENV}=1, or a comma list of {', '.join(all_points)})")
    if value.lower() in ("1", "all"):
        return Selection(tuple(all_points), f"{ENV}={value}: every point")
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in all_points]
    if unknown:
        return Selection((), f"{ENV} names unknown points {unknown}; known: {', '.join(all_points)}")
    return Selection(tuple(name for name in all_points if name in names), f"{ENV}={value}")
