"""Where a position's KV lives under KV-sharding context parallelism, in plain array math: the one
place the torch reference and the step simulator take it from (the same math in C++ is
csrc/kernels/slot_math.h, on device triton_kernels/_slot_math.py; docs/slot_mapping.md).
"""

from __future__ import annotations

from typing import TypeVar

Array = TypeVar("Array")  # a torch tensor or a NumPy array of int64 positions (>= 0)


def kv_placement(position: Array, kv_block: int, cp_world_size: int, cp_rank: int,
                 cp_interleave: int) -> tuple[Array, Array, Array]:
    """(is_local, virtual_block, local_offset) of each position.

    A virtual block spans kv_block * cp_world_size consecutive positions; the ranks take turns
    storing runs of cp_interleave of them, each filling its own allocation block of kv_block
    tokens in order. is_local: this rank stores the position; virtual_block: the allocation
    block (of the request's list) it falls in; local_offset: its place in this rank's
    allocation block (meaningful where is_local).
    """
    virtual_block_size = kv_block * cp_world_size
    virtual_block = position // virtual_block_size
    offset = position % virtual_block_size
    is_local = (offset // cp_interleave) % cp_world_size == cp_rank
    local_offset = (offset // (cp_world_size * cp_interleave)) * cp_interleave + offset % cp_interleave
    return is_local, virtual_block, local_offset
