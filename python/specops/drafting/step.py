"""One draft step over every builder: the group-invariant entries and sas_metadata resolved
once, then one launch for every group's slot mapping and one for every DSpark group's indices.

A step reads a builder only for its setup, its buffers and, on the first builder, the StepPlans
that owns the step's plan (plan.StepBuilder); everything else comes from the plan."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence

import torch

from specops._fastpath import items, items_each, rows_below
from specops.drafting.cache import StepCache, logger
from specops.drafting.calls import DSPARK_SWA_INDICES_MULTI, FORMAT_SLOT_MAPPING_BLOCKS_MULTI, set_sas_batch
from specops.drafting.configs import CommonDraftInputs, DraftAttnMetadata, checked_draft_index, group_metadata
from specops.drafting.invariant import GroupInvariant, check_step_inputs, fingerprint, resolve_invariant, step_inputs
from specops.drafting.plan import DSparkCall, SasCall, StepBuilder, StepPlan


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


def build_step(builders: Sequence[StepBuilder], common: CommonDraftInputs, draft_index: int,
               shared: StepCache | None, fingerprints: dict[int, tuple | None]) -> list[DraftAttnMetadata]:
    """The metadata of every builder for one step sharing `common`: each distinct group-invariant
    entry and sas_metadata looked up in `shared` or computed by the first builder that needs it
    (the others share it; shared None: a cache that only lives for this step, so nothing to look
    up or store), then one format_slot_mapping_blocks_multi call for every group's slot mapping
    and, on a non-causal step, one dspark_swa_indices_multi call for every DSpark group.
    fingerprints: the inputs' fingerprint per RoPE cache tensor id (unused without `shared`)."""
    if not builders:
        return []
    plan = builders[0].step_plans.plan(builders, draft_index, common.causal)
    outputs = plan.outputs(common.num_input_tokens)
    # The groups' own inputs before anything is written: a missing one is a clear error. Looked
    # up natively (specops._fastpath.items), one call for all groups where a comprehension is a frame each.
    try:
        slot_mappings = items(common.slot_mappings, plan.names)
        dspark_tables = items_each(common.block_tables, plan.dspark_names)
        compressed_tables = plan.compressed.tables(common) if plan.compressed is not None else None
    except KeyError as missing:
        field = "slot_mappings" if missing.args[0] not in common.slot_mappings else "block_tables"
        _group_input(getattr(common, field), missing.args[0], field)
        raise
    # One native pass says whether any slot mapping may be short (in place of a size() call per
    # group); only then does the check that names it run.
    if rows_below(slot_mappings, common.num_actual_tokens):
        _check_slot_mapping_rows(plan.names, slot_mappings, common.num_actual_tokens)

    # Hits are counted in a runner's cache and written to the debug log, if anyone looks.
    counted = shared is not None or logger.isEnabledFor(logging.DEBUG)
    invariants = []
    for slot, index in enumerate(plan.invariant_firsts):
        invariants.append(resolve_invariant(plan.setups[index], common, plan.buffers[index], shared,
                                            fingerprints.get(plan.invariant_rope_ids[slot]), plan.dspark_checks[slot]))
        if counted and plan.invariant_later[slot]:
            _served(shared, plan.invariant_keys[slot], plan.invariant_later[slot])
    sas = _resolve_sas(plan, invariants, shared, fingerprints, common)
    if counted:
        for call, later in zip(plan.sas_calls, plan.sas_later):
            if later:
                _served(shared, call.key, later)

    if compressed_tables is not None:
        qli = plan.compressed.resolve_qli(invariants, shared, fingerprints, step_inputs(common))
        compressor = plan.compressed.run_compressor(common, invariants, compressed_tables)

    _run_format(outputs.format_arguments, slot_mappings, common.num_actual_tokens)
    if dspark_tables:
        _run_dspark(plan.dspark_calls, outputs.dspark_arguments, dspark_tables, invariants)

    metadata = [group_metadata(invariants[invariant_slot].shared,
                               sas_metadata=None if sas_slot is None else sas[sas_slot], slot_mapping=slot_mapping,
                               dspark_swa_indices=indices, dspark_swa_lens=lens, window=window)
                for slot_mapping, indices, lens, window, invariant_slot, sas_slot in outputs.rows]
    for index in plan.actual_slot_groups:
        metadata[index].slot_mapping = metadata[index].slot_mapping[:common.num_actual_tokens]
    if compressed_tables is not None:
        plan.compressed.attach(metadata, qli, compressor)
    return metadata


def _resolve_sas(plan: StepPlan, invariants: list[GroupInvariant], shared: StepCache | None,
                 fingerprints: dict[int, tuple | None], common: CommonDraftInputs) -> list[torch.Tensor]:
    """Each distinct sas_metadata of the step: from `shared` when a group with the same
    arguments stored it for these inputs, else computed into its first builder's buffer (and
    stored there). Without `shared` every one is computed, with no lookup."""
    if shared is None:
        _run_sas(plan.sas_calls, invariants)
        return plan.sas_outputs
    sas = []
    for call in plan.sas_calls:
        call_fingerprint = fingerprints.get(call.rope_id)
        value = shared.get(call.key, call_fingerprint)
        if value is None:
            _run_sas((call,), invariants)
            value = call.out
            shared.put(call.key, call_fingerprint, value, keep_alive=step_inputs(common), owner=call.writes)
        sas.append(value)
    return sas


