"""Reference for store_kv_block_metadata: runs of consecutive slots inside one block, negative
slots skipped, as torch ops. A slot starts a run unless it is the previous slot + 1 and not the
first slot of a block."""

from __future__ import annotations

import torch


def store_kv_block_metadata(slot_mapping: torch.Tensor, group_len: torch.Tensor, group_key_idx: torch.Tensor,
                            group_key_cache_idx: torch.Tensor, block_size: int) -> None:
    slots = slot_mapping.long()
    previous = torch.cat([slots.new_full((1,), -2), slots[:-1]])
    valid = slots >= 0
    starts = valid & ~((previous == slots - 1) & (slots % block_size != 0))
    token = torch.arange(slots.numel(), device=slots.device)
    first = token[starts]
    # A run ends where the next run starts or a negative slot comes, whichever is first.
    next_stop = torch.where(starts | ~valid, token, slots.numel())
    next_stop = torch.cat([next_stop[1:], next_stop.new_full((1,), slots.numel())])
    stop = torch.flip(torch.cummin(torch.flip(next_stop, [0]), 0).values, [0])
    runs = first.numel()
    # Only the runs that fit are written: the op's check refuses more runs than the capacity on
    # the host; on a device (this reference stands for it) the rest are dropped, never written out
    # of bounds.
    kept = min(runs, group_len.numel())
    values = torch.zeros((3, group_len.numel()), dtype=torch.int32, device=group_len.device)
    values[0, :kept] = (stop[starts] - first)[:kept].to(torch.int32)
    values[1, :kept] = first[:kept].to(torch.int32)
    values[2, :kept] = slots[starts][:kept].to(torch.int32)
    group_len.copy_(values[0])
    group_key_idx.copy_(values[1])
    group_key_cache_idx.copy_(values[2])
