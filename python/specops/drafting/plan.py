"""What a step over a given list of builders does, worked out once per (builders, draft index,
kind of step), and the output views it hands out per batch size.

Who owns a step's state: its plan (StepPlan: the static op arguments and, per batch size, the
output views) is owned by the StepPlans of the step's first builder (`builder.step_plans`), the
one place a step looks it up or keeps it; the persistent buffers it writes (DraftBuffers, with
their per-shape group-invariant views) are owned by each group's builder, one set per draft
index, and the plan only holds them; a runner's StepCache owns only results shared across the
groups of a step (entries with their fingerprints), never a plan or a buffer. A plan reads its
groups through their setups (drafting/setup.py), never through the builders.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

import torch

from specops._fastpath import row_views
from specops.drafting.buffers import MAX_CACHED_SHAPES, DraftBuffers, Generation
from specops.drafting.calls import dspark_arguments, format_arguments, sas_arguments
from specops.drafting.compressed import compressed_plan
from specops.drafting.invariant import DSparkWidths
from specops.ops.registry import SpecOp

if TYPE_CHECKING:
    from specops.drafting.setup import GroupSetup


class SasCall(NamedTuple):
    """One distinct sas_metadata of a step, computed by the first builder that has it."""

    key: tuple  # its StepCache entry
    invariant_slot: int  # the group-invariant entry whose CP metadata it reads
    rope_id: int  # the id of the RoPE cache its fingerprint is taken with
    writes: Generation  # the writes of its buffer
    arguments: dict[str, object]  # the op's keyword arguments but the batch's (calls.sas_arguments)
    out: torch.Tensor  # its buffer
    op: SpecOp  # sas_metadata, or kv_quant_sas_metadata on A5
    empty_kv: torch.Tensor | None  # A5: the one-entry seqused_kv an empty batch passes (never read)


class MetadataRow(NamedTuple):
    """What one group's metadata takes from the plan at one num_input_tokens."""

    slot_mapping: torch.Tensor
    dspark_swa_indices: torch.Tensor | None
    dspark_swa_lens: torch.Tensor | None
    window: tuple[int, int]
    invariant_slot: int  # its group-invariant entry among the step's
    sas_slot: int | None  # its sas_metadata among the step's (None: the group has none)


class ShapeOutputs(NamedTuple):
    """Everything a step at one num_input_tokens writes into or hands out."""

    format_arguments: dict[str, object]  # the format's arguments, its outputs one view per group (calls.format_arguments)
    dspark_arguments: list[dict[str, object]]  # per DSpark call, its arguments with its outputs (calls.dspark_arguments)
    rows: list[tuple]  # one per group: MetadataRow's fields


class Sharing(NamedTuple):
    """How the builders of a step share one kind of entry, for their keys in order."""

    firsts: list[int]  # the first builder of each distinct key
    later: list[int]  # per distinct key, how many later builders share it
    slot_of: list[int]  # each builder's slot among the distinct keys


class DSparkCall:
    """One dspark_swa_indices_multi call of a step: the DSpark groups that share a CP split and
    a draft length (all of them when the builders share one model)."""

    __slots__ = ("members", "count", "names", "windows", "num_speculative_tokens", "block_sizes", "widths", "cp_size",
                 "cp_rank", "invariant_slot", "arguments", "out_views", "lens_views")

    def __init__(self, setups: Sequence[GroupSetup], members: list[int], invariant_slot: int):
        self.members = members
        self.count = len(members)
        self.invariant_slot = invariant_slot  # the group-invariant entry whose batch views it reads
        groups = [setups[i].group for i in members]
        model = setups[members[0]].model
        self.names = [g.name for g in groups]
        self.windows = [g.sliding_window for g in groups]
        self.block_sizes = [g.block_size for g in groups]
        self.widths = [setups[i].dspark_width for i in members]
        self.num_speculative_tokens = model.num_speculative_tokens
        self.cp_size, self.cp_rank = model.cp_size, model.cp_rank
        self.arguments = dspark_arguments(windows=self.windows, num_speculative_tokens=self.num_speculative_tokens,
                                          block_sizes=self.block_sizes, widths=self.widths, cp_size=self.cp_size,
                                          cp_rank=self.cp_rank)
        # Where the plan's views of its groups' indices and lens are (StepPlan sets them).
        self.out_views = self.lens_views = slice(0)


