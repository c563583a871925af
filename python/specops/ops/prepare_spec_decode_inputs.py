"""prepare_spec_decode_inputs: one call for the metadata of an async spec-decode step.

Equal to correct_num_computed_tokens, then prepare_positions_and_seq_lens, then
compute_slot_mapping for every KV-cache group (see docs/async_accounting.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops._backend import _current_backend
from specops._extension import EXTENSION
from specops._fastpath import new_tuple as _new_tuple
from specops._spec_decode_sizes import SpecDecodeSizes, named_after_the_wrapper
from specops.ops._accounting_checks import check_count_correction, check_positions_and_seq_lens
from specops.ops._checks import (
    bools_per_group,
    check_idx_mapping,
    check_outputs_alias_nothing,
    check_positive,
    checked_size,
    checked_tensor_list,
)
from specops.ops._op import SpecOp
from specops.ops._slot_mapping_checks import SlotMappingArgNames, check_num_blocks, check_slot_mapping_args
from specops.ops.prepare_positions_and_seq_lens import allocate_positions_and_seq_lens
from specops.reference.prepare_spec_decode_inputs import prepare_spec_decode_inputs as _reference

if EXTENSION.loaded:
    from specops import _C


class SpecDecodeInputs(NamedTuple):
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mappings: list[torch.Tensor]  # one per KV-cache group, in the order of block_tables


class _OpArguments(NamedTuple):
    """The op's arguments that the wrapper derives from its own (the others pass as given)."""
    block_tables: list[torch.Tensor]
    positions: torch.Tensor
    seq_lens: torch.Tensor
    slot_mappings: list[torch.Tensor]
    sizes: list[int]


def _check(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    slot_mappings: Sequence[torch.Tensor],
    idx_mapping: torch.Tensor | None,
    sizes: Sequence[int],
    num_blocks: Sequence[torch.Tensor] = (),
) -> None:
    """Mirrors csrc/cpu/prepare_spec_decode_inputs.cpp (metadata only)."""
    layout = SpecDecodeSizes.unpack(sizes, len(block_tables))
    check_count_correction(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                           prev_num_draft_tokens, cpu_num_computed_tokens)
    check_positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, layout.num_tokens_padded,
                                 layout.num_reqs_padded)
    device = num_computed_tokens.device
    check_positive(layout.cp_world_size, "cp_world_size")
    if not 0 <= layout.cp_rank < layout.cp_world_size:
        raise ValueError(f"cp_rank must be in [0, cp_world_size = {layout.cp_world_size}), got {layout.cp_rank}")
    check_positive(layout.cp_interleave, "cp_interleave")
    num_groups = len(block_tables)
    if len(slot_mappings) != num_groups:
        raise ValueError(
            f"slot_mappings must have one tensor per block table (len(block_tables) = {num_groups}), "
            f"got {len(slot_mappings)}")
    for g in range(num_groups):
        # The token count is a value (query_start_loc[R]); only the CPU op checks it against the padding.
        check_slot_mapping_args(block_tables[g], layout.block_sizes[g], slot_mappings[g],
                                layout.blocks_per_kv_block[g], *layout.group_cp(g), 0, layout.num_tokens_padded,
                                device, SlotMappingArgNames.of_group(g), device_of="num_computed_tokens")
    if len(num_blocks) not in (0, num_groups):
        raise ValueError(f"num_blocks must be empty or hold one tensor per block table (len(block_tables) = "
                         f"{num_groups}), got {len(num_blocks)}")
    for g, counts in enumerate(num_blocks):
        check_num_blocks(counts, f"num_blocks[{g}]", block_tables[g], f"block_tables[{g}]", device,
                         device_of="num_computed_tokens")
    check_idx_mapping(idx_mapping, query_start_loc.numel() - 1, device, device_of="num_computed_tokens")
    # The correction's four inputs are read in full before the first store (every backend
    # gathers first), so they may alias any output; the rest is read while storing.
    outputs = [(num_computed_tokens, "num_computed_tokens"), (num_accepted_tokens, "num_accepted_tokens"),
               (positions, "positions"), (seq_lens, "seq_lens")]
    outputs += [(out, f"slot_mappings[{g}]") for g, out in enumerate(slot_mappings)]
    read_while_storing = [(query_start_loc, "query_start_loc"), (idx_mapping, "idx_mapping")]
    read_while_storing += [(table, f"block_tables[{g}]") for g, table in enumerate(block_tables)]
    read_while_storing += [(counts, f"num_blocks[{g}]") for g, counts in enumerate(num_blocks)]
    check_outputs_alias_nothing(outputs, read_while_storing)


_OP = SpecOp("prepare_spec_decode_inputs", _check, _reference)
_TENSOR = torch.Tensor
# The usual arguments' sizes list in one native call (csrc/spec_decode_sizes.h); without the
# extension, or in a build without the helper, the Python below packs every call.
_native_sizes = getattr(_C, "spec_decode_sizes", None) if EXTENSION.loaded else None
# Dynamo cannot trace the native helper: while it traces the wrapper, the Python packs.
_is_dynamo_compiling = torch.compiler.is_dynamo_compiling
_torch_compiler = torch.compiler


