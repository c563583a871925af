"""Reference for move_kv_cache_entries: every cache's entries moved slot to slot, in row order.

The pairs of a row apply one after another, a pair seeing the writes of those before it. In
plain torch, without a loop over pairs or a host read: a pair's value is the original entry of
the first slot of its chain (the pair before it that wrote its source, and so on: pointer jumping
over `prev`), and a slot written by several pairs keeps the last one's. Every pair then writes
its destination's final entry (a skipped pair rewrites slot 0 with its final entry), so writes
that meet carry equal values and one index_put_ per cache is exact.
"""

from __future__ import annotations

import torch


def _final_sources(src: torch.Tensor, dst: torch.Tensor, num_slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(target, origin): the slot each pair writes (its destination, or 0 for a skipped pair) and
    the slot of the original entry that ends up there."""
    num_pairs = src.numel()
    valid = (src >= 0) & (src < num_slots) & (dst >= 0) & (dst < num_slots)
    order = torch.arange(num_pairs, device=src.device)
    earlier = order.unsqueeze(0) < order.unsqueeze(1)  # [i, j]: j before i
    # prev[i]: the last valid pair before i whose destination is i's source (-1: none).
    feeds = earlier & valid.unsqueeze(0) & (dst.unsqueeze(0) == src.unsqueeze(1))
    prev = torch.where(feeds, order.unsqueeze(0), -1).amax(dim=1) if num_pairs else order
    root = torch.where(prev >= 0, prev, order)
    for _ in range(max(num_pairs - 1, 0).bit_length()):
        root = root[root]
    origin = src[root]  # a chain's first pair reads an entry no pair has written yet
    target = torch.where(valid, dst, 0)
    # The last valid pair writing each pair's target (-1: none; the target keeps its entry).
    writes = valid.unsqueeze(0) & (dst.unsqueeze(0) == target.unsqueeze(1))
    writer = torch.where(writes, order.unsqueeze(0), -1).amax(dim=1) if num_pairs else order
    final = torch.where(writer >= 0, origin[writer.clamp(min=0)], target)
    return target, final


def move_kv_cache_entries(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    if a.src_slots.size(1) == 0:
        return
    resolved = {}
    for cache, group in zip(a.kv_caches, a.cache_groups):
        if cache.numel() == 0:
            continue
        num_blocks, block_size = cache.shape[:2]
        num_slots = num_blocks * block_size
        key = (group, num_slots)
        if key not in resolved:
            resolved[key] = _final_sources(a.src_slots[group].long(), a.dst_slots[group].long(), num_slots)
        target, final = resolved[key]
        entries = cache.view(num_blocks, block_size, -1)  # the entry is contiguous (checked)
        moved = entries[final // block_size, final % block_size]  # gathered before any write
        entries.index_put_((target // block_size, target % block_size), moved)
