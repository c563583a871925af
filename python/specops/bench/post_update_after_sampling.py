"""Benchmark of post_update_after_sampling (the cases live in step_bookkeeping.py with the other step ops')."""

from __future__ import annotations

import torch

from specops.bench._harness import Case
from specops.bench.step_bookkeeping import cases_of


def cases(device: torch.device, quick: bool) -> list[Case]:
    return cases_of("post_update_after_sampling", device, quick)
