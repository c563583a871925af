"""Kernel-group arguments without Triton tuples.

Triton 3.2, which triton-ascend 3.2 is, has no tuple kernel arguments, so the multi-group
kernels take each group's pointers and sizes as plain arguments for up to MAX_GROUPS groups
(flattened, unrolled at compile time under `if NUM_GROUPS > g`). A launcher with more groups
launches once per MAX_GROUPS of them. Why this form (docs/device_readiness.md, "The NPU"): a
table of base addresses needs int-to-pointer casts, which triton-ascend lowers to an opaque
pointer its adapter can only copy whole runs through (move_kv_cache_entries does that), not
analyse for the masked, strided gathers these kernels make; one launch per group would multiply
the launches of the common case (1 to 3 KV-cache groups) and repeat each launch's shared work. MAX_GROUPS = 4 covers the hybrid models vLLM
serves (full attention, sliding window, a Mamba or cross-attention group) in one launch.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_GROUPS = 4


def group_chunks(num_groups: int) -> list[range]:
    """The groups of each launch: MAX_GROUPS at a time."""
    return [range(start, min(start + MAX_GROUPS, num_groups)) for start in range(0, num_groups, MAX_GROUPS)]


def flat_group_args(per_group: Sequence[Sequence[object]], groups: range,
                    filler: Sequence[object] | None = None) -> list[object]:
    """Each group's arguments in order, then the first group's (or `filler`, for a launch with no
    group) again for the unused slots: compiled away, the kernel never reads a slot past NUM_GROUPS."""
    chosen = [list(per_group[g]) for g in groups]
    chosen += [chosen[0] if chosen else list(filler)] * (MAX_GROUPS - len(chosen))
    return [value for group in chosen for value in group]