class StepPlan:
    """What a step over a given list of builders, draft index and kind of step (causal or not)
    does, worked out once: which builder resolves each distinct group-invariant entry and each
    distinct sas_metadata entry (the others share it), the groups' static op arguments, and,
    per num_input_tokens, the output views. Only views are made per shape; a repeat finds them."""

    __slots__ = ("setups", "num_groups", "buffers", "names", "storage_block_sizes", "invariant_firsts",
                 "invariant_later", "invariant_of", "invariant_keys", "invariant_rope_ids", "sas_later", "sas_of",
                 "sas_calls", "sas_outputs", "windows", "dspark_calls", "dspark_names", "dspark_checks", "causal", "slot_buffers",
                 "actual_slot_groups", "max_num_tokens", "output_bases", "dspark_at", "dspark_lens_at", "no_dspark",
                 "one_rank", "format_arguments", "by_tokens", "compressed")

    def __init__(self, setups: Sequence[GroupSetup], buffers: Sequence[DraftBuffers], causal: bool):
        """setups: the step's groups, in order; buffers: each group's buffers for the step's draft
        index (its builder's, which owns them)."""
        self.setups = setups = tuple(setups)
        self.num_groups = len(setups)
        self.causal = causal
        self.buffers = list(buffers)
        self.names = [setup.group.name for setup in setups]
        self.storage_block_sizes = [setup.group.storage_block_size for setup in setups]
        self.windows = [setup.step_windows[causal] for setup in setups]
        invariants = _sharing([buffers.invariant_key for buffers in self.buffers])
        self.invariant_firsts, self.invariant_later = invariants.firsts, invariants.later
        self.invariant_of = invariants.slot_of
        self.invariant_keys = [self.buffers[index].invariant_key for index in self.invariant_firsts]
        self.invariant_rope_ids = [id(setups[index].model.rope_cos_sin_cache) for index in self.invariant_firsts]
        # Groups without a sliding window have no sas_metadata (slot None).
        with_sas = [index for index, buffers in enumerate(self.buffers) if buffers.sas_keys]
        sas = _sharing([self.buffers[index].sas_keys[causal] for index in with_sas])
        self.sas_later = sas.later
        self.sas_of = [None] * len(setups)
        for index, slot in zip(with_sas, sas.slot_of):
            self.sas_of[index] = slot
        self.sas_calls = [_sas_call(setups[index], self.buffers[index], self.invariant_of[index], causal)
                          for index in (with_sas[first] for first in sas.firsts)]
        self.sas_outputs = [call.out for call in self.sas_calls]
        dspark = [] if causal else [i for i, setup in enumerate(setups) if setup.dspark_width is not None]
        calls: dict[tuple[int, int, int], list[int]] = {}
        for i in dspark:
            model = setups[i].model
            calls.setdefault((model.cp_size, model.cp_rank, model.num_speculative_tokens), []).append(i)
        self.dspark_calls = [DSparkCall(setups, members, self.invariant_of[members[0]]) for members in calls.values()]
        self.dspark_names = [call.names for call in self.dspark_calls]  # whose block tables each call reads
        # The DSpark groups whose widths each invariant entry's batch is checked against.
        self.dspark_checks = []
        for slot in range(len(self.invariant_firsts)):
            members = [setups[i] for i in dspark if self.invariant_of[i] == slot]
            self.dspark_checks.append(DSparkWidths(members) if members else None)
        self.slot_buffers = [buffers.slot_mapping for buffers in self.buffers]
        # The groups whose slot mapping stops at the real tokens (GroupConfig.slot_mapping_format).
        self.actual_slot_groups = [index for index, setup in enumerate(setups)
                                   if setup.group.slot_mapping_format == "int32_actual"]
        self.max_num_tokens = min(setup.max_num_tokens for setup in setups)
        # What a size's views are made of (_make_outputs): every group's slot mapping buffer, then
        # each DSpark call's groups' indices and lens; per group, where its indices' view is.
        # -1: a group without DSpark indices (the None _make_outputs puts past the views).
        self.output_bases = list(self.slot_buffers)
        self.dspark_at = [-1] * len(setups)
        self.dspark_lens_at = [-1] * len(setups)
        for call in self.dspark_calls:
            start, end = len(self.output_bases), len(self.output_bases) + 2 * call.count
            call.out_views, call.lens_views = slice(start, end, 2), slice(start + 1, end, 2)
            for index in call.members:
                self.dspark_at[index], self.dspark_lens_at[index] = len(self.output_bases), len(self.output_bases) + 1
                self.output_bases += (self.buffers[index].dspark_indices, self.buffers[index].dspark_lens)
        self.no_dspark = [None] * len(setups)
        self.one_rank = all(call.cp_size == 1 for call in self.dspark_calls)
        self.format_arguments = format_arguments(self.storage_block_sizes)
        self.by_tokens: dict[int, ShapeOutputs] = {}
        # Compressed groups' lightning-indexer schedule and compressor metadata (None without any).
        self.compressed = compressed_plan(setups, self.buffers, self.invariant_of, causal)

    def outputs(self, num_input_tokens: int) -> ShapeOutputs:
        """For num_input_tokens: the slot mapping views (the format's outputs), each DSpark call's
        outputs, and per builder its metadata row. Made in one row_views call on the first step
        at that size, checked against the builders' maximum then."""
        outputs = self.by_tokens.get(num_input_tokens)
        if outputs is None:
            outputs = self._make_outputs(num_input_tokens)
            if len(self.by_tokens) >= MAX_CACHED_SHAPES:
                self.by_tokens.clear()
            self.by_tokens[num_input_tokens] = outputs
        return outputs

    def _make_outputs(self, num_input_tokens: int) -> ShapeOutputs:
        if not 0 <= num_input_tokens <= self.max_num_tokens:
            raise ValueError(f"num_input_tokens must be in [0, max_num_tokens = {self.max_num_tokens}], "
                             f"got {num_input_tokens}")
        num_groups = self.num_groups
        # The slot mappings of every group, then the indices and lens of each DSpark call's groups
        # (its rows are this rank's slice of the padded stream): self.output_bases' order.
        if self.one_rank:
            bounds = [0, num_input_tokens] * len(self.output_bases)  # every view has num_input_tokens rows
        else:
            bounds = [0, num_input_tokens] * num_groups
            for call in self.dspark_calls:
                rows = -(-num_input_tokens // call.cp_size)
                bounds += (0, rows, 0, rows) * call.count
        views = row_views(self.output_bases, bounds)
        format_call = self.format_arguments.copy()
        # Each row a plain tuple of MetadataRow's fields, made by zip (in C, one tuple a group): a
        # step's loop over the groups unpacks an exact tuple directly, a NamedTuple through an
        # iterator (the count is in docs/changelog.md).
        if not self.dspark_calls:
            format_call["out"] = views
            rows = list(zip(views, self.no_dspark, self.no_dspark, self.windows, self.invariant_of, self.sas_of))
            return ShapeOutputs(format_call, [], rows)
        per_call = []
        for call in self.dspark_calls:
            arguments = call.arguments.copy()
            arguments["num_tokens"] = num_input_tokens
            arguments["out"] = views[call.out_views]
            arguments["out_lens"] = views[call.lens_views]
            per_call.append(arguments)
        format_call["out"] = views[:num_groups]
        views.append(None)  # what dspark_at's -1 (a group without DSpark indices) reads
        view = views.__getitem__
        rows = list(zip(views, map(view, self.dspark_at), map(view, self.dspark_lens_at), self.windows,
                        self.invariant_of, self.sas_of))
        return ShapeOutputs(format_call, per_call, rows)

    def forget_shapes(self) -> None:
        """Drops what was made per batch shape: the output views and the group-invariant views."""
        self.by_tokens.clear()
        for index in self.invariant_firsts:
            self.buffers[index].forget_shapes()


def _sas_call(setup: GroupSetup, buffers: DraftBuffers, invariant_slot: int, causal: bool) -> SasCall:
    fixed = setup.sas_arguments[causal]
    op, arguments = sas_arguments(fixed, buffers.sas)
    empty_kv = torch.zeros(1, dtype=torch.int32, device=buffers.sas.device) if fixed.a5 else None
    return SasCall(key=buffers.sas_keys[causal], invariant_slot=invariant_slot,
                   rope_id=id(setup.model.rope_cos_sin_cache), writes=buffers.sas_writes, arguments=arguments,
                   out=buffers.sas, op=op, empty_kv=empty_kv)


def _sharing(keys: list) -> Sharing:
    slots: dict = {}
    sharing = Sharing(firsts=[], later=[], slot_of=[])
    for index, key in enumerate(keys):
        slot = slots.get(key)
        if slot is None:
            slot = slots[key] = len(sharing.firsts)
            sharing.firsts.append(index)
            sharing.later.append(0)
        else:
            sharing.later[slot] += 1
        sharing.slot_of.append(slot)
    return sharing


class StepBuilder(Protocol):
    """What a step reads off each builder it is given (drafting.builder.DraftMetadataBuilder):
    the group's setup, the group's buffers for a draft index, and, on the step's first builder,
    the StepPlans that owns the step's plan."""

    setup: GroupSetup
    step_plans: StepPlans

    def buffers(self, draft_index: int) -> DraftBuffers: ...


class StepPlans:
    """The one owner of the plans of the steps a builder is the first group of (a runner calls
    the same list of builders every step), by (the step's builders, draft index, kind of step)."""

    __slots__ = ("plans",)

    def __init__(self) -> None:
        self.plans: dict[tuple, StepPlan] = {}

    def plan(self, builders: Sequence[StepBuilder], draft_index: int, causal: bool) -> StepPlan:
        """The plan of a step over these builders (this StepPlans' owner first), made on its
        first step (the builders' buffers for draft_index allocated then)."""
        key = (tuple(builders), draft_index, causal)
        plan = self.plans.get(key)
        if plan is None:
            plan = StepPlan([builder.setup for builder in builders],
                            [builder.buffers(draft_index) for builder in builders], causal)
            if len(self.plans) >= MAX_CACHED_SHAPES:
                self.plans.clear()
            self.plans[key] = plan
        return plan

    def forget_shapes(self) -> None:
        """Every plan's per-shape views dropped (StepPlan.forget_shapes)."""
        for plan in self.plans.values():
            plan.forget_shapes()
