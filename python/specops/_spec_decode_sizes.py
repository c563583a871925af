"""The integer arguments of prepare_spec_decode_inputs, packed into one int[] of the op schema.

torch's Python binding of an op call pays for every integer argument and every list argument
(an isinstance check against torch.Tensor each), which for this op was more than its whole CPU
body at R=256 (docs/changelog.md has the figures). So the schema takes its integers as one list,

    [num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave,
     block_size, blocks_per_kv_block, cp_sharded, slot_mapping_enabled,   # group 0
     ...]                                                                  # four per KV-cache group

and the Python wrapper keeps the keyword API.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

NUM_SCALARS = 5
PER_GROUP = 4


@dataclasses.dataclass(frozen=True)
class SpecDecodeSizes:
    num_tokens_padded: int
    num_reqs_padded: int
    cp_world_size: int
    cp_rank: int
    cp_interleave: int
    block_sizes: list[int]
    blocks_per_kv_block: list[int]
    cp_sharded: list[bool]
    # A group without a slot mapping gets PAD for every token; its table is never read.
    slot_mapping_enabled: list[bool]

    @classmethod
    def unpack(cls, sizes: Sequence[int], num_groups: int) -> SpecDecodeSizes:
        expected = NUM_SCALARS + PER_GROUP * num_groups
        if len(sizes) != expected:
            raise ValueError(f"sizes must have {NUM_SCALARS} + {PER_GROUP} * len(block_tables) = {expected} entries "
                             f"(see specops._spec_decode_sizes), got {len(sizes)}")
        groups = sizes[NUM_SCALARS:]
        return cls(*sizes[:NUM_SCALARS], list(groups[0::PER_GROUP]), list(groups[1::PER_GROUP]),
                   [bool(sharded) for sharded in groups[2::PER_GROUP]],
                   [bool(enabled) for enabled in groups[3::PER_GROUP]])

    def group_cp(self, group: int) -> tuple[int, int, int]:
        """(world size, rank, interleave) of a group: the CP layout, or a single rank if not sharded."""
        if self.cp_sharded[group]:
            return self.cp_world_size, self.cp_rank, self.cp_interleave
        return 1, 0, 1


_SCALAR_NAMES = ("num_tokens_padded", "num_reqs_padded", "cp_world_size", "cp_rank", "cp_interleave")
_GROUP_NAMES = ("block_sizes", "blocks_per_kv_block", "cp_sharded", "slot_mapping_enabled")


def wrapper_argument(index: int, num_groups: int) -> str:
    """The keyword argument of specops.prepare_spec_decode_inputs packed at sizes[index]."""
    if index < NUM_SCALARS:
        return _SCALAR_NAMES[index]
    group, field = divmod(index - NUM_SCALARS, PER_GROUP)
    return f"{_GROUP_NAMES[field]}[{group}]" if group < num_groups else f"sizes[{index}]"


def named_after_the_wrapper(error: ValueError, num_groups: int) -> ValueError:
    """error, or when it names an entry of sizes ("sizes[3] must be an int, ..."), the same
    error naming the wrapper's argument instead (cp_rank)."""
    message = str(error)
    if not message.startswith("sizes["):
        return error
    index = message[len("sizes["):message.index("]")]
    if not index.isdigit():
        return error
    return ValueError(wrapper_argument(int(index), num_groups) + message[message.index("]") + 1:])


def pack_sizes(num_tokens_padded: int, num_reqs_padded: int, cp_world_size: int, cp_rank: int, cp_interleave: int,
               block_sizes: Sequence[int], blocks_per_kv_block: Sequence[int], cp_sharded: Sequence[bool],
               slot_mapping_enabled: Sequence[bool]) -> list[int]:
    sizes = [num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave]
    for block_size, kv_blocks, sharded, enabled in zip(block_sizes, blocks_per_kv_block, cp_sharded,
                                                       slot_mapping_enabled):
        sizes += (block_size, kv_blocks, 1 if sharded else 0, 1 if enabled else 0)
    return sizes
