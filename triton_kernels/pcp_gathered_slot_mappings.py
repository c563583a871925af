"""Triton kernel for pcp_gathered_slot_mappings: every group's gathered KV slots in one launch.

The gather index and the write mask are shared by the groups, so a token tile loads them once
and writes every group. Groups are flattened pointer arguments (no tuples: triton-ascend 3.2
has none) for up to MAX_GROUPS groups per launch, selected by the constexpr NUM_GROUPS; more
groups take one launch per MAX_GROUPS. Gathers are clamped to entry 0 of a non-empty source (the
launcher replaces an empty one by a one-entry dummy whose count says 0); a masked-out copy, or
an index outside its group's slot mapping, writes PAD.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 1024
MAX_GROUPS = 4


@triton.jit
def _gather_group(slots_ptr, num_slots, out_ptr, num_out, index, write, offset):
    valid = write & (index >= 0) & (index < num_slots)
    slot = tl.load(slots_ptr + tl.where(valid, index, 0))
    slot = tl.where(valid, slot, -1)
    tl.store(out_ptr + offset, slot.to(out_ptr.dtype.element_ty), mask=offset < num_out)


@triton.jit
def _pcp_gathered_slot_mappings_kernel(
    gather_ptr, mask_ptr, num_gathered, last_gathered, num_tiles,
    slots0, num_slots0, out0, num_out0,
    slots1, num_slots1, out1, num_out1,
    slots2, num_slots2, out2, num_out2,
    slots3, num_slots3, out3, num_out3,
    NUM_GROUPS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    for tile in range(pid, num_tiles, num_progs):
        offset = tile * BLOCK + tl.arange(0, BLOCK)
        real = offset < num_gathered
        # last_gathered: the index's last entry (0 of a one-entry dummy when the stream is empty).
        safe = tl.minimum(offset, last_gathered)
        index = tl.load(gather_ptr + safe)
        write = real & (tl.load(mask_ptr + safe) != 0)
        _gather_group(slots0, num_slots0, out0, num_out0, index, write, offset)
        if NUM_GROUPS > 1:
            _gather_group(slots1, num_slots1, out1, num_out1, index, write, offset)
        if NUM_GROUPS > 2:
            _gather_group(slots2, num_slots2, out2, num_out2, index, write, offset)
        if NUM_GROUPS > 3:
            _gather_group(slots3, num_slots3, out3, num_out3, index, write, offset)


def _not_empty(t: torch.Tensor) -> torch.Tensor:
    return t if t.numel() > 0 else torch.zeros(1, dtype=t.dtype, device=t.device)


def launch_groups(slot_mappings: list[torch.Tensor], padded_gather_idx: torch.Tensor,
                  gathered_kv_write_mask: torch.Tensor, out: list[torch.Tensor], num_out: list[int]) -> None:
    """One launch for up to MAX_GROUPS groups (the benchmark also calls it one group at a time)."""
    num_tiles = triton.cdiv(max(num_out), BLOCK)
    if num_tiles == 0:
        return
    args = []
    for g in range(MAX_GROUPS):
        # Unused slots repeat group 0: NUM_GROUPS keeps them out of the compiled kernel.
        h = g if g < len(out) else 0
        args += [_not_empty(slot_mappings[h]), slot_mappings[h].numel(), out[h], num_out[h]]
    grid = (num_programs(out[0].device, num_tiles),)
    _pcp_gathered_slot_mappings_kernel[grid](
        _not_empty(padded_gather_idx), _not_empty(gathered_kv_write_mask), padded_gather_idx.numel(),
        max(padded_gather_idx.numel() - 1, 0), num_tiles,
        *args, NUM_GROUPS=len(out), BLOCK=BLOCK,
    )


def pcp_gathered_slot_mappings(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_out = [a.num_tokens_padded if a.num_tokens_padded >= 0 else t.numel() for t in a.out]
    for first in range(0, len(a.out), MAX_GROUPS):
        chunk = slice(first, first + MAX_GROUPS)
        launch_groups(a.slot_mappings[chunk], a.padded_gather_idx, a.gathered_kv_write_mask, a.out[chunk], num_out[chunk])
