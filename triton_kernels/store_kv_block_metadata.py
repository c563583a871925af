"""Triton kernel for store_kv_block_metadata: one program walks the slot mapping BLOCK slots at a
time. A valid slot starts a run unless it is the previous slot + 1 inside the same block; a run
ends where the next slot does not continue it. A start writes its run's first token and slot, an
end its length (the start it belongs to is the last start at or before it: in this block, by a
[BLOCK, BLOCK] comparison, or carried from an earlier block). Then zeros up to the capacity.
Every store is masked to the capacity: runs past it are not written (the host op refuses them)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 64


@triton.jit
def _store_kv_block_metadata_kernel(slot_ptr, len_ptr, key_idx_ptr, cache_idx_ptr, num_slots, capacity, block_size,
                                    BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    groups = tl.zeros([], tl.int64)  # runs started before this block
    open_start = tl.zeros([], tl.int64) - 1  # the first token of the run open at this block's start
    for first in range(0, num_slots, BLOCK):
        token = first + offsets
        live = token < num_slots
        slot = tl.load(slot_ptr + tl.minimum(token, num_slots - 1), mask=live, other=-1).to(tl.int64)
        previous_at = tl.where(live & (token > 0), token - 1, -1)
        previous = tl.load(slot_ptr + tl.maximum(previous_at, 0), mask=previous_at >= 0, other=-2).to(tl.int64)
        after = token + 1
        following = tl.load(slot_ptr + tl.minimum(after, num_slots - 1), mask=after < num_slots, other=-1).to(tl.int64)
        valid = live & (slot >= 0)
        starts = valid & ((previous != slot - 1) | (slot % block_size == 0))
        ends = valid & ((following != slot + 1) | (following % block_size == 0))
        group = groups + tl.cumsum(starts.to(tl.int64), 0) - 1
        # The last start at or before each token.
        start_here = tl.max(tl.where(starts[None, :] & (offsets[None, :] <= offsets[:, None]), token[None, :], -1), 1)
        run_start = tl.where(start_here >= 0, start_here, open_start)
        fits = (group >= 0) & (group < capacity)
        at = tl.minimum(tl.maximum(group, 0), capacity - 1)  # masked lanes at in-bounds offsets
        # Each mask is one comparison of an offset that is -1 where the lane is off: on masks of
        # more comparisons triton-ascend's adapter reads freed memory (docs/device_readiness.md).
        start_at = tl.where(starts & fits, at, -1)
        end_at = tl.where(ends & fits, at, -1)
        tl.store(key_idx_ptr + at, token.to(tl.int32), mask=start_at >= 0)
        tl.store(cache_idx_ptr + at, slot.to(tl.int32), mask=start_at >= 0)
        tl.store(len_ptr + at, (token + 1 - run_start).to(tl.int32), mask=end_at >= 0)
        groups += tl.sum(starts.to(tl.int64), 0)
        open_start = tl.maximum(open_start, tl.max(tl.where(starts, token, -1), 0))
    for g0 in range(0, capacity, BLOCK):
        g = g0 + offsets
        rest_at = tl.where((g >= groups) & (g < capacity), g, -1)
        at = tl.maximum(rest_at, 0)
        zeros = tl.zeros([BLOCK], tl.int32)
        tl.store(len_ptr + at, zeros, mask=rest_at >= 0)
        tl.store(key_idx_ptr + at, zeros, mask=rest_at >= 0)
        tl.store(cache_idx_ptr + at, zeros, mask=rest_at >= 0)


def store_kv_block_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    _store_kv_block_metadata_kernel[(1,)](a.slot_mapping, a.group_len, a.group_key_idx, a.group_key_cache_idx,
                                          a.slot_mapping.numel(), a.group_len.numel(), a.block_size, BLOCK=BLOCK)
