"""The mapping buffers: every KV-cache group's request-indexed source tables and the captured,
batch-indexed block tables and slot mappings a graph replays against (docs/persistent_buffers.md).

Layout. All groups' request-indexed source tables and their block counts live in one flat
int32 storage: group g's table is a contiguous [M, B_g] view at its own offset (each group has
its own width B_g), and after the last table come the counts of every (group, row). One
`apply_staged_writes` launch on that storage (seen as one row, by the staging engine in
`specops.persistent.staging`) therefore writes the new block ids and the new counts of every
group at once. The captured tables and slot mappings are one flat storage each, with a
contiguous view per group, so `fill_dummy()` is two fills.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch

from specops._backend import current_backend
from specops._constants import NULL_BLOCK_ID, PAD_SLOT_ID
from specops.arguments import INT32_MAX, check_cp_rank, check_positive, checked_int, checked_size
from specops.ops.advance_draft_step import DraftStep
from specops.ops.registry import OPS
from specops.persistent.captured import CapturedBuffers, CheckedTables, GroupLayout
from specops.persistent.checks import (
    CHECK_POSITIONS,
    check_host_copies,
    check_refresh,
    check_shares_no_captured_buffer,
    padded_extents,
)
from specops.persistent.draft_step import advance_draft_step as _advance_draft_step
from specops.persistent.extents import EndPadding, peer_batch
from specops.persistent.groups import MappingGroup, slot_mapping_args, widths_per_group
from specops.persistent.staging import StagedBlockWrites
from specops.step_inputs import CommonDraftInputs

_SLOT_MAPPING, _GATHER = OPS["compute_slot_mapping"], OPS["gather_block_tables"]
_FUSED_STEP = OPS["prepare_spec_decode_inputs"]


class RunnerStepInputs(NamedTuple):
    """What `PersistentMappings.prepare_step` wrote, as views of the mappings' captured buffers."""

    positions: torch.Tensor  # int64 [num_tokens_padded]
    seq_lens: torch.Tensor  # int32 [num_reqs_padded]
    block_tables: Mapping[str, torch.Tensor]  # by group name: int32 [max_num_reqs, B_g], rows past R NULL
    slot_mappings: Mapping[str, torch.Tensor]  # by group name: int64 [max_num_tokens]


