"""One draft step over every builder: the group-invariant entries and sas_metadata resolved
once, then one launch for every group's slot mapping and one for every DSpark group's indices."""

from __future__ import annotations

import collections
import inspect
import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from specops.drafting.cache import StepCache, logger
from specops.drafting.configs import CommonDraftInputs, DraftAttnMetadata
from specops.drafting.invariant import GroupInvariant, fingerprint, resolve_invariant, step_inputs
from specops.drafting.plan import DSparkCall, DSparkShape, SasCall, StepPlan, step_plan
from specops.ops._op import SpecOp
from specops.ops.dspark_swa_indices_multi import _OP as _DSPARK_SWA_INDICES_MULTI_OP
from specops.ops.format_slot_mapping_blocks_multi import _OP as _FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP
from specops.ops.sas_metadata import _OP as _SAS_METADATA_OP
from specops.sas_layout import LAYOUT_KV_CODES, LAYOUT_Q_CODES

if TYPE_CHECKING:
    from specops.drafting.builder import DraftMetadataBuilder


def _schema_arguments(op: SpecOp) -> type:
    """A namedtuple of the op's schema arguments in the schema's order (its check takes them so).
    The layer calls an op's dispatch object, which takes positions only, as
    `op.select()(*Arguments(name=value, ...))`: every argument written by name."""
    return collections.namedtuple(f"{op.name}_arguments", inspect.signature(op.check).parameters)


_FormatArguments = _schema_arguments(_FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP)
_SasArguments = _schema_arguments(_SAS_METADATA_OP)
_DSparkArguments = _schema_arguments(_DSPARK_SWA_INDICES_MULTI_OP)
# sas_metadata's layout codes for the draft builders' call (_run_sas).
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


def build_step(builders: Sequence[DraftMetadataBuilder], common: CommonDraftInputs, draft_index: int,
               shared: StepCache | None, fingerprints: dict[int, tuple | None]) -> list[DraftAttnMetadata]:
    """The metadata of every builder for one step sharing `common`: each distinct group-invariant
    entry and sas_metadata looked up in `shared` or computed by the first builder that needs it
    (the others share it; shared None: a cache that only lives for this step, so nothing to look
    up or store), then one format_slot_mapping_blocks_multi call for every group's slot mapping
    and, on a non-causal step, one dspark_swa_indices_multi call for every DSpark group.
    fingerprints: the inputs' fingerprint per RoPE cache tensor id (unused without `shared`)."""
    if not builders:
        return []
    plan = step_plan(builders, draft_index, common.causal)
    outputs = plan.outputs(common.num_input_tokens)
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
        invariants.append(resolve_invariant(builders[index], common, plan.buffers[index], shared,
                                            fingerprints.get(plan.invariant_rope_ids[slot]), plan.dspark_checks[slot]))
        if counted and plan.invariant_later[slot]:
            _served(shared, plan.invariant_keys[slot], plan.invariant_later[slot])
    sas = _resolve_sas(plan, invariants, shared, fingerprints, common)
    if counted:
        for call, later in zip(plan.sas_calls, plan.sas_later):
            if later:
                _served(shared, call.key, later)

    _run_format(slot_mappings, plan.storage_block_sizes, common.num_actual_tokens, outputs.slot_mappings)
    if dspark_tables:
        _run_dspark(plan.dspark_calls, outputs.dspark, dspark_tables, invariants)

    # DraftAttnMetadata's group-invariant fields first, in its order (configs.SharedFields).
    return [DraftAttnMetadata(*invariants[invariant_slot].shared, None if sas_slot is None else sas[sas_slot],
                              slot_mapping, indices, lens, window)
            for slot_mapping, indices, lens, window, invariant_slot, sas_slot in outputs.rows]


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


# The groups' own launches, each with the assembly of its arguments from the step's data. The ops
# are called through their dispatch objects: their wrappers only convert lists and allocate
# absent outputs.

