"""The deliberate differences between a step run by vLLM alone and with the specops plugin: a
fixed list of named masks, each documented in docs/conformance.md ("vLLM's own runner with the
plugin"). A mask says which entries of which recorded buffer may differ and what the plugin's
value there must be; the comparison checks both: every difference lies inside a mask, and every
entry a mask excuses holds the value the mask documents (so a mask cannot hide a wrong value).

Each mask is `(name, applies(buffer_name) -> bool, allowed(theirs, ours) -> bool tensor)`; the
bool tensor marks the entries excused, where `ours` must satisfy `documented(ours)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch


class Mask(NamedTuple):
    name: str
    applies: Callable[[str], bool]
    excused: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (theirs, ours) -> where they may differ
    documented: Callable[[torch.Tensor], torch.Tensor]  # ours -> where ours holds the documented value


MASKS: list[Mask] = []