# The groups' own launches, each with the assembly of its arguments from the step's data: the
# plan's keyword arguments (calls.py) with the step's entries set by name, in place (no copy per
# launch; the dict keeps the last step's inputs referenced until the next step sets them).

def _run_format(arguments: dict[str, object], slot_mappings: list[torch.Tensor], num_slots: int) -> None:
    """Every group's slot mapping, formatted in one launch (arguments: the size's from
    calls.format_arguments)."""
    arguments["slot_mappings"] = slot_mappings
    arguments["num_slots"] = num_slots
    FORMAT_SLOT_MAPPING_BLOCKS_MULTI.select()(**arguments)


def _run_sas(calls: Sequence[SasCall], invariants: list[GroupInvariant]) -> None:
    """Each call's sas_metadata, into its buffer, for the batch of its group-invariant entry (its
    CP-local query starts and KV lengths; the rest: calls.sas_arguments)."""
    for call in calls:
        call.writes.generation += 1  # before the write: an entry holding this buffer is dead from here on
        invariant = invariants[call.invariant_slot]
        cp = invariant.shared.cp
        # The host copies on every device: the op plans on the host and reads no device value.
        local_query_start_loc, local_seq_lens = invariant.local_lengths_cpu()
        set_sas_batch(call.arguments, call.empty_kv, local_query_start_loc, local_seq_lens, cp.max_local_query_len,
                      cp.max_local_seq_len)
        call.op.select()(**call.arguments)


def _run_dspark(calls: list[DSparkCall], arguments: list[dict[str, object]], tables: list[list[torch.Tensor]],
                invariants: list[GroupInvariant]) -> None:
    """Every DSpark group's indices: one launch per call (one per CP split and draft length),
    with the step's block tables and batch (the rest: the size's from calls.dspark_arguments)."""
    dspark_op = DSPARK_SWA_INDICES_MULTI.select()
    for call, call_arguments, call_tables in zip(calls, arguments, tables):
        invariant = invariants[call.invariant_slot]
        call_arguments["block_tables"] = call_tables
        call_arguments["query_start_loc"] = invariant.query_start_loc
        call_arguments["seq_lens"] = invariant.seq_lens
        dspark_op(**call_arguments)


def step_fingerprints(builders: Sequence[StepBuilder], common: CommonDraftInputs) -> dict[int, tuple] | None:
    """The inputs' fingerprint per RoPE cache tensor id (which it includes), after the inputs
    are checked (a fingerprint reads attributes only tensors have). No runner code runs between
    the groups of a step, so the inputs cannot change in it: it is taken once. None when an
    input is an inference tensor (no version counter to fingerprint): the step is then built
    without the runner's cache, the groups sharing through the step alone."""
    check_step_inputs(common)
    fingerprints: dict[int, tuple] = {}
    for builder in builders:
        rope = builder.setup.model.rope_cos_sin_cache
        if id(rope) not in fingerprints:
            fingerprints[id(rope)] = fingerprint(common, rope)
            if fingerprints[id(rope)] is None:
                return None
    return fingerprints


def _check_slot_mapping_rows(names: list[str], slot_mappings: list, num_actual_tokens: int) -> None:
    for name, slot_mapping in zip(names, slot_mappings):
        if isinstance(slot_mapping, torch.Tensor) and slot_mapping.size(0) < num_actual_tokens:
            raise ValueError(f"slot_mappings[{name!r}] must have at least num_actual_tokens = "
                             f"{num_actual_tokens} entries, got {slot_mapping.size(0)}")


def _group_input(tensors: Mapping[str, torch.Tensor], name: str, field: str) -> torch.Tensor:
    tensor = tensors.get(name)
    if tensor is None:
        raise ValueError(f"{field} must hold an entry for group {name!r}, got keys {sorted(tensors)}")
    return tensor


def build_draft_attn_metadata(
    builders: Sequence[StepBuilder],
    common: CommonDraftInputs | Sequence[CommonDraftInputs],
    draft_index: int,
    *,
    cache: StepCache | None = None,
    dummy_run: bool = False,
) -> list[DraftAttnMetadata]:
    """Every builder's metadata for draft step draft_index, one per builder (each a
    DraftMetadataBuilder), in order.

    One StepCache serves the whole group loop: `cache` when the runner keeps one for the step,
    else a new one. The groups' own ops run once for all of them: one call formats every
    group's slot mapping, one builds every DSpark group's indices. dummy_run=True always takes a
    new cache, so dummy inputs never read or leave entries in the runner's; the groups still
    share within the dummy run, so its tensors sit at the addresses a real step's do. `common`
    as a sequence (one CommonDraftInputs per builder) is the path for per-group-updated inputs:
    every group then computes everything itself, exactly as without a cache.
    """
    if builders:
        draft_index = checked_draft_index(draft_index, builders[0].setup.model.num_speculative_tokens)
    if isinstance(common, CommonDraftInputs):
        fingerprints = None if dummy_run or cache is None else step_fingerprints(builders, common)
        if fingerprints is None:
            # A cache of this step alone: it starts empty and nobody reads it afterwards, so the
            # groups share through the step itself, with no lookup, entry or fingerprint.
            return build_step(builders, common, draft_index, None, {})
        return build_step(builders, common, draft_index, cache, fingerprints)
    if len(common) != len(builders):
        raise ValueError(
            f"common must be one CommonDraftInputs or one per builder ({len(builders)}), got {len(common)}")
    # Each group alone, as its builder's build_for_drafting without a cache.
    return [build_step((builder,), inputs, draft_index, None, {})[0] for builder, inputs in zip(builders, common)]
