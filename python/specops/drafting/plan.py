"""What a step over a given list of builders does, worked out once per (builders, draft index,
kind of step), and the output views it hands out per batch size."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from specops.drafting.buffers import _MAX_CACHED_SHAPES, _row_views

if TYPE_CHECKING:
    from specops.drafting.builder import DraftMetadataBuilder, _Invariant


class _DSparkCall:
    """One dspark_swa_indices_multi call of a step: the DSpark groups that share a CP split and
    a draft length (all of them when the builders share one model)."""

    __slots__ = ("members", "names", "windows", "num_speculative_tokens", "block_sizes", "widths", "cp_size",
                 "cp_rank", "invariant_slot")

    def __init__(self, builders: Sequence[DraftMetadataBuilder], members: list[int], invariant_slot: int):
        self.members = members
        self.invariant_slot = invariant_slot  # the group-invariant entry whose batch views it reads
        groups = [builders[i].group for i in members]
        model = builders[members[0]].model
        self.names = [g.name for g in groups]
        self.windows = [g.sliding_window for g in groups]
        self.block_sizes = [g.block_size for g in groups]
        self.widths = [builders[i].dspark_width for i in members]
        self.num_speculative_tokens = model.num_speculative_tokens
        self.cp_size, self.cp_rank = model.cp_size, model.cp_rank


class _DSparkWidths:
    """The DSpark groups of a step that share one group-invariant entry, for the check that each
    request's row fits: one comparison when no request can see more than the narrowest room."""

    __slots__ = ("builders", "room", "decode_threshold")

    def __init__(self, builders: list[DraftMetadataBuilder]):
        self.builders = builders
        # The longest query every group's row holds: width - window.
        self.room = min(b.dspark_width - b.group.sliding_window for b in builders)
        self.decode_threshold = builders[0]._decode_threshold  # one model: one num_speculative_tokens

    def check(self, invariant: _Invariant) -> None:
        if (self.decode_threshold if invariant.all_decodes else invariant.max_query_len) > self.room:
            # Some request may see more than a width: look at each.
            for builder in self.builders:
                builder._check_dspark_width(invariant)


