"""One draft step over every builder: the group-invariant entries and sas_metadata resolved
once, then one launch for every group's slot mapping and one for every DSpark group's indices."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from specops.drafting.cache import StepCache, logger
from specops.drafting.configs import _CP_FIELD, CommonDraftInputs, DraftAttnMetadata
from specops.drafting.plan import _DSparkCall, _plan
from specops.ops.cp_local_metadata import CPLocalMetadata
from specops.ops.dspark_swa_indices_multi import _OP as _DSPARK_SWA_INDICES_MULTI_OP
from specops.ops.format_slot_mapping_blocks_multi import _OP as _FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP
from specops.ops.sas_metadata import _OP as _SAS_METADATA_OP
from specops.sas_layout import LAYOUT_KV_CODES, LAYOUT_Q_CODES

if TYPE_CHECKING:
    from specops.drafting.builder import DraftMetadataBuilder, _Invariant

# sas_metadata's layout codes for the draft builders' call (_call_sas).
_LAYOUT_Q_TND = LAYOUT_Q_CODES["TND"]
_LAYOUT_KV_PAGED = LAYOUT_KV_CODES["PA_ND"]
_LAYOUT_KV_TND = LAYOUT_KV_CODES["TND"]


def _served(shared: StepCache | None, key: tuple[Hashable, Hashable], times: int) -> None:
    """Counts `times` hits of key in `shared`: the later groups of a step that share the value
    the step just looked up or computed (nothing runs between the groups of a step, so a lookup
    would find that same entry). None: the step's own cache, which nobody reads after the step,
    so it keeps no entries and no counts; the debug lines are written all the same."""
    if shared is not None:
        shared.hits += times
    if logger.isEnabledFor(logging.DEBUG):
        for _ in range(times):
            logger.debug("StepCache hit: %s", key)


def _build_step(builders: Sequence[DraftMetadataBuilder], common: CommonDraftInputs, draft_index: int,
                shared: StepCache | None, fingerprints: dict[int, tuple | None]) -> list[DraftAttnMetadata]:
    """The metadata of every builder for one step sharing `common`: each distinct group-invariant
    entry and sas_metadata looked up in `shared` or computed by the first builder that needs it
    (the others share it; shared None: a cache that only lives for this step, so nothing to look
    up or store), then one format_slot_mapping_blocks_multi call for every group's slot mapping
    and, on a non-causal step, one dspark_swa_indices_multi call for every DSpark group.
    fingerprints: the inputs' fingerprint per RoPE cache tensor id (unused without `shared`)."""
    if not builders:
        return []
    plan = _plan(builders, draft_index, common.causal)
    slot_outputs, dspark_call_args, rows = plan.outputs(common.num_input_tokens)
    # The groups' own inputs before anything is written: a missing one is a clear error.
    try:
        slot_mappings = [common.slot_mappings[name] for name in plan.names]
        dspark_tables = [[common.block_tables[name] for name in call.names] for call in plan.dspark_calls]
    except KeyError as missing:
        field = "slot_mappings" if missing.args[0] not in common.slot_mappings else "block_tables"
        _group_input(getattr(common, field), missing.args[0], field)
        raise
    for name, slot_mapping in zip(plan.names, slot_mappings):
        if isinstance(slot_mapping, torch.Tensor) and slot_mapping.size(0) < common.num_actual_tokens:
            raise ValueError(f"slot_mappings[{name!r}] must have at least num_actual_tokens = "
                             f"{common.num_actual_tokens} entries, got {slot_mapping.size(0)}")

    # Hits are counted in a runner's cache and written to the debug log, if anyone looks.
    counted = shared is not None or logger.isEnabledFor(logging.DEBUG)
    invariants = []
    for slot, index in enumerate(plan.invariant_firsts):
        builder = builders[index]
        invariant = builder._invariant(common, plan.buffers[index], shared, fingerprints.get(id(builder._rope_cache)),
                                       plan.dspark_checks[slot])
        if counted and plan.invariant_later[slot]:
            _served(shared, plan.buffers[index].invariant_key, plan.invariant_later[slot])
        invariants.append(invariant)
    if shared is None:  # each computed here, as _sas does without a cache
        _run_sas(plan.sas_calls, invariants)
        sas = plan.sas_outputs
    else:
        sas = []
        for index in plan.sas_firsts:
            builder = builders[index]
            sas.append(builder._sas(common, invariants[plan.invariant_of[index]], plan.buffers[index], shared,
                                    fingerprints.get(id(builder._rope_cache))))
    if counted:
        for slot, later in enumerate(plan.sas_later):
            if later:
                _served(shared, plan.buffers[plan.sas_firsts[slot]].sas_keys[plan.causal], later)

    _run_format(slot_mappings, plan.storage_block_sizes, common.num_actual_tokens, slot_outputs)
    if dspark_tables:
        _run_dspark(plan.dspark_calls, dspark_call_args, dspark_tables, invariants)

    return [DraftAttnMetadata(*invariants[invariant_slot].fields, None if sas_slot is None else sas[sas_slot],
                              slot_mapping, indices, lens, window)
            for slot_mapping, indices, lens, window, invariant_slot, sas_slot in rows]


