"""Reference for store_kv_block_metadata: runs of consecutive slots inside one block, negative
slots skipped, as torch ops. A slot starts a run unless it is the previous slot + 1 and not the
first slot of a block."""

from __future__ import annotations

import torch

INT32_MAX = 2**31 - 1


def _check_host_values(slots: torch.Tensor, runs: int, capacity: int) -> None:
    """The host op's value checks: a slot the kernel's slot + 1 overflows, more runs than the
    outputs hold (which the AI-CPU kernel writes past)."""
    past = ((slots >= INT32_MAX) | (slots < -INT32_MAX - 1)).nonzero()
    if past.numel():
        i = int(past[0])
        raise ValueError(f"slot_mapping[{i}] must be below 2^31 - 1 (the kernel's slot + 1 overflows int32), got "
                         f"{int(slots[i])}")
    if runs > capacity:
        raise ValueError(f"group_len, group_key_idx and group_key_cache_idx hold {capacity} groups, but slot_mapping "
                         f"has {runs} runs (a request whose tokens cross a block makes two); size them for the worst "
                         "case, slot_mapping's length")


def store_kv_block_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    slots = a.slot_mapping.long()
    previous = torch.cat([slots.new_full((1,), -2), slots[:-1]])
    valid = slots >= 0
    starts = valid & ~((previous == slots - 1) & (slots % a.block_size != 0))
    token = torch.arange(slots.numel(), device=slots.device)
    first = token[starts]
    # A run ends where the next run starts or a negative slot comes, whichever is first.
    next_stop = torch.where(starts | ~valid, token, slots.numel())
    next_stop = torch.cat([next_stop[1:], next_stop.new_full((1,), slots.numel())])
    stop = torch.flip(torch.cummin(torch.flip(next_stop, [0]), 0).values, [0])
    runs = first.numel()
    if slots.device.type == "cpu":
        # On host tensors this is the host op (the AI-CPU kernel's place), and refuses what
        # csrc/cpu/store_kv_block_metadata.cpp refuses, before any write, in its words.
        _check_host_values(slots, runs, a.group_len.numel())
    # Only the runs that fit are written: on a device (this reference stands for it there) the
    # rest are dropped, never written out of bounds.
    kept = min(runs, a.group_len.numel())
    values = torch.zeros((3, a.group_len.numel()), dtype=torch.int32, device=a.group_len.device)
    values[0, :kept] = (stop[starts] - first)[:kept].to(torch.int32)
    values[1, :kept] = first[:kept].to(torch.int32)
    values[2, :kept] = slots[starts][:kept].to(torch.int32)
    a.group_len.copy_(values[0])
    a.group_key_idx.copy_(values[1])
    a.group_key_cache_idx.copy_(values[2])
