"""What refresh and prepare_step check before their first write (docs/persistent_buffers.md).

Each step runs several ops, one or two per group, and every op checks its own arguments; an op
that rejected after another had written would leave the captured buffers half-updated. So
everything a later op could reject is checked here first, whatever the order of the groups:
the sizes, the caller tensors' metadata, caller tensors sharing memory with any captured buffer,
and on the host the values that only one group's op reads.
"""

from __future__ import annotations

import re

import torch

from specops._backend import current_backend
from specops._fastpath import native_entry
from specops.arguments import check_no_overlap, check_query_start_loc, check_tensor, checked_int
from specops.persistent.captured import CapturedBuffers

# compute_slot_mapping's value checks for every group's table at once, writing nothing.
CHECK_POSITIONS = native_entry("check_slot_mapping_positions")


def padded_extents(captured: CapturedBuffers, num_reqs: int, num_reqs_padded: int | None, num_tokens: int | None,
                   num_tokens_padded: int | None) -> tuple[int, int]:
    """The padded extents of refresh and prepare_step (None: the full extent), ints as torch's
    schema takes them (a float is rejected here, not half-way by an op), checked against the
    batch (R requests, T tokens; T None: not known on the host) and the buffers."""
    num_reqs_padded = (captured.max_num_reqs if num_reqs_padded is None
                       else checked_int(num_reqs_padded, "num_reqs_padded"))
    num_tokens_padded = (captured.max_num_tokens if num_tokens_padded is None
                         else checked_int(num_tokens_padded, "num_tokens_padded"))
    if not num_reqs <= num_reqs_padded <= captured.max_num_reqs:
        raise ValueError(
            f"num_reqs_padded must be in [R = {num_reqs}, max_num_reqs = {captured.max_num_reqs}], got {num_reqs_padded}")
    least = "0" if num_tokens is None else f"T = {num_tokens}"
    if not (num_tokens or 0) <= num_tokens_padded <= captured.max_num_tokens:
        raise ValueError(f"num_tokens_padded must be in [{least}, max_num_tokens = {captured.max_num_tokens}], "
                         f"got {num_tokens_padded}")
    return num_reqs_padded, num_tokens_padded


def check_shares_no_captured_buffer(captured: CapturedBuffers,
                                    *tensors: tuple[torch.Tensor | None, str]) -> None:
    """A caller tensor sharing memory with a captured buffer would be rewritten by one group's op
    while another group's op reads it: rejected before any write, whichever group owns it."""
    if torch.compiler.is_compiling():
        return  # a graph's inputs are checked by the ops it calls (docs/hardening.md, Limits)
    buffers = ((captured.table_storage, "block_tables"), (captured.slot_storage, "slot_mappings"))
    for tensor, name in tensors:
        if isinstance(tensor, torch.Tensor):
            for buffer, buffer_name in buffers:
                check_no_overlap(tensor, name, buffer, buffer_name)


def check_refresh(captured: CapturedBuffers, idx_mapping: torch.Tensor, query_start_loc: torch.Tensor,
                  positions: torch.Tensor, num_tokens: int | None, num_reqs_padded: int | None,
                  num_tokens_padded: int | None, num_computed_tokens: torch.Tensor | None) -> tuple[int, int, bool]:
    """refresh's checks: (num_reqs_padded, num_tokens_padded, whether a sliding-window gather
    masks this step). num_tokens: T, None where it is not known on the host. Metadata is checked even where no group reads it (no group maps slots):
    the call is the same whatever the groups."""
    device = captured.device
    check_tensor(idx_mapping, "idx_mapping", [torch.int32, torch.int64], 1, device, "the mappings")
    num_reqs_padded, num_tokens_padded = padded_extents(
        captured, idx_mapping.numel(), num_reqs_padded, num_tokens, num_tokens_padded)
    windowed = num_computed_tokens is not None and captured.masks_windows
    if num_computed_tokens is not None:
        check_tensor(num_computed_tokens, "num_computed_tokens", [torch.int32], 1, device, "the mappings")
        if num_computed_tokens.numel() < captured.max_num_reqs:
            raise ValueError(f"num_computed_tokens must have max_num_reqs = {captured.max_num_reqs} entries (one per "
                             f"request row), got {num_computed_tokens.numel()}")
    check_tensor(positions, "positions", [torch.int64, torch.int32], 1, device, "the mappings")
    num_reqs = check_query_start_loc(query_start_loc, device, "the mappings")
    if captured.mapped_groups and idx_mapping.numel() != num_reqs:
        raise ValueError(f"idx_mapping must have R = query_start_loc.numel() - 1 = {num_reqs} entries, got "
                         f"{idx_mapping.numel()}")
    check_shares_no_captured_buffer(captured, (idx_mapping, "idx_mapping"), (query_start_loc, "query_start_loc"),
                                    (positions, "positions"), (num_computed_tokens, "num_computed_tokens"))
    checked = captured.checked
    if (checked is not None and (captured.mapped_groups > 1 or windowed or checked.slots)
            and not torch.compiler.is_compiling() and current_backend() == "native"):
        # The host ops reject a position past a group's table, and a slot past an int32 slot
        # mapping; groups differ there, so every group is checked before the first one is
        # rewritten (device kernels write PAD instead and never reject a value).
        try:
            CHECK_POSITIONS(query_start_loc=query_start_loc, positions=positions, block_tables=checked.tables,
                            idx_mapping=idx_mapping, block_sizes=checked.block_sizes,
                            blocks_per_kv_block=checked.blocks_per_kv_block, cp_sharded=checked.cp_sharded,
                            cp_world_size=captured.layout.cp_world_size, cp_rank=captured.layout.cp_rank,
                            cp_interleave=captured.layout.cp_interleave, num_blocks=checked.counts,
                            slot_mappings=checked.slots)
        except ValueError as error:
            raise ValueError(_named_by_group(str(error), checked.groups)) from None
    return num_reqs_padded, num_tokens_padded, windowed


def check_host_copies(*, query_start_loc_cpu: object, seq_lens_cpu: object, device: torch.device) -> None:
    """`draft_inputs` on a device: the runner's host copies, so that no schedule of the draft step
    is planned from a device read."""
    for name, tensor in (("query_start_loc_cpu", query_start_loc_cpu), ("seq_lens_cpu", seq_lens_cpu)):
        if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
            got = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{name} must be the runner's host copy (a CPU tensor) when the mappings are on {device}, "
                             f"got {got}: the draft step's schedules are planned on the host, and without it the "
                             "drafting layer would read the device tensor back")


def _named_by_group(message: str, groups: list[int]) -> str:
    """The check's message with each table, count and slot mapping named by its group's index:
    it sees only the mapped groups, so its k-th table is group groups[k]'s."""
    return re.sub(r"\b(block_tables|num_blocks|slot_mappings|block_sizes|blocks_per_kv_block)\[(\d+)\]",
                  lambda match: f"{match.group(1)}[{groups[int(match.group(2))]}]", message)