# The groups' own launches, each with the assembly of its arguments from the step's data. The ops
# are called through their dispatch objects: their wrappers only convert lists and allocate
# absent outputs.

def _run_format(slot_mappings: list[torch.Tensor], block_sizes: list[int], num_slots: int,
                outputs: list[torch.Tensor]) -> None:
    """Every group's slot mapping, formatted in one launch."""
    _FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP.select()(slot_mappings, block_sizes, num_slots, outputs)


def _run_sas(sas_calls: list[tuple], invariants: list[_Invariant]) -> None:
    """Each distinct sas_metadata of the step (_StepPlan.sas_calls), into its buffer."""
    sas_op = _SAS_METADATA_OP.select()
    for invariant_slot, writes, arguments, out in sas_calls:
        writes.generation += 1  # before the write: an entry holding this buffer is dead from here on
        _call_sas(sas_op, invariants[invariant_slot].fields[_CP_FIELD], arguments, out)


def _call_sas(sas_op, cp: CPLocalMetadata, arguments: tuple, out: torch.Tensor) -> None:
    """sas_metadata with the arguments vllm-ascend's DSA draft builders pass: the CP-local query
    starts and KV lengths (TND queries, paged KV), one KV head, no compressed KV, the band mask
    of the step's window. arguments: the fixed part of _StepPlan.sas_calls."""
    num_heads_q, head_dim, left, right, num_cube_cores, num_vector_cores, ascend950 = arguments
    num_reqs = cp.local_seq_lens.numel()
    # Without requests seqused_kv is empty, which the kernel reads as not provided and PA_ND
    # refuses; under the TND KV layout the same empty batch gets its schedule (core 0 over none).
    layout_kv = _LAYOUT_KV_PAGED if num_reqs else _LAYOUT_KV_TND
    # The op itself, as for the format and DSpark ops: the wrapper only maps the strings and
    # allocates an absent out.
    sas_op(num_heads_q, 1, head_dim, cp.local_query_start_loc, None, None, None, cp.local_seq_lens, num_reqs,
           cp.max_local_query_len, cp.max_local_seq_len, 0, 0, 1, 4, 3, left, right, _LAYOUT_Q_TND, layout_kv, True,
           False, num_cube_cores, num_vector_cores, ascend950, out)


def _run_dspark(calls: list[_DSparkCall], templates: list[list], tables: list[list[torch.Tensor]],
                invariants: list[_Invariant]) -> None:
    """Every DSpark group's indices: one launch per call (one per CP split and draft length),
    its arguments the plan's template with the step's block tables and batch filled in."""
    dspark_op = _DSPARK_SWA_INDICES_MULTI_OP.select()
    for call, template, call_tables in zip(calls, templates, tables):
        invariant = invariants[call.invariant_slot]
        arguments = template.copy()
        arguments[0], arguments[1], arguments[2] = call_tables, invariant.query_start_loc, invariant.seq_lens
        dspark_op(*arguments)


def _group_input(tensors: Mapping[str, torch.Tensor], name: str, field: str) -> torch.Tensor:
    tensor = tensors.get(name)
    if tensor is None:
        raise ValueError(f"{field} must hold an entry for group {name!r}, got keys {sorted(tensors)}")
    return tensor


def build_draft_attn_metadata(
    builders: Sequence[DraftMetadataBuilder],
    common: CommonDraftInputs | Sequence[CommonDraftInputs],
    draft_index: int,
    *,
    cache: StepCache | None = None,
    dummy_run: bool = False,
) -> list[DraftAttnMetadata]:
    """Every builder's metadata for draft step draft_index, one per builder, in order.

    One StepCache serves the whole group loop: `cache` when the runner keeps one for the step,
    else a new one. The groups' own ops run once for all of them: one call formats every
    group's slot mapping, one builds every DSpark group's indices. dummy_run=True always takes a
    new cache, so dummy inputs never read or leave entries in the runner's; the groups still
    share within the dummy run, so its tensors sit at the addresses a real step's do. `common`
    as a sequence (one CommonDraftInputs per builder) is the path for per-group-updated inputs:
    every group then computes everything itself, exactly as without a cache.
    """
    if isinstance(common, CommonDraftInputs):
        if dummy_run or cache is None:
            # A cache of this step alone: it starts empty and nobody reads it afterwards, so the
            # groups share through the step itself, with no lookup, entry or fingerprint.
            return _build_step(builders, common, draft_index, None, {})
        # No runner code runs between the groups of this step, so the inputs cannot change in
        # it: their fingerprint is taken once (once per RoPE cache tensor, which it includes).
        fingerprints: dict[int, tuple | None] = {}
        for builder in builders:
            rope = id(builder._rope_cache)
            if rope not in fingerprints:
                fingerprints[rope] = builder._fingerprint(common)
        return _build_step(builders, common, draft_index, cache, fingerprints)
    if len(common) != len(builders):
        raise ValueError(
            f"common must be one CommonDraftInputs or one per builder ({len(builders)}), got {len(common)}")
    return [builder.build_for_drafting(inputs, draft_index, None) for builder, inputs in zip(builders, common)]
