"""The record of what `PersistentMappings` captured, as its helpers read it.

The checks (persistent/checks.py) and the draft step (persistent/draft_step.py) take this frozen
record, made once when the mappings are built, instead of the class: the buffers they read or
write (every one allocated once, its data pointer fixed), the batch limits, the CP layout and
the per-group lists every multi-group op takes, by the schema's names.
"""

from __future__ import annotations

import dataclasses
import functools

import torch


@dataclasses.dataclass(frozen=True)
class GroupLayout:
    """The CP layout and the per-group lists (one entry per group) that every multi-group op takes
    under these names (prepare_spec_decode_inputs, advance_draft_step, ...)."""

    cp_world_size: int
    cp_rank: int
    cp_interleave: int
    block_sizes: list[int]
    blocks_per_kv_block: list[int]
    cp_sharded: list[bool]
    slot_mapping_enabled: list[bool]

    @functools.cached_property
    def keywords(self) -> dict[str, object]:
        """The seven as an op call's keyword arguments (`op(..., **layout.keywords)`)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


@dataclasses.dataclass(frozen=True)
class CheckedTables:
    """What check_slot_mapping_positions reads for the groups that map slots (the host path)."""

    groups: list[int]  # those groups' indices among all groups (the check sees only these)
    tables: list[torch.Tensor]  # their source tables
    counts: list[torch.Tensor]  # their num_blocks
    block_sizes: list[int]  # their block sizes, blocks per KV block and CP sharding
    blocks_per_kv_block: list[int]
    cp_sharded: list[bool]
    slots: list[torch.Tensor]  # their int32 slot mappings, whose slots must fit; [] for int64


@dataclasses.dataclass(frozen=True)
class CapturedBuffers:
    device: torch.device  # the buffers' device, as their tensors report it
    max_num_reqs: int
    max_num_tokens: int
    layout: GroupLayout
    # Every captured block table and slot mapping lies in these two (callers' tensors may share
    # memory with neither).
    table_storage: torch.Tensor
    slot_storage: torch.Tensor
    source_block_tables: list[torch.Tensor]
    num_blocks: list[torch.Tensor]
    slot_mappings: list[torch.Tensor]
    positions: torch.Tensor
    seq_lens: torch.Tensor
    draft_positions: torch.Tensor
    mapped_groups: int  # groups with a slot mapping
    masks_windows: bool  # a group masks its sliding window in the gathers
    checked: CheckedTables | None  # None: no host check of the positions (a device, or no mapped group)