def _per_group(value: object, num_groups: int) -> list:
    """One value per group: a sequence as given, anything else for every group (the op's checks
    then judge it, naming block_sizes[0] etc.)."""
    kind = type(value)
    if kind is list:
        return value
    # An int or a bool (the usual one value for all groups) without the Sequence ABC check,
    # which costs more than the rest of this function on every call.
    if kind is int or kind is bool or not (isinstance(value, Sequence) and not isinstance(value, str)):
        return [value] * num_groups
    return list(value)


def _op_arguments(
    query_start_loc: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    positions: torch.Tensor | None,
    seq_lens: torch.Tensor | None,
    slot_mappings: Sequence[torch.Tensor] | None,
    blocks_per_kv_block: Sequence[int] | int,
    cp_sharded: Sequence[bool] | bool,
    slot_mapping_enabled: Sequence[bool] | bool,
    cp_world_size: int,
    cp_rank: int,
    cp_interleave: int,
    num_tokens_padded: int | None,
    num_reqs_padded: int | None,
) -> _OpArguments:
    """Every form of the wrapper's arguments taken, checked and packed in Python: the lists as
    lists, one value per group, the outputs allocated where absent, the sizes list (see
    specops._spec_decode_sizes). The usual forms give what csrc/spec_decode_sizes.cpp gives."""
    # The common call (lists of plain tensors, one int or a list per group) takes the shortest
    # path, with no helper call (each costs about as much as the op's checks of a group): at
    # R=256 this Python once cost a third of the whole call.
    if type(block_tables) is list:
        for table in block_tables:
            if type(table) is not _TENSOR:
                block_tables = checked_tensor_list(block_tables, "block_tables")
                break
    else:
        block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    if type(block_sizes) is not list:
        block_sizes = _per_group(block_sizes, num_groups)
    if type(blocks_per_kv_block) is not list:
        if type(blocks_per_kv_block) is int:
            blocks_per_kv_block = [blocks_per_kv_block] * num_groups
        else:
            blocks_per_kv_block = _per_group(blocks_per_kv_block, num_groups)
    # Packed into the op's int[] as 0 and 1: checked here as every bool argument is (one bool
    # for every group, or a list of True / False, without the call).
    if cp_sharded is True or cp_sharded is False:
        cp_sharded = [cp_sharded] * num_groups
    elif type(cp_sharded) is not list:
        cp_sharded = bools_per_group(cp_sharded, num_groups, "cp_sharded")
    else:
        for entry in cp_sharded:
            if entry is not True and entry is not False:
                cp_sharded = bools_per_group(cp_sharded, num_groups, "cp_sharded")
                break
    if slot_mapping_enabled is True or slot_mapping_enabled is False:
        slot_mapping_enabled = [slot_mapping_enabled] * num_groups
    elif type(slot_mapping_enabled) is not list:
        slot_mapping_enabled = bools_per_group(slot_mapping_enabled, num_groups, "slot_mapping_enabled")
    else:
        for entry in slot_mapping_enabled:
            if entry is not True and entry is not False:
                slot_mapping_enabled = bools_per_group(slot_mapping_enabled, num_groups, "slot_mapping_enabled")
                break
    if not len(block_sizes) == len(blocks_per_kv_block) == len(cp_sharded) == len(slot_mapping_enabled) == num_groups:
        for name, values in (("block_sizes", block_sizes), ("blocks_per_kv_block", blocks_per_kv_block),
                             ("cp_sharded", cp_sharded), ("slot_mapping_enabled", slot_mapping_enabled)):
            if len(values) != num_groups:
                raise ValueError(
                    f"{name} must have one entry per block table (len(block_tables) = {num_groups}), got {len(values)}"
                )
    if positions is not None and seq_lens is not None:
        if num_tokens_padded is None:
            num_tokens_padded = positions.numel()
        if num_reqs_padded is None:
            num_reqs_padded = seq_lens.numel()
    else:
        positions, seq_lens, num_tokens_padded, num_reqs_padded = allocate_positions_and_seq_lens(
            query_start_loc, positions, seq_lens, num_tokens_padded, num_reqs_padded)
    if slot_mappings is None:
        num_tokens_padded = checked_size(num_tokens_padded, "num_tokens_padded", 0)
        slot_mappings = [torch.empty(num_tokens_padded, dtype=torch.int64, device=positions.device)
                         for _ in range(num_groups)]
    elif type(slot_mappings) is list:
        # A list of its own: the result's, which the caller's list may not change later.
        for out in slot_mappings:
            if type(out) is not _TENSOR:
                slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
                break
        else:
            slot_mappings = slot_mappings[:]
    else:
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    # pack_sizes, inline (the call alone costs a tenth of this wrapper), one group without a loop.
    if num_groups == 1:
        sizes = [num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave, block_sizes[0],
                 blocks_per_kv_block[0], 1 if cp_sharded[0] else 0, 1 if slot_mapping_enabled[0] else 0]
    else:
        sizes = [num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave]
        for g in range(num_groups):
            sizes += (block_sizes[g], blocks_per_kv_block[g], 1 if cp_sharded[g] else 0,
                      1 if slot_mapping_enabled[g] else 0)
    return _new_tuple(_OpArguments, (block_tables, positions, seq_lens, slot_mappings, sizes))