def _run_format(slot_mappings: list[torch.Tensor], block_sizes: list[int], num_slots: int,
                outputs: list[torch.Tensor]) -> None:
    """Every group's slot mapping, formatted in one launch."""
    _FORMAT_SLOT_MAPPING_BLOCKS_MULTI_OP.select()(*_FormatArguments(
        slot_mappings=slot_mappings, block_sizes=block_sizes, num_slots=num_slots, out=outputs))


def _run_sas(calls: Sequence[SasCall], invariants: list[GroupInvariant]) -> None:
    """sas_metadata for each call, into its buffer, with the arguments vllm-ascend's DSA draft
    builders pass: the CP-local query starts and KV lengths (TND queries, paged KV), one KV
    head, no compressed KV, the band mask of the step's window."""
    sas_op = _SAS_METADATA_OP.select()
    for call in calls:
        call.writes.generation += 1  # before the write: an entry holding this buffer is dead from here on
        cp = invariants[call.invariant_slot].shared.cp
        fixed = call.arguments
        num_reqs = cp.local_seq_lens.numel()
        sas_op(*_SasArguments(
            num_heads_q=fixed.num_heads_q, num_heads_kv=1, head_dim=fixed.head_dim,
            cu_seqlens_q=cp.local_query_start_loc, cu_seqlens_ori_kv=None, cu_seqlens_cmp_kv=None, seqused_q=None,
            seqused_kv=cp.local_seq_lens, batch_size=num_reqs, max_seqlen_q=cp.max_local_query_len,
            max_seqlen_kv=cp.max_local_seq_len, ori_topk=0, cmp_topk=0, cmp_ratio=1, ori_mask_mode=4,
            cmp_mask_mode=3, ori_win_left=fixed.ori_win_left, ori_win_right=fixed.ori_win_right,
            layout_q=_LAYOUT_Q_TND,
            # Without requests seqused_kv is empty, which the kernel reads as not provided and PA_ND
            # refuses; under the TND KV layout the same empty batch gets its schedule (core 0 over none).
            layout_kv=_LAYOUT_KV_PAGED if num_reqs else _LAYOUT_KV_TND, has_ori_kv=True, has_cmp_kv=False,
            num_cube_cores=fixed.num_cube_cores, num_vector_cores=fixed.num_vector_cores,
            ascend950=fixed.ascend950, out=call.out))


def _run_dspark(calls: list[DSparkCall], shapes: list[DSparkShape], tables: list[list[torch.Tensor]],
                invariants: list[GroupInvariant]) -> None:
    """Every DSpark group's indices: one launch per call (one per CP split and draft length),
    with the step's block tables and batch."""
    dspark_op = _DSPARK_SWA_INDICES_MULTI_OP.select()
    for call, shape, call_tables in zip(calls, shapes, tables):
        invariant = invariants[call.invariant_slot]
        dspark_op(*_DSparkArguments(
            block_tables=call_tables, query_start_loc=invariant.query_start_loc, seq_lens=invariant.seq_lens,
            windows=call.windows, num_speculative_tokens=call.num_speculative_tokens, block_sizes=call.block_sizes,
            num_tokens=shape.num_tokens, widths=call.widths, cp_size=call.cp_size, cp_rank=call.cp_rank,
            out=shape.out, out_lens=shape.out_lens))


def step_fingerprints(builders: Sequence[DraftMetadataBuilder], common: CommonDraftInputs) -> dict[int, tuple]:
    """The inputs' fingerprint per RoPE cache tensor id (which it includes). No runner code runs
    between the groups of a step, so the inputs cannot change in it: it is taken once."""
    fingerprints: dict[int, tuple] = {}
    for builder in builders:
        rope = builder.model.rope_cos_sin_cache
        if id(rope) not in fingerprints:
            fingerprints[id(rope)] = fingerprint(common, rope)
    return fingerprints


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
            return build_step(builders, common, draft_index, None, {})
        return build_step(builders, common, draft_index, cache, step_fingerprints(builders, common))
    if len(common) != len(builders):
        raise ValueError(
            f"common must be one CommonDraftInputs or one per builder ({len(builders)}), got {len(common)}")
    return [builder.build_for_drafting(inputs, draft_index, None) for builder, inputs in zip(builders, common)]
