"""Device helpers shared by the token- and value-tiled kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def segment_of(offsets_ptr, item, mask, num_segments, num_search_steps, BLOCK: tl.constexpr):
    """For each item, the largest segment s in [0, num_segments) with offsets[s] <= item.

    offsets_ptr: the num_segments + 1 start offsets (query_start_loc, cu_lens). With
    low <= high, mid stays in [low, high], so every load is inside offsets (mid is computed without
    adding low and high, which could pass 2^31 - 1); masked items' answers are never used.
    With num_segments = 0 the answer, 0, is no segment: callers mask their items with
    `segment < num_segments` before they index a per-segment array (an invalid batch can claim
    tokens without requests).
    """
    low = tl.zeros([BLOCK], dtype=tl.int32)
    high = tl.zeros([BLOCK], dtype=tl.int32) + (num_segments - 1)
    for _ in range(num_search_steps):
        mid = low + (high - low + 1) // 2
        # Unmasked: mid is in [0, max(num_segments - 1, 0)] for every lane (triton-ascend's adapter
        # crashes now and then on this masked gather feeding a 2-D gather; masked lanes' answers are
        # never used).
        start = tl.load(offsets_ptr + mid)
        go_right = start <= item
        low = tl.where(go_right, mid, low)
        high = tl.where(go_right, high, mid - 1)
    return low
