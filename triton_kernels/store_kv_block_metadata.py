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
        previous = tl.load(slot_ptr + tl.maximum(token - 1, 0), mask=live & (token > 0), other=-2).to(tl.int64)
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
        tl.store(key_idx_ptr + at, token.to(tl.int32), mask=starts & fits)
        tl.store(cache_idx_ptr + at, slot.to(tl.int32), mask=starts & fits)
        tl.store(len_ptr + at, (token + 1 - run_start).to(tl.int32), mask=ends & fits)
        groups += tl.sum(starts.to(tl.int64), 0)
        open_start = tl.maximum(open_start, tl.max(tl.where(starts, token, -1), 0))
    for g0 in range(0, capacity, BLOCK):
        g = g0 + offsets
        rest = (g >= groups) & (g < capacity)
        at = tl.minimum(g, capacity - 1)
        zeros = tl.zeros([BLOCK], tl.int32)
        tl.store(len_ptr + at, zeros, mask=rest)
        tl.store(key_idx_ptr + at, zeros, mask=rest)
        tl.store(cache_idx_ptr + at, zeros, mask=rest)


def store_kv_block_metadata(slot_mapping: torch.Tensor, group_len: torch.Tensor, group_key_idx: torch.Tensor,
                            group_key_cache_idx: torch.Tensor, block_size: int) -> None:
    _store_kv_block_metadata_kernel[(1,)](slot_mapping, group_len, group_key_idx, group_key_cache_idx,
                                          slot_mapping.numel(), group_len.numel(), block_size, BLOCK=BLOCK)
