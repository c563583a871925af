"""@triton.jit helpers over a batch's query_start_loc, shared by the token-tiled kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def request_of_tokens(query_start_loc_ptr, token, is_real, num_reqs, num_search_steps, BLOCK: tl.constexpr):
    """The largest request r in [0, R) with query_start_loc[r] <= token, for each real token.

    A binary search, so one long prefill and many short decodes balance the same way; with
    low <= high, mid stays in [low, high], so every load is inside query_start_loc.
    """
    low = tl.zeros([BLOCK], dtype=tl.int32)
    high = tl.zeros([BLOCK], dtype=tl.int32) + (num_reqs - 1)
    for _ in range(num_search_steps):
        mid = (low + high + 1) // 2
        start = tl.load(query_start_loc_ptr + mid, mask=is_real, other=0)
        go_right = start <= token
        low = tl.where(go_right, mid, low)
        high = tl.where(go_right, high, mid - 1)
    return low