def prepare_spec_decode_inputs(
    num_computed_tokens: torch.Tensor,
    num_accepted_tokens: torch.Tensor,
    prev_positions: torch.Tensor,
    valid_sampled_token_count: torch.Tensor,
    prev_num_draft_tokens: torch.Tensor,
    cpu_num_computed_tokens: torch.Tensor,
    query_start_loc: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    *,
    positions: torch.Tensor | None = None,
    seq_lens: torch.Tensor | None = None,
    slot_mappings: Sequence[torch.Tensor] | None = None,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    idx_mapping: torch.Tensor | None = None,
    num_tokens_padded: int | None = None,
    num_reqs_padded: int | None = None,
    num_blocks: Sequence[torch.Tensor] | None = None,
) -> SpecDecodeInputs:
    """Correction, positions and seq_lens, and every group's slot mapping, in one op call.

    Equal to correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions,
    valid_sampled_token_count, prev_num_draft_tokens, cpu_num_computed_tokens), then
    prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc, ...), then for each
    group g compute_slot_mapping(query_start_loc, positions[:T], block_tables[g], block_sizes[g],
    out=slot_mappings[g], blocks_per_kv_block=blocks_per_kv_block[g], idx_mapping=idx_mapping,
    num_tokens_padded=num_tokens_padded) with the CP arguments when cp_sharded[g] (else W = 1).
    block_sizes, blocks_per_kv_block, cp_sharded and slot_mapping_enabled take one value per group
    or one for all; a group with slot_mapping_enabled False gets PAD for every token in
    [0, num_tokens_padded) and its block table is never read (nor checked against the positions).
    Outputs absent are allocated: positions int64 and slot mappings int64 of num_tokens_padded
    (default: positions.numel(), else query_start_loc[R], a host read), seq_lens int32 of
    num_reqs_padded (default R). On the CPU a rejected call writes nothing. Given idx_mapping,
    R = idx_mapping.numel() and query_start_loc may have more than R + 1 entries (the peer's
    num_reqs_padded + 1, padded with T): those past R are never read.

    num_blocks: one int32 tensor per group (or None), the blocks allocated to each row of its
    table, as compute_slot_mapping takes it: a position past its row's allocated blocks is a
    ValueError naming the request, the position and the count on the host, PAD on device paths.
    """
    if idx_mapping is not None and (isinstance(idx_mapping, torch.Tensor) and isinstance(query_start_loc, torch.Tensor)
                                    and query_start_loc.dim() == 1
                                    and query_start_loc.numel() > idx_mapping.numel() + 1):
        # The peer passes num_reqs_padded + 1 entries padded with T; R = idx_mapping.numel(), and
        # the entries past R are never read (a view, no copy). Before either path below: the
        # Python one sizes outputs it allocates from it.
        query_start_loc = query_start_loc[: idx_mapping.numel() + 1]
    # The usual arguments (lists of plain tensors, the outputs given, ints, True / False, lists of
    # one per group) are packed in one native call, which returns None for every other form:
    # those take the Python, with its conversions and its errors. At R=256 with one group the
    # Python cost about a tenth of the whole call.
    sizes = None
    if _native_sizes is not None and not _is_dynamo_compiling():
        sizes = _native_sizes(block_tables, slot_mappings, positions, seq_lens, num_tokens_padded, num_reqs_padded,
                              cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded,
                              slot_mapping_enabled)
    if sizes is None:
        block_tables, positions, seq_lens, slot_mappings, sizes = _op_arguments(
            query_start_loc, block_tables, block_sizes, positions, seq_lens, slot_mappings, blocks_per_kv_block,
            cp_sharded, slot_mapping_enabled, cp_world_size, cp_rank, cp_interleave, num_tokens_padded,
            num_reqs_padded)
        op = _OP.select()
    else:
        # A list of its own: the result's, which the caller's list may not change later.
        slot_mappings = slot_mappings[:]
        # _OP.select()'s eager native case without its frame, its Dynamo test made above; every
        # other case asks select().
        if _current_backend.get() == "native" and not _torch_compiler._is_compiling_flag:
            op = _OP.native_entry
        else:
            op = _OP.select()
    try:
        op(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
            prev_num_draft_tokens, cpu_num_computed_tokens, query_start_loc, positions, seq_lens, block_tables,
            slot_mappings, idx_mapping, sizes, [] if num_blocks is None else list(num_blocks))
    except ValueError as error:
        # A non-int packed into sizes is named by its place there: say which argument it was.
        raise named_after_the_wrapper(error, len(block_tables)) from None
    # The NamedTuple without its Python-level __new__ frame.
    return _new_tuple(SpecDecodeInputs, (positions, seq_lens, slot_mappings))