class PersistentMappings:
    """Per group g, with B_g = max_num_blocks_per_group[g]: `source_block_tables[g]` int32
    [max_num_reqs, B_g] and `num_blocks[g]` int32 [max_num_reqs] (request-indexed, changed
    through `append_blocks`, `move_row`, `swap_rows` + `apply_staged`), and the captured,
    batch-indexed `block_tables[g]` int32 [max_num_reqs, B_g] and `slot_mappings[g]`
    [max_num_tokens] of `slot_dtype` (int64, or int32 as Ascend's cache writes read it; a slot
    past int32 is then a host ValueError / device PAD), rewritten by `refresh` and
    `prepare_step`. No buffer is ever reallocated: every `data_ptr()` is fixed.
    `max_num_blocks_per_req` is one width for every group or one per group. `pad_to_end`:
    after every refresh, prepare_step and fill_dummy, slots past the batch's T are PAD and
    table rows past its R are NULL to the buffers' ends (vLLM's extent), at a cost bounded by
    the last two steps' padded sizes (`specops.persistent.extents`); the padded extents then
    only choose the views handed out.
    """

    def __init__(
        self,
        groups: Sequence[MappingGroup],
        *,
        max_num_reqs: int,
        max_num_blocks_per_req: int | Sequence[int],
        max_num_tokens: int,
        cp_world_size: int = 1,
        cp_rank: int = 0,
        cp_interleave: int = 1,
        device: torch.device | str | None = None,
        slot_dtype: torch.dtype = torch.int64,
        pad_to_end: bool = False,
    ):
        groups = tuple(groups)
        if not groups:
            raise ValueError("groups must hold at least one MappingGroup, got none")
        for index, group in enumerate(groups):
            if not isinstance(group, MappingGroup):
                raise ValueError(f"groups[{index}] must be a MappingGroup, got {type(group).__name__}")
        # Sizes every captured buffer is allocated from: bounded first (docs/hardening.md, "Sizes an
        # op allocates from"), never an allocator error naming nothing.
        max_num_reqs, max_num_tokens = checked_size(max_num_reqs, "max_num_reqs", 1), checked_size(max_num_tokens,
                                                                                                   "max_num_tokens", 1)
        cp_world_size, cp_rank = checked_int(cp_world_size, "cp_world_size"), checked_int(cp_rank, "cp_rank")
        cp_interleave = checked_int(cp_interleave, "cp_interleave")
        widths = widths_per_group(max_num_blocks_per_req, len(groups))
        check_cp_rank(cp_world_size, cp_rank, "cp_world_size")
        check_positive(cp_interleave, "cp_interleave")
        if slot_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"slot_dtype must be torch.int64 or torch.int32, got {slot_dtype}")
        self._slot_args = slot_mapping_args(groups, cp_world_size, cp_rank, cp_interleave)

        # Under CP a block-table column is not a contiguous run of positions, so no group masks
        # its sliding window (as vLLM does).
        self._window_reach = [group.sliding_window_reach if cp_world_size == 1 else 0 for group in groups]

        self.groups = groups
        self.cp_world_size, self.cp_rank, self.cp_interleave = cp_world_size, cp_rank, cp_interleave
        self.max_num_reqs = max_num_reqs
        self.max_num_blocks_per_req = max_num_blocks_per_req
        self.max_num_blocks_per_group = widths
        self.max_num_tokens = max_num_tokens
        self.device = torch.device(device) if device is not None else torch.get_default_device()
        num_groups = len(groups)
        num_cells = num_groups * max_num_reqs
        # Flat offsets of each group's source table, then of the counts.
        offsets = [sum(max_num_reqs * width for width in widths[:g]) for g in range(num_groups + 1)]
        first_count = offsets[-1]
        if first_count + num_cells > INT32_MAX:
            raise ValueError(
                f"max_num_reqs * sum(max_num_blocks_per_req) + groups * max_num_reqs must be <= 2^31 - 1 (the staged "
                f"writes address the source tables with int32 offsets), got {first_count + num_cells}")

        # NULL_BLOCK_ID is 0, so zeros are both NULL rows and zero counts.
        self._source_storage = torch.zeros(first_count + num_cells, dtype=torch.int32, device=self.device)
        self.source_block_tables = [self._source_storage[offsets[g] : offsets[g + 1]].view(max_num_reqs, widths[g])
                                    for g in range(num_groups)]
        counts = self._source_storage[first_count :]
        self.num_blocks = [counts[g * max_num_reqs : (g + 1) * max_num_reqs] for g in range(num_groups)]
        self._captured_tables = torch.full((first_count,), NULL_BLOCK_ID, dtype=torch.int32, device=self.device)
        self.block_tables = [self._captured_tables[offsets[g] : offsets[g + 1]].view(max_num_reqs, widths[g])
                             for g in range(num_groups)]
        self.slot_dtype, self.pad_to_end = slot_dtype, bool(pad_to_end)
        self._captured_slots = torch.full((num_groups, max_num_tokens), PAD_SLOT_ID, dtype=slot_dtype, device=self.device)
        self.slot_mappings = list(self._captured_slots.unbind(0))
        self._end_padding = EndPadding(self._captured_slots, self._captured_tables, max_num_reqs=max_num_reqs,
                                       max_num_tokens=max_num_tokens, enabled=self.pad_to_end)
        per_group = not isinstance(max_num_blocks_per_req, int)
        self._staging = StagedBlockWrites(
            self._source_storage, max_num_reqs=max_num_reqs, widths=widths, table_offsets=offsets,
            counts_offset=first_count,
            width_names=[f"max_num_blocks_per_req[{g}]" if per_group else "max_num_blocks_per_req"
                         for g in range(num_groups)])

        names = [group.name if group.name is not None else f"group{g}" for g, group in enumerate(groups)]
        for g, name in enumerate(names):
            if not isinstance(name, str) or names.index(name) != g:
                raise ValueError(f"groups[{g}].name must be a string no other group has, got {name!r}")
        self.group_names = tuple(names)
        # The drafting layer's view of the captured buffers: the same tensors, keyed by group name.
        self.block_tables_by_name: Mapping[str, torch.Tensor] = dict(zip(names, self.block_tables))
        self.slot_mappings_by_name: Mapping[str, torch.Tensor] = dict(zip(names, self.slot_mappings))
        # The runner step's other captured outputs (see prepare_step).
        self.positions = torch.zeros(max_num_tokens, dtype=torch.int64, device=self.device)
        self.seq_lens = torch.zeros(max_num_reqs, dtype=torch.int32, device=self.device)
        self._step_views: dict[tuple[int, int], RunnerStepInputs] = {}
        # The draft steps' positions (advance_draft_step), one per request.
        self.draft_positions = torch.zeros(max_num_reqs, dtype=torch.int64, device=self.device)
        # First scheduled position of each request row, scattered from the batch, for the
        # sliding-window gathers: row r at entry r + 1, so that batch rows of no request (-1)
        # land on entry 0. Shifted with a tensor of ones: a Python scalar would allocate.
        # Batch rows past the table (rejected on the host, NULL rows on a device) land on the
        # last entry, so that no index is ever out of range whatever idx_mapping holds.
        self._row_first_position = torch.zeros(max_num_reqs + 2, dtype=torch.int32, device=self.device)
        self._scatter_rows = torch.zeros(max_num_reqs, dtype=torch.int64, device=self.device)
        self._ones = torch.ones(max_num_reqs, dtype=torch.int64, device=self.device)
        # What refresh checks up front on the host path, when an op could reject after another
        # one wrote: more than one mapped group, or a sliding-window gather before the first.
        mapped = [g for g, args in enumerate(self._slot_args) if args is not None]
        checked = None
        if self.device.type == "cpu" and mapped and CHECK_POSITIONS is not None:
            checked = CheckedTables(
                mapped, [self.source_block_tables[g] for g in mapped], [self.num_blocks[g] for g in mapped],
                [groups[g].block_size for g in mapped], [groups[g].blocks_per_kv_block for g in mapped],
                [groups[g].cp_sharded for g in mapped],
                # int32 slot mappings: every group's slots are checked to fit before the first write
                # (each compute_slot_mapping would check only its own, after the groups before it).
                [self.slot_mappings[g] for g in mapped] if slot_dtype == torch.int32 else [])
        layout = GroupLayout(cp_world_size, cp_rank, cp_interleave, [group.block_size for group in groups],
                             [group.blocks_per_kv_block for group in groups], [group.cp_sharded for group in groups],
                             [args is not None for args in self._slot_args])
        # What the helpers (checks.py, draft_step.py) read: a frozen record, not this object.
        self.captured = CapturedBuffers(
            self._source_storage.device, max_num_reqs, max_num_tokens, layout, self._captured_tables, self._captured_slots, self.source_block_tables, self.num_blocks,
            self.slot_mappings, self.positions, self.seq_lens, self.draft_positions, len(mapped),
            any(reach > 0 for reach in self._window_reach), checked)

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    # ---------------------------------------------------------------- the source tables (staged)

    @property
    def staged_num_blocks(self) -> np.ndarray:
        """Read-only host view [G, max_num_reqs] of the block counts, staged writes included."""
        return self._staging.staged_counts

    @property
    def num_staged_writes(self) -> int:
        return self._staging.num_writes

    def append_blocks(self, row: int, block_ids: Sequence[Sequence[int]], overwrite: bool = False) -> None:
        """Stages new block ids for request row `row`: `block_ids[g]` for group g (a list of ints
        or an integer tensor, ids in [0, 2^31 - 1]).

        The ids go after the row's current ones, or, with `overwrite=True`, replace the row
        (the old tail becomes NULL). Nothing reaches the device before `apply_staged()`: a write
        that overlaps a staged one of the same row is merged into it on the host. A call that is
        rejected (a bad id in any group, a row that would pass its group's width) raises before staging anything.
        """
        self._staging.append(row, block_ids, overwrite)

    def move_row(self, src: int, dst: int) -> None:
        """Stages the move of request row `src` (ids and counts of every group, staged writes
        included) to row `dst`, replacing what `dst` held; `src` is left empty (NULL, count 0),
        as vLLM clears a vacated row, so nothing can reach its blocks once they are freed. For a
        runner that condenses its persistent batch. Applied by the next `apply_staged()`."""
        self._staging.move(src, dst)

    def swap_rows(self, a: int, b: int) -> None:
        """Stages the exchange of request rows `a` and `b` (ids and counts of every group, staged
        writes included). For a runner that reorders its persistent batch. Applied by the next
        `apply_staged()`."""
        self._staging.swap(a, b)

    def apply_staged(self) -> None:
        """Applies every staged write of every group (ids and counts) in one launch."""
        self._staging.apply()

    # ---------------------------------------------------------------- captured buffers

    def refresh(
        self,
        idx_mapping: torch.Tensor,
        query_start_loc: torch.Tensor,
        positions: torch.Tensor,
        *,
        num_reqs_padded: int | None = None,
        num_tokens_padded: int | None = None,
        num_computed_tokens: torch.Tensor | None = None,
    ) -> None:
        """Rewrites every group's captured buffers in place for this step's batch.

        Batch row r is source row idx_mapping[r] (-1: none). block_tables[g][:num_reqs_padded]
        gets the gathered rows (NULL past each row's count, NULL rows for -1 and padding);
        slot_mappings[g][:num_tokens_padded] gets every token's slot (PAD for tokens of -1 rows,
        for tokens another CP rank stores, and for the padding; PAD for every token of a group
        whose slot mapping is disabled). At most two op calls per group, whatever the batch, and
        on the host one more that checks every group first: a rejected refresh changes no
        buffer. Defaults: the full extents.

        A position past its row's allocated blocks (num_blocks[g][row]) is a ValueError on the
        host naming the request, the position and the count, and PAD on device paths: never a
        slot in the null block the row holds there. A runner allocates the blocks of every
        position it schedules, draft (lookahead) positions included, and applies them
        (`append_blocks` + `apply_staged`) before the step.

        num_computed_tokens: int32 [>= max_num_reqs], request-indexed like the source tables:
        the first position each request schedules this step. Given it, a sliding-window group
        (reach > 0) gets NULL for the entries of a row wholly below the window of that
        position, j < max(num_computed_tokens[row] - reach, 0) // block_size: the window's
        manager may already have freed and reused those blocks. Never under CP
        (cp_world_size > 1), where a column is not a contiguous run of positions.

        R = idx_mapping.numel(); query_start_loc may have more than R + 1 entries and positions
        more than T = query_start_loc[R] (the peer's num_reqs_padded + 1 offsets and persistent
        positions buffer): neither tail is read. The host path checks T <= num_tokens_padded
        and positions.numel() >= T.
        """
        # The peer's call shape (longer query_start_loc and positions) as views of this batch.
        num_reqs = idx_mapping.numel() if isinstance(idx_mapping, torch.Tensor) else 0
        query_start_loc, positions, num_tokens = peer_batch(num_reqs, query_start_loc, positions)
        # Everything an op could reject after another op wrote is checked first, whatever the
        # order of the groups (persistent/checks.py).
        num_reqs_padded, num_tokens_padded, windowed = check_refresh(
            self.captured, idx_mapping, query_start_loc, positions, num_tokens, num_reqs_padded, num_tokens_padded,
            num_computed_tokens)
        if num_tokens is None and positions.numel() > num_tokens_padded:
            positions = positions[:num_tokens_padded]  # on a device: no token past num_tokens_padded
        rows_written, tokens_written = self._end_padding.extents(num_reqs_padded, num_tokens_padded)
        groups = list(zip(self.groups, self.source_block_tables, self.num_blocks, self.block_tables,
                          self.slot_mappings, self._slot_args, self._window_reach))
        # A sliding-window gather first: it alone reads num_computed_tokens' values, and rejects
        # a negative one on the host, before any buffer is written. The slot mappings next (they
        # read the source rows through idx_mapping, not the gathered tables, so that a row of -1
        # gives PAD); their values were checked above for every group. Then the other gathers.
        # The ops' own dispatchers, without the keyword wrappers (the bench measures the saving).
        first = next((g for g, (*_, reach) in enumerate(groups) if reach and windowed), None)
        if first is not None:
            self._gather(groups[first], idx_mapping, rows_written, num_computed_tokens)
        for group, source, counts, table, slots, args, reach in groups:
            if args is not None:
                _SLOT_MAPPING(query_start_loc=query_start_loc, positions=positions, block_table=source, out=slots,
                              idx_mapping=idx_mapping, num_tokens_padded=tokens_written, num_blocks=counts,
                              **args)
        for g, group in enumerate(groups):
            if g != first:
                self._gather(group, idx_mapping, rows_written, num_computed_tokens)
        # Groups without a slot mapping last, after every op has accepted the inputs.
        for slots, args in zip(self.slot_mappings, self._slot_args):
            if args is None:
                slots[:tokens_written].fill_(PAD_SLOT_ID)
        self._end_padding.written(num_reqs, num_tokens_padded)

    @staticmethod
    def _gather(group_views: tuple, idx_mapping: torch.Tensor, rows: int,
                num_computed_tokens: torch.Tensor | None) -> None:
        group, source, counts, table, _, _, reach = group_views
        _GATHER(src_block_table=source, num_blocks=counts, idx_mapping=idx_mapping, out=table, num_reqs_padded=rows,
                num_computed_tokens=num_computed_tokens, sliding_window_reach=reach, block_size=group.block_size)

    def prepare_step(
        self,
        num_computed_tokens: torch.Tensor,
        num_accepted_tokens: torch.Tensor,
        prev_positions: torch.Tensor,
        valid_sampled_token_count: torch.Tensor,
        prev_num_draft_tokens: torch.Tensor,
        cpu_num_computed_tokens: torch.Tensor,
        query_start_loc: torch.Tensor,
        idx_mapping: torch.Tensor,
        *,
        num_reqs_padded: int | None = None,
        num_tokens_padded: int | None = None,
    ) -> RunnerStepInputs:
        """The decode step's metadata, in place in this object's captured buffers: the async
        count correction, positions, seq_lens, every group's slot mapping and every group's
        gathered block table, from what the mappings already know (each group's block size,
        blocks_per_kv_block, CP sharding, slot_mapping_enabled and sliding window, the CP
        layout, the source tables and their block counts).

        The first seven arguments are prepare_spec_decode_inputs' (batch-indexed, in this
        step's layout); batch row r reads request row idx_mapping[r] (-1: none, PAD and a NULL
        table row). One fused op call writes num_computed_tokens, num_accepted_tokens,
        `positions`, `seq_lens` and every `slot_mappings[g]`; then one gather per group writes
        `block_tables[g]` (rows past each row's count NULL; a sliding-window group, off CP,
        NULL below the window of the row's first scheduled position, as `refresh` does).

        Validated before any write on the host: a rejected step changes no buffer. A position
        past its row's allocated blocks is a ValueError there (naming the request, the
        position and the count) and PAD on device paths: allocate (append_blocks +
        apply_staged) the blocks of every scheduled position, draft positions included,
        before the step. No allocation and no device-to-host copy. Defaults: the full extents.
        """
        if not isinstance(idx_mapping, torch.Tensor):
            raise ValueError(f"idx_mapping must be a tensor (batch row -> request row), got "
                             f"{type(idx_mapping).__name__}")
        num_reqs = idx_mapping.numel()
        if isinstance(query_start_loc, torch.Tensor) and query_start_loc.dim() == 1 \
                and query_start_loc.numel() > num_reqs + 1:
            query_start_loc = query_start_loc[: num_reqs + 1]  # the peer's num_reqs_padded + 1 entries
        # The token count is the fused op's output (on the device): only 0 bounds it here.
        num_reqs_padded, num_tokens_padded = padded_extents(self.captured, num_reqs, num_reqs_padded, None,
                                                            num_tokens_padded)
        # The fused op checks its inputs against what it writes; the gathers after it write the
        # captured tables, so no input may share memory with those either (nor with the buffers
        # the fused op writes, which it checks itself).
        check_shares_no_captured_buffer(
            self.captured, (num_computed_tokens, "num_computed_tokens"), (num_accepted_tokens, "num_accepted_tokens"),
            (prev_positions, "prev_positions"), (valid_sampled_token_count, "valid_sampled_token_count"),
            (prev_num_draft_tokens, "prev_num_draft_tokens"), (cpu_num_computed_tokens, "cpu_num_computed_tokens"),
            (query_start_loc, "query_start_loc"), (idx_mapping, "idx_mapping"))
        if (not self.captured.mapped_groups and num_reqs and idx_mapping.device.type == "cpu"
                and not torch.compiler.is_compiling() and current_backend() == "native"):
            # With no slot mapping the fused op reads no table through idx_mapping: a row past
            # the tables would first be seen by the gathers, after the fused op wrote.
            past = int(idx_mapping.max())
            if past >= self.max_num_reqs:
                raise ValueError(f"idx_mapping holds row {past}, past the source tables, which have max_num_reqs = "
                                 f"{self.max_num_reqs} rows")
        rows_written, tokens_written = self._end_padding.extents(num_reqs_padded, num_tokens_padded)
        # The returned views, made once per padded shape.
        views = self._step_views.get((num_tokens_padded, num_reqs_padded))
        if views is None:
            views = RunnerStepInputs(self.positions[:num_tokens_padded], self.seq_lens[:num_reqs_padded],
                                     self.block_tables_by_name, self.slot_mappings_by_name)
            self._step_views[(num_tokens_padded, num_reqs_padded)] = views
        _FUSED_STEP.select()(
            num_computed_tokens=num_computed_tokens, num_accepted_tokens=num_accepted_tokens,
            prev_positions=prev_positions, valid_sampled_token_count=valid_sampled_token_count,
            prev_num_draft_tokens=prev_num_draft_tokens, cpu_num_computed_tokens=cpu_num_computed_tokens,
            query_start_loc=query_start_loc, positions=self.positions, seq_lens=self.seq_lens,
            block_tables=self.source_block_tables, slot_mappings=self.slot_mappings, idx_mapping=idx_mapping,
            num_tokens_padded=tokens_written, num_reqs_padded=num_reqs_padded, num_blocks=self.num_blocks,
            # The batch-indexed mode, without a gather (the gathers run below, per group).
            request_indexed_counts=False, gathered_block_tables=[], num_gathered_rows=0, sliding_window_reach=[],
            **self.captured.layout.keywords)
        row_first = None
        if self.captured.masks_windows:
            # Request-indexed first positions for the gathers (the fused op's are batch-indexed).
            # Every negative idx_mapping is "no row" (entry 0), a row past the tables lands on the
            # last entry (the gathers reject it on the host, give a NULL row on a device): no
            # index is out of range whatever the values. A negative count masks nothing, as 0
            # does, so the gathers cannot reject it after the fused op wrote.
            rows = self._scatter_rows[:num_reqs]
            rows.copy_(idx_mapping)
            rows.clamp_(-1, self.max_num_reqs)
            rows.add_(self._ones[:num_reqs])
            self._row_first_position.index_copy_(0, rows, num_computed_tokens[:num_reqs])
            self._row_first_position.clamp_(min=0)
            row_first = self._row_first_position[1 : self.max_num_reqs + 1]
        for group, source, counts, table, reach in zip(self.groups, self.source_block_tables, self.num_blocks,
                                                       self.block_tables, self._window_reach):
            _GATHER(src_block_table=source, num_blocks=counts, idx_mapping=idx_mapping, out=table,
                    num_reqs_padded=rows_written, num_computed_tokens=row_first if reach else None,
                    sliding_window_reach=reach, block_size=group.block_size)
        self._end_padding.written(num_reqs, num_tokens_padded)
        return views

    def advance_draft_step(self, idx_mapping: torch.Tensor, **kwargs) -> DraftStep:
        """One later draft step on these buffers (specops.advance_draft_step with this object's
        groups, CP layout, source tables and block counts): `draft_positions`, `seq_lens` and
        every `slot_mappings[g]` in place. Keywords: max_model_len, past_max_model_len,
        token_indices and num_rejected_tokens (the first step: it gathers from `positions`),
        query_start_loc, num_reqs_padded, num_tokens_padded (see persistent/draft_step.py)."""
        return _advance_draft_step(self.captured, idx_mapping, **kwargs)

    def draft_inputs(
        self,
        query_start_loc: torch.Tensor,
        query_start_loc_cpu: torch.Tensor,
        seq_lens_cpu: torch.Tensor | None,
        *,
        num_reqs: int,
        num_actual_tokens: int,
        num_input_tokens: int,
        causal: bool = True,
        positions: torch.Tensor | None = None,
    ) -> CommonDraftInputs:
        """The drafting layer's inputs for the step `prepare_step` (or `refresh` with
        `positions` filled by the caller) wrote: this object's positions, seq_lens, block tables
        and slot mappings, keyed by group name as `CommonDraftInputs` keys them (no copy).
        After `advance_draft_step`, pass its `DraftStep.positions` (and `query_start_loc`): the
        seq_lens and slot mappings it wrote are this object's own buffers already.

        `query_start_loc_cpu` and `seq_lens_cpu` are the runner's host copies, and on a device
        both are required: the drafting layer plans the sparse-attention schedules on the host
        from them, and without them it would read `seq_lens` back from the device (a blocking
        copy every draft step). This object keeps no host mirror of `seq_lens`: the device writes
        it (rejected tokens, the max_model_len rule), so only the runner's copy is exact. On the
        CPU, `seq_lens_cpu=None` means this object's `seq_lens`, already on the host."""
        if self.device.type != "cpu":
            check_host_copies(query_start_loc_cpu=query_start_loc_cpu, seq_lens_cpu=seq_lens_cpu, device=self.device)
        return CommonDraftInputs(
            query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc_cpu, seq_lens=self.seq_lens,
            seq_lens_cpu=seq_lens_cpu, positions=self.positions if positions is None else positions,
            num_reqs=num_reqs,
            num_actual_tokens=num_actual_tokens, num_input_tokens=num_input_tokens, causal=causal,
            block_tables=self.block_tables_by_name, slot_mappings=self.slot_mappings_by_name)

    def fill_dummy(self) -> None:
        """NULL in every captured block table, PAD in every captured slot mapping (dummy runs)."""
        self._captured_tables.fill_(NULL_BLOCK_ID)
        self._captured_slots.fill_(PAD_SLOT_ID)
        self._end_padding.written(0, 0)
