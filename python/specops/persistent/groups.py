"""The KV-cache groups of a PersistentMappings: what each group is, and the per-group arguments
the mappings derive from the groups once."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from specops.arguments import check_int32_range, check_positive, checked_int, normalize_config_fields


@dataclasses.dataclass(frozen=True)
class MappingGroup:
    """One KV-cache group: its kernel block size, kernel blocks per allocation block, whether
    its KV is sharded across the CP ranks (False: every rank stores every token, W = 1),
    whether it has a slot mapping at all (False: PAD for every token, its table never read),
    for a sliding-window group the tokens below a request's first scheduled position that
    its attention still reads (0: not a sliding-window group; see `refresh`), and its name:
    the key of its tensors in the by-name mappings the drafting layer reads (default
    "group{index}")."""

    block_size: int
    blocks_per_kv_block: int = 1
    cp_sharded: bool = True
    slot_mapping_enabled: bool = True
    sliding_window_reach: int = 0
    name: str | None = None

    def __post_init__(self) -> None:
        # Numbers and flags as the ops take ints and bools (docs/hardening.md, "Bool arguments").
        normalize_config_fields(self, ints=("block_size", "blocks_per_kv_block", "sliding_window_reach"),
                                bools=("cp_sharded", "slot_mapping_enabled"))
        check_positive(self.block_size, "block_size")
        check_positive(self.blocks_per_kv_block, "blocks_per_kv_block")
        check_int32_range(self.sliding_window_reach, "sliding_window_reach", 0)
        if self.name is not None and not isinstance(self.name, str):
            raise ValueError(f"name must be a str or None, got {type(self.name).__name__}")


def widths_per_group(max_num_blocks_per_req: int | Sequence[int], num_groups: int) -> tuple[int, ...]:
    """One table width per group, from one width for all or one per group (ints as the ops take them)."""
    if not isinstance(max_num_blocks_per_req, Sequence) or isinstance(max_num_blocks_per_req, str):
        width = checked_int(max_num_blocks_per_req, "max_num_blocks_per_req")
        check_positive(width, "max_num_blocks_per_req")
        return (width,) * num_groups
    widths = tuple(checked_int(width, f"max_num_blocks_per_req[{g}]") for g, width in enumerate(max_num_blocks_per_req))
    if len(widths) != num_groups:
        raise ValueError(f"max_num_blocks_per_req must be an int or one width per group ({num_groups}), "
                         f"got {len(widths)} widths")
    for group, width in enumerate(widths):
        check_positive(width, f"max_num_blocks_per_req[{group}]")
    return widths


def slot_mapping_args(groups: Sequence[MappingGroup], cp_world_size: int, cp_rank: int,
                      cp_interleave: int) -> list[dict[str, int] | None]:
    """Each group's compute_slot_mapping keywords (block_size, blocks_per_kv_block and the CP
    layout: a group without CP sharding sees one rank); None for a group without a slot mapping
    (PAD, its table never read)."""
    args: list[dict[str, int] | None] = []
    for index, group in enumerate(groups):
        if not group.slot_mapping_enabled:
            args.append(None)
            continue
        kv_block = group.block_size * group.blocks_per_kv_block
        if group.cp_sharded and kv_block % cp_interleave != 0:
            # At construction, naming the group, rather than at the group's first step.
            raise ValueError(f"cp_interleave must divide block_size * blocks_per_kv_block = {kv_block} of "
                             f"groups[{index}], got {cp_interleave}")
        cp = (cp_world_size, cp_rank, cp_interleave) if group.cp_sharded else (1, 0, 1)
        args.append(dict(block_size=group.block_size, blocks_per_kv_block=group.blocks_per_kv_block,
                         cp_world_size=cp[0], cp_rank=cp[1], cp_interleave=cp[2]))
    return args