class _StepPlan:
    """What a step over a given list of builders, draft index and kind of step (causal or not)
    does, worked out once: which builder resolves each distinct group-invariant entry and each
    distinct sas_metadata entry (the others share it), the groups' static op arguments, and,
    per num_input_tokens, the output views. Only views are made per shape; a repeat finds them."""

    __slots__ = ("builders", "buffers", "names", "storage_block_sizes", "invariant_firsts", "invariant_later",
                 "invariant_of", "sas_firsts", "sas_later", "sas_of", "sas_calls", "sas_outputs", "windows", "dspark_calls",
                 "dspark_checks", "causal", "slot_buffers", "max_num_tokens", "row_slots", "by_tokens")

    def __init__(self, builders: Sequence[DraftMetadataBuilder], draft_index: int, causal: bool):
        self.builders = tuple(builders)
        self.causal = causal
        self.buffers = [builder.buffers(draft_index) for builder in builders]
        self.names = [builder.group.name for builder in builders]
        self.storage_block_sizes = [builder.group.storage_block_size for builder in builders]
        self.windows = [builder._windows[causal] for builder in builders]
        self.invariant_firsts, self.invariant_later, self.invariant_of = self._first_of_each(
            [buffers.invariant_key for buffers in self.buffers])
        # Groups without a sliding window have no sas_metadata (slot None).
        with_sas = [index for index, buffers in enumerate(self.buffers) if buffers.sas_keys]
        firsts, self.sas_later, slots = self._first_of_each([self.buffers[index].sas_keys[causal] for index in with_sas])
        self.sas_firsts = [with_sas[first] for first in firsts]
        self.sas_of = [None] * len(builders)
        for index, slot in zip(with_sas, slots):
            self.sas_of[index] = slot
        # Per distinct sas_metadata: its invariant slot, the write counter, the op's arguments that
        # stay fixed (_call_sas) and the output buffer.
        self.sas_calls = [(self.invariant_of[index], self.buffers[index].sas_writes, builders[index]._sas_args[causal],
                           self.buffers[index].sas)
                          for index in self.sas_firsts]
        self.sas_outputs = [self.buffers[index].sas for index in self.sas_firsts]
        dspark = [] if causal else [i for i, b in enumerate(builders) if b.dspark_width is not None]
        calls: dict[tuple[int, int, int], list[int]] = {}
        for i in dspark:
            model = builders[i].model
            calls.setdefault((model.cp_size, model.cp_rank, model.num_speculative_tokens), []).append(i)
        self.dspark_calls = [_DSparkCall(builders, members, self.invariant_of[members[0]]) for members in calls.values()]
        # The DSpark groups whose widths each invariant entry's batch is checked against.
        self.dspark_checks = []
        for slot in range(len(self.invariant_firsts)):
            members = [builders[i] for i in dspark if self.invariant_of[i] == slot]
            self.dspark_checks.append(_DSparkWidths(members) if members else None)
        self.slot_buffers = [buffers.slot_mapping for buffers in self.buffers]
        self.max_num_tokens = min(builder.max_num_tokens for builder in builders)
        # What a metadata row takes from the plan: window, invariant slot, sas slot.
        self.row_slots = list(zip(self.windows, self.invariant_of, self.sas_of))
        self.by_tokens: dict[int, tuple] = {}

    @staticmethod
    def _first_of_each(keys: list) -> tuple[list[int], list[int], list[int]]:
        """For keys of the builders in order: the first builder of each distinct key, how many
        later builders share it, and each builder's slot among the distinct keys."""
        slots: dict = {}
        firsts, later, slot_of = [], [], []
        for index, key in enumerate(keys):
            slot = slots.get(key)
            if slot is None:
                slot = slots[key] = len(firsts)
                firsts.append(index)
                later.append(0)
            else:
                later[slot] += 1
            slot_of.append(slot)
        return firsts, later, slot_of

    def outputs(self, num_input_tokens: int) -> tuple:
        """For num_input_tokens: the slot mapping views (the format's outputs), each DSpark call's
        arguments (its outputs included; the step's tensors left None), and per builder the rest of
        its metadata row (slot mapping, DSpark indices and lens or None, window, its invariant and
        sas slots). Made in one row_views call on the first step at that size, checked against
        the builders' maximum then."""
        outputs = self.by_tokens.get(num_input_tokens)
        if outputs is None:
            outputs = self._make_outputs(num_input_tokens)
            if len(self.by_tokens) >= _MAX_CACHED_SHAPES:
                self.by_tokens.clear()
            self.by_tokens[num_input_tokens] = outputs
        return outputs

    def _make_outputs(self, num_input_tokens: int) -> tuple:
        if not 0 <= num_input_tokens <= self.max_num_tokens:
            raise ValueError(f"num_input_tokens must be in [0, max_num_tokens = {self.max_num_tokens}], "
                             f"got {num_input_tokens}")
        num_groups = len(self.builders)
        # The slot mappings of every group, then the indices and lens of each DSpark call's groups
        # (its rows are this rank's slice of the padded stream).
        tensors, bounds = list(self.slot_buffers), [0, num_input_tokens] * num_groups
        for call in self.dspark_calls:
            rows = -(-num_input_tokens // call.cp_size)
            for index in call.members:
                tensors += (self.buffers[index].dspark_indices, self.buffers[index].dspark_lens)
                bounds += (0, rows, 0, rows)
        views = _row_views(tensors, bounds)
        slot_views = views[:num_groups]
        dspark: list[tuple] = [(None, None)] * num_groups
        per_call = []
        position = num_groups
        for call in self.dspark_calls:
            indices, lens = [], []
            for index in call.members:
                dspark[index] = (views[position], views[position + 1])
                indices.append(views[position])
                lens.append(views[position + 1])
                position += 2
            # The call's arguments but the step's tensors (block tables, query_start_loc, seq_lens).
            per_call.append([None, None, None, call.windows, call.num_speculative_tokens, call.block_sizes,
                             num_input_tokens, call.widths, call.cp_size, call.cp_rank, indices, lens])
        rows = [(slot, *dspark[index], *self.row_slots[index]) for index, slot in enumerate(slot_views)]
        return slot_views, per_call, rows

    def forget_shapes(self) -> None:
        """Drops what was made per batch shape: the output views and the group-invariant views."""
        self.by_tokens.clear()
        for index in self.invariant_firsts:
            self.buffers[index].invariant_views.clear()


def _plan(builders: Sequence[DraftMetadataBuilder], draft_index: int, causal: bool) -> _StepPlan:
    """The plan of a step over these builders, kept by the first builder (a runner calls the
    same list of builders every step)."""
    first = builders[0]
    key = (tuple(builders), draft_index, causal)
    plan = first._plans.get(key)
    if plan is None:
        plan = _StepPlan(builders, draft_index, causal)
        if len(first._plans) >= _MAX_CACHED_SHAPES:
            first._plans.clear()
        first._plans[key] = plan
    return plan
