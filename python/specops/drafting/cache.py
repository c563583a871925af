"""The cross-group cache of one draft step."""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import NamedTuple

# One logger for the whole layer, under the package's name (the hit lines are filtered by it).
logger = logging.getLogger("specops.drafting")


class _Entry(NamedTuple):
    fingerprint: tuple  # of the inputs the value was computed from
    value: object
    keep_alive: tuple  # the input tensors the fingerprint names (their ids stay unique)
    owner: object  # whose `generation` counts the rewrites of the value's buffers (None: none)
    generation: int | None  # owner's generation when the value was stored


class StepCache:
    """The cross-group cache of one step.

    Keys are (namespace, name); drafting entries sit under namespace
    (DRAFT_NAMESPACE, draft_index). An entry is served only while the fingerprint of its inputs
    (identity, _version, data pointer and shape of each input tensor, plus the sizes) is
    unchanged, and while the buffers holding its value were not rewritten since (by a build
    with another cache). It keeps its input tensors alive, so a tensor id in a fingerprint
    cannot be reused.

    What the fingerprint sees, exactly (tests/layers/test_step_cache_inputs.py):
    - every write through torch to the tensor or to a view of it (in-place ops, `out=`, every
      specops op, `.detach()` views): they bump the version counter the views share;
    - a new storage under the same tensor (`torch.utils.swap_tensors`, `set_`, `.data = t`):
      the data pointer changes.
    It does not see a write that bypasses the tensor's version counter: through its storage
    (`untyped_storage().copy_`), through `.data` (`.data.copy_`: a tensor with a counter of its
    own), a NumPy view, DLPack, or a kernel of another library writing raw memory. After such a
    write to an input, call `invalidate()` (or start a new StepCache). Inference tensors have no
    version counter at all: a step with one among its inputs is built without the cache (as
    with no cache), and nothing is stored. Not thread-safe: one cache per step, used by one
    thread.
    """

    __slots__ = ("_entries", "hits", "misses")

    def __init__(self) -> None:
        self._entries: dict[tuple[Hashable, Hashable], _Entry] = {}
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Hashable, Hashable], fingerprint: tuple) -> object | None:
        """The value stored under key = (namespace, name) for this fingerprint, or None (a miss)."""
        entry = self._entries.get(key)
        if entry is not None and entry.fingerprint == fingerprint and (
                entry.owner is None or entry.owner.generation == entry.generation):
            self.hits += 1
            logger.debug("StepCache hit: %s", key)
            return entry.value
        self.misses += 1
        return None

    def put(self, key: tuple[Hashable, Hashable], fingerprint: tuple, value: object, *, keep_alive: tuple = (),
            owner: object = None) -> None:
        """Stores value under key = (namespace, name). keep_alive: the input tensors named in the
        fingerprint; owner: an object whose `generation` attribute changes whenever the buffers
        behind value are rewritten (None: the value owns no buffer)."""
        generation = None if owner is None else owner.generation
        self._entries[key] = _Entry(fingerprint, value, keep_alive, owner, generation)

    def keys(self) -> list[tuple[Hashable, Hashable]]:
        return list(self._entries)

    def invalidate(self) -> None:
        """Forgets every entry: the next build of each group recomputes. For inputs changed in a
        way no fingerprint sees (a NumPy view, `.data`, DLPack: see the class docstring)."""
        self._entries.clear()

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
