"""Graph-stable block tables and slot mappings of every KV-cache group (docs/persistent_buffers.md).

A captured graph (CUDA graph, Ascend ACL graph) reads its metadata at the addresses it saw
during capture. `PersistentMappings` owns those buffers for every KV-cache group and rewrites
them in place each step, so a replay reads this step's block ids and slots and nothing stale.

Layout. All groups' request-indexed source tables and their block counts live in one flat
int32 storage: group g's table is a contiguous [M, B_g] view at its own offset (each group has
its own width B_g), and after the last table come the counts of every (group, row). One
`apply_staged_writes` launch on that storage (seen as one row) therefore writes the new block
ids and the new counts of every group at once. The captured tables and slot mappings are one
flat storage each, with a contiguous view per group, so `fill_dummy()` is two fills.

Invariant: a source row never holds a block id past its count (an overwrite also writes NULL
over the old tail), so slot mappings read through it can never reach a stale block.

Not thread-safe: the staging state and the captured buffers belong to one runner thread (a
PersistentMappings shared by two threads corrupts its staged writes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from specops._backend import current_backend
from specops._constants import NULL_BLOCK_ID, PAD_SLOT_ID
from specops.ops._checks import (
    INT32_MAX,
    check_context_parallel,
    check_int32_range,
    check_interleave_divides,
    check_positive,
    check_tensor,
    checked_int,
)
from specops._spec_decode_sizes import named_after_the_wrapper, pack_sizes
from specops.ops._op import fast_native_entry
from specops.ops.apply_staged_writes import apply_staged_writes
from specops.ops.compute_slot_mapping import _OP as _SLOT_MAPPING
from specops.ops.gather_block_tables import _OP as _GATHER
from specops.ops.prepare_spec_decode_inputs import _OP as _FUSED_STEP

if TYPE_CHECKING:
    from specops.drafting import CommonDraftInputs

# compute_slot_mapping's value checks for every group's table at once, writing nothing.
_CHECK_POSITIONS = fast_native_entry("check_slot_mapping_positions")


def _checked_block_ids(ids: object, group: int) -> Sequence[int] | np.ndarray:
    """block_ids[group] as ints in [0, 2^31 - 1]: a list of Python or NumPy ints, or a 1-D
    integer array or tensor. Anything else (7.9 once became block 7) is a ValueError."""
    name = f"block_ids[{group}]"
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
            raise ValueError(f"{name} must be a 1-D integer tensor or a list of ints, got {ids.dtype} {list(ids.shape)}")
        ids = ids.cpu().numpy()
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"{name} must be a 1-D integer array or a list of ints, got {ids.dtype} {list(ids.shape)}")
    elif isinstance(ids, Sequence) and not isinstance(ids, str):
        for i, block_id in enumerate(ids):
            if type(block_id) is not int and (isinstance(block_id, bool) or not isinstance(block_id, (int, np.integer))):
                raise ValueError(f"{name}[{i}] must be an int, got {type(block_id).__name__} {block_id!r}")
    else:
        raise ValueError(f"{name} must be a list of ints or an integer tensor, got {type(ids).__name__}")
    if len(ids) and not (0 <= min(ids) and max(ids) <= INT32_MAX):
        i = next(i for i, block_id in enumerate(ids) if not 0 <= block_id <= INT32_MAX)
        raise ValueError(f"{name}[{i}] = {ids[i]} must be a block id in [0, 2^31 - 1]")
    return ids


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
        check_positive(self.block_size, "block_size")
        check_positive(self.blocks_per_kv_block, "blocks_per_kv_block")
        check_int32_range(self.sliding_window_reach, "sliding_window_reach", 0)


def _widths_per_group(max_num_blocks_per_req: int | Sequence[int], num_groups: int) -> tuple[int, ...]:
    """One table width per group, from one width for all or one per group."""
    if isinstance(max_num_blocks_per_req, int):
        check_positive(max_num_blocks_per_req, "max_num_blocks_per_req")
        return (max_num_blocks_per_req,) * num_groups
    widths = tuple(max_num_blocks_per_req)
    if len(widths) != num_groups:
        raise ValueError(f"max_num_blocks_per_req must be an int or one width per group ({num_groups}), "
                         f"got {len(widths)} widths")
    for group, width in enumerate(widths):
        check_positive(width, f"max_num_blocks_per_req[{group}]")
    return widths


@dataclasses.dataclass(frozen=True)
class _SlotMappingArgs:
    block_size: int
    blocks_per_kv_block: int
    cp_world_size: int
    cp_rank: int
    cp_interleave: int


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
    batch-indexed `block_tables[g]` int32 [max_num_reqs, B_g] and `slot_mappings[g]` int64
    [max_num_tokens] (rewritten by `refresh`). No buffer is ever reallocated: every
    `data_ptr()` is fixed. `max_num_blocks_per_req` is one width for every group or one per
    group.
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
    ):
        groups = tuple(groups)
        if not groups:
            raise ValueError("groups must hold at least one MappingGroup, got none")
        for index, group in enumerate(groups):
            if not isinstance(group, MappingGroup):
                raise ValueError(f"groups[{index}] must be a MappingGroup, got {type(group).__name__}")
        check_positive(max_num_reqs, "max_num_reqs")
        widths = _widths_per_group(max_num_blocks_per_req, len(groups))
        check_positive(max_num_tokens, "max_num_tokens")
        check_context_parallel(cp_world_size, cp_rank, cp_interleave)
        self._slot_args: list[_SlotMappingArgs | None] = []
        for index, group in enumerate(groups):
            if not group.slot_mapping_enabled:
                args = None  # no slot mapping: PAD, the table is never read
            elif group.cp_sharded:
                check_interleave_divides(group.block_size * group.blocks_per_kv_block, cp_interleave, f" of groups[{index}]")
                args = _SlotMappingArgs(group.block_size, group.blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave)
            else:
                args = _SlotMappingArgs(group.block_size, group.blocks_per_kv_block, 1, 0, 1)
            self._slot_args.append(args)

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
        self._table_offsets = [sum(max_num_reqs * width for width in widths[:g]) for g in range(num_groups + 1)]
        self._first_count = self._table_offsets[-1]
        if self._first_count + num_cells > INT32_MAX:
            raise ValueError(
                f"max_num_reqs * sum(max_num_blocks_per_req) + groups * max_num_reqs must be <= 2^31 - 1 (the staged "
                f"writes address the source tables with int32 offsets), got {self._first_count + num_cells}")

        # NULL_BLOCK_ID is 0, so zeros are both NULL rows and zero counts.
        self._source_storage = torch.zeros(self._first_count + num_cells, dtype=torch.int32, device=self.device)
        self._source_as_table = self._source_storage.view(1, -1)  # what apply_staged_writes writes
        self.source_block_tables = [self._source_storage[self._table_offsets[g] : self._table_offsets[g + 1]]
                                    .view(max_num_reqs, widths[g]) for g in range(num_groups)]
        counts = self._source_storage[self._first_count :]
        self.num_blocks = [counts[g * max_num_reqs : (g + 1) * max_num_reqs] for g in range(num_groups)]
        self._captured_tables = torch.full((self._first_count,), NULL_BLOCK_ID, dtype=torch.int32, device=self.device)
        self.block_tables = [self._captured_tables[self._table_offsets[g] : self._table_offsets[g + 1]]
                             .view(max_num_reqs, widths[g]) for g in range(num_groups)]
        self._captured_slots = torch.full((num_groups, max_num_tokens), PAD_SLOT_ID, dtype=torch.int64, device=self.device)
        self.slot_mappings = list(self._captured_slots.unbind(0))
        self._init_staging(num_groups, max_num_reqs, widths)

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
        self._step_shapes: dict[tuple[int, int], tuple[list[int], RunnerStepInputs]] = {}
        self._masks_windows = any(reach > 0 for reach in self._window_reach)
        # First scheduled position of each request row, scattered from the batch, for the
        # sliding-window gathers: row r at entry r + 1, so that batch rows of no request (-1)
        # land on entry 0. Shifted with a tensor of ones: a Python scalar would allocate.
        self._row_first_position = torch.zeros(max_num_reqs + 1, dtype=torch.int32, device=self.device)
        self._scatter_rows = torch.zeros(max_num_reqs, dtype=torch.int64, device=self.device)
        self._ones = torch.ones(max_num_reqs, dtype=torch.int64, device=self.device)
        # What refresh checks up front on the host path, when more than one group could reject.
        mapped = [g for g, args in enumerate(self._slot_args) if args is not None]
        self._check_positions_sizes = None
        if self.device.type == "cpu" and len(mapped) > 1 and _CHECK_POSITIONS is not None:
            self._checked_tables = [self.source_block_tables[g] for g in mapped]
            self._checked_counts = [self.num_blocks[g] for g in mapped]
            self._check_positions_sizes = [size for g in mapped for size in dataclasses.astuple(self._slot_args[g])]

    # ---------------------------------------------------------------- staging (host side)

    def _init_staging(self, num_groups: int, max_num_reqs: int, widths: tuple[int, ...]) -> None:
        # Host state, allocated once. Counts and ids include staged writes; the device catches
        # up at apply_staged(). The ids are kept so that a row can be moved or swapped by
        # staging its ids again.
        self._staged_counts = np.zeros((num_groups, max_num_reqs), dtype=np.int64)
        self._staged_ids = [np.zeros((max_num_reqs, width), dtype=np.int32) for width in widths]
        # Index of the pending block write of (group, row), -1 if none: a (group, row) has at most
        # one, since a write that overlaps or adjoins it is merged into it on the host.
        self._pending_write = np.full((num_groups, max_num_reqs), -1, dtype=np.int64)
        # Index in `values` of the pending count write of (group, row), -1 if none.
        self._pending_count_at = np.full((num_groups, max_num_reqs), -1, dtype=np.int64)

        # A step that appends a block to every row of every group fits as allocated; the host
        # staging grows past that rather than applying anything before apply_staged().
        num_cells = num_groups * max_num_reqs
        self._num_writes = 0
        self._num_values = 0
        self._allocate_staging(2 * num_cells + 2, 2 * num_cells + 4 * max(widths))

        self._packed_host: torch.Tensor | None = None
        self._packed_device: torch.Tensor | None = None
        self._copy_done: torch.Event | None = None
        if self.device.type != "cpu":
            self._stage_through_copy(pin_memory=True)

    def _allocate_staging(self, write_capacity: int, value_capacity: int) -> None:
        """Host staging arrays of the given capacities, keeping what is staged."""
        host = dict(dtype=torch.int32, device="cpu")
        staged = (self._num_writes, self._num_values)
        old = (self._rows, self._starts, self._cu_lens, self._values) if hasattr(self, "_rows") else None
        self._write_capacity, self._value_capacity = write_capacity, value_capacity
        self._rows = torch.zeros(write_capacity, **host)
        self._starts = torch.zeros(write_capacity, **host)
        self._cu_lens = torch.zeros(write_capacity + 1, **host)
        self._values = torch.zeros(value_capacity, **host)
        if old is not None:
            for new, kept, size in zip((self._rows, self._starts, self._cu_lens, self._values), old,
                                       (staged[0], staged[0], staged[0] + 1, staged[1])):
                new[:size] = kept[:size]
        self._rows_np, self._starts_np = self._rows.numpy(), self._starts.numpy()
        self._cu_lens_np, self._values_np = self._cu_lens.numpy(), self._values.numpy()

    def _reserve(self, writes: int, values: int) -> None:
        """Room for `writes` more writes and `values` more values (rare: doubles the arrays)."""
        if self._num_writes + writes <= self._write_capacity and self._num_values + values <= self._value_capacity:
            return
        self._allocate_staging(max(2 * self._write_capacity, self._num_writes + writes),
                               max(2 * self._value_capacity, self._num_values + values))
        if self._packed_host is not None:
            if self._copy_done is not None:
                self._copy_done.synchronize()  # the last copy read the old buffer
            self._stage_through_copy(pin_memory=self._packed_host.is_pinned())

    def _stage_through_copy(self, pin_memory: bool) -> None:
        """Off the host, the staged arrays travel packed, in one copy, through a pinned buffer
        that the next apply may refill only after that copy has run (tests use this on CPU)."""
        packed_size = 3 * self._write_capacity + 1 + self._value_capacity
        self._packed_host = torch.zeros(packed_size, dtype=torch.int32, pin_memory=pin_memory)
        self._packed_device = torch.zeros(packed_size, dtype=torch.int32, device=self.device)
        self._copy_done = torch.Event(device=self.device) if self.device.type != "cpu" else None

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    @property
    def staged_num_blocks(self) -> np.ndarray:
        """Read-only host view [G, max_num_reqs] of the block counts, staged writes included."""
        view = self._staged_counts.view()
        view.setflags(write=False)
        return view

    @property
    def num_staged_writes(self) -> int:
        return self._num_writes

    def append_blocks(self, row: int, block_ids: Sequence[Sequence[int]], overwrite: bool = False) -> None:
        """Stages new block ids for request row `row`: `block_ids[g]` for group g (a list of ints
        or an integer tensor, ids in [0, 2^31 - 1]).

        The ids go after the row's current ones, or, with `overwrite=True`, replace the row
        (the old tail becomes NULL). Nothing reaches the device before `apply_staged()`: a write
        that overlaps a staged one of the same row is merged into it on the host. A call that is
        rejected (a bad id in any group, a row that would pass its group's width) raises before staging anything.
        """
        if not isinstance(block_ids, Sequence) or len(block_ids) != self.num_groups:
            got = len(block_ids) if isinstance(block_ids, Sequence) else type(block_ids).__name__
            raise ValueError(f"block_ids must hold one list of block ids per group ({self.num_groups}), got {got}")
        row = self._checked_row(row, "row")
        block_ids = [_checked_block_ids(ids, group) for group, ids in enumerate(block_ids)]
        for group, ids in enumerate(block_ids):
            count = len(ids) + (0 if overwrite else int(self._staged_counts[group, row]))
            width = self.max_num_blocks_per_group[group]
            if count > width:
                raise ValueError(
                    f"block_ids[{group}] would give row {row} {count} blocks, more than the width of group {group} "
                    f"(max_num_blocks_per_req{'' if isinstance(self.max_num_blocks_per_req, int) else f'[{group}]'} "
                    f"= {width})"
                )
        for group, ids in enumerate(block_ids):
            self._stage(group, row, ids, overwrite)

    def move_row(self, src: int, dst: int) -> None:
        """Stages the move of request row `src` (ids and counts of every group, staged writes
        included) to row `dst`, replacing what `dst` held; `src` is left empty (NULL, count 0),
        as vLLM clears a vacated row, so nothing can reach its blocks once they are freed. For a
        runner that condenses its persistent batch. Applied by the next `apply_staged()`."""
        src, dst = self._checked_row(src, "src"), self._checked_row(dst, "dst")
        if src == dst:
            return
        for group in range(self.num_groups):
            self._stage(group, dst, self._staged_row(group, src), overwrite=True)
            self._stage(group, src, (), overwrite=True)

    def swap_rows(self, a: int, b: int) -> None:
        """Stages the exchange of request rows `a` and `b` (ids and counts of every group, staged
        writes included). For a runner that reorders its persistent batch. Applied by the next
        `apply_staged()`."""
        a, b = self._checked_row(a, "a"), self._checked_row(b, "b")
        if a == b:
            return
        for group in range(self.num_groups):
            ids_a, ids_b = self._staged_row(group, a), self._staged_row(group, b)
            self._stage(group, a, ids_b, overwrite=True)
            self._stage(group, b, ids_a, overwrite=True)

    def _checked_row(self, row: int, name: str) -> int:
        row = checked_int(row, name)
        if not 0 <= row < self.max_num_reqs:
            raise ValueError(f"{name} must be in [0, max_num_reqs = {self.max_num_reqs}), got {row}")
        return row

    def _staged_row(self, group: int, row: int) -> np.ndarray:
        """A copy of the ids row `row` of `group` will hold once the staged writes land."""
        return self._staged_ids[group][row, : self._staged_counts[group, row]].copy()

    def _stage(self, group: int, row: int, ids: Sequence[int] | np.ndarray, overwrite: bool) -> None:
        old_count = int(self._staged_counts[group, row])
        start = 0 if overwrite else old_count
        count = start + len(ids)
        length = max(len(ids), old_count) if overwrite else len(ids)

        if length:
            # The host copy of the row first: it is what the row holds once everything staged lands.
            staged = self._staged_ids[group][row]
            staged[start : start + len(ids)] = ids
            staged[start + len(ids) : start + length] = NULL_BLOCK_ID
            # Device kernels apply the writes of one launch in parallel, in no order: a write that
            # overlaps (or adjoins) the pending one of this row replaces it by their union, read
            # back from the host copy, so one launch never writes a cell twice.
            row_start = self._table_offsets[group] + row * self.max_num_blocks_per_group[group]
            pending = int(self._pending_write[group, row])
            if pending >= 0:
                pending_start = int(self._starts_np[pending]) - row_start
                pending_end = pending_start + int(self._cu_lens_np[pending + 1] - self._cu_lens_np[pending])
                if start <= pending_end and pending_start <= start + length:
                    self._remove_write(pending)
                    union_start = min(start, pending_start)
                    start, length = union_start, max(pending_end, start + length) - union_start
            self._reserve(2, length + 1)
            at = self._num_values
            self._values_np[at : at + length] = staged[start : start + length]
            self._pending_write[group, row] = self._num_writes
            self._add_write(row_start + start, length)
        else:
            self._reserve(1, 1)
        count_at = int(self._pending_count_at[group, row])
        if count_at >= 0:
            self._values_np[count_at] = count
        elif count != old_count:
            self._pending_count_at[group, row] = self._num_values
            self._values_np[self._num_values] = count
            self._add_write(self._first_count + group * self.max_num_reqs + row, 1)
        self._staged_counts[group, row] = count

    def _remove_write(self, k: int) -> None:
        """Takes staged write k out of the arrays, shifting the later ones down (host only)."""
        n, begin, end = self._num_writes, int(self._cu_lens_np[k]), int(self._cu_lens_np[k + 1])
        length = end - begin
        self._values_np[begin : self._num_values - length] = self._values_np[end : self._num_values].copy()
        self._rows_np[k : n - 1] = self._rows_np[k + 1 : n].copy()
        self._starts_np[k : n - 1] = self._starts_np[k + 1 : n].copy()
        self._cu_lens_np[k + 1 : n] = self._cu_lens_np[k + 2 : n + 1] - length
        self._num_writes -= 1
        self._num_values -= length
        self._pending_write[self._pending_write > k] -= 1
        self._pending_count_at[self._pending_count_at >= end] -= length

    def _add_write(self, start: int, length: int) -> None:
        """A write of `length` values at flat offset `start` of the source storage."""
        k = self._num_writes
        self._starts_np[k] = start
        self._cu_lens_np[k + 1] = self._cu_lens_np[k] + length
        self._num_writes = k + 1
        self._num_values += length

    def apply_staged(self) -> None:
        """Applies every staged write of every group (ids and counts) in one launch."""
        num_writes, num_values = self._num_writes, self._num_values
        if num_writes == 0:
            return
        if self._packed_device is None:
            rows, starts = self._rows[:num_writes], self._starts[:num_writes]
            cu_lens, values = self._cu_lens[: num_writes + 1], self._values[:num_values]
        else:
            rows, starts, cu_lens, values = self._copy_staged_to_device(num_writes, num_values)
        apply_staged_writes(self._source_as_table, rows, starts, cu_lens, values)
        self._num_writes = 0
        self._num_values = 0
        self._pending_write.fill(-1)
        self._pending_count_at.fill(-1)

    def _copy_staged_to_device(self, num_writes: int, num_values: int) -> tuple[torch.Tensor, ...]:
        if self._copy_done is not None:
            self._copy_done.synchronize()
        packed = self._packed_host.numpy()
        bounds = np.cumsum([0, num_writes, num_writes, num_writes + 1, num_values])
        packed[bounds[0] : bounds[1]] = self._rows_np[:num_writes]
        packed[bounds[1] : bounds[2]] = self._starts_np[:num_writes]
        packed[bounds[2] : bounds[3]] = self._cu_lens_np[: num_writes + 1]
        packed[bounds[3] : bounds[4]] = self._values_np[:num_values]
        size = int(bounds[4])
        self._packed_device[:size].copy_(self._packed_host[:size], non_blocking=True)
        if self._copy_done is not None:
            self._copy_done.record()
        return tuple(self._packed_device[int(lo) : int(hi)] for lo, hi in zip(bounds[:-1], bounds[1:]))

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
        """
        if num_reqs_padded is None:
            num_reqs_padded = self.max_num_reqs
        if num_tokens_padded is None:
            num_tokens_padded = self.max_num_tokens
        # Checked here, not only by the ops, so that a bad size rejects the call before the
        # first group is rewritten.
        num_reqs = idx_mapping.numel() if isinstance(idx_mapping, torch.Tensor) else 0
        num_tokens = positions.numel() if isinstance(positions, torch.Tensor) else 0
        if not num_reqs <= num_reqs_padded <= self.max_num_reqs:
            raise ValueError(
                f"num_reqs_padded must be in [R = {num_reqs}, max_num_reqs = {self.max_num_reqs}], got {num_reqs_padded}"
            )
        if not num_tokens <= num_tokens_padded <= self.max_num_tokens:
            raise ValueError(
                f"num_tokens_padded must be in [T = {num_tokens}, max_num_tokens = {self.max_num_tokens}], "
                f"got {num_tokens_padded}"
            )
        if num_computed_tokens is not None:
            check_tensor(num_computed_tokens, "num_computed_tokens", [torch.int32], 1, self._source_storage.device,
                         "the mappings")
            if num_computed_tokens.numel() < self.max_num_reqs:
                raise ValueError(f"num_computed_tokens must have max_num_reqs = {self.max_num_reqs} entries (one per "
                                 f"request row), got {num_computed_tokens.numel()}")
        if (self._check_positions_sizes is not None and not torch.compiler.is_compiling()
                and current_backend() == "native"):
            # The host ops reject a position past a group's table; groups differ there, so every
            # group is checked before the first one is rewritten (device kernels write PAD instead
            # and never reject a value).
            _CHECK_POSITIONS(query_start_loc, positions, self._checked_tables, idx_mapping,
                             self._check_positions_sizes, self._checked_counts)
        for group, source, counts, table, slots, args, reach in zip(
            self.groups, self.source_block_tables, self.num_blocks, self.block_tables, self.slot_mappings,
            self._slot_args, self._window_reach,
        ):
            # The slot mapping reads the source row through idx_mapping, not the gathered table,
            # so that a row of -1 gives PAD; the two are independent. It goes first because it
            # checks every tensor the caller passed: a bad one is rejected before any write.
            # The ops' own dispatchers, without the keyword wrappers: a third of a small op's cost.
            if args is not None:
                _SLOT_MAPPING(
                    query_start_loc, positions, source, args.block_size, slots, args.blocks_per_kv_block,
                    args.cp_world_size, args.cp_rank, args.cp_interleave, idx_mapping, num_tokens_padded, counts,
                )
            _GATHER(source, counts, idx_mapping, table, num_reqs_padded, num_computed_tokens, reach, group.block_size)
        # Groups without a slot mapping last, after every op has accepted the inputs.
        for slots, args in zip(self.slot_mappings, self._slot_args):
            if args is None:
                slots[:num_tokens_padded].fill_(PAD_SLOT_ID)

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
        if num_reqs_padded is None:
            num_reqs_padded = self.max_num_reqs
        if num_tokens_padded is None:
            num_tokens_padded = self.max_num_tokens
        if not isinstance(idx_mapping, torch.Tensor):
            raise ValueError(f"idx_mapping must be a tensor (batch row -> request row), got "
                             f"{type(idx_mapping).__name__}")
        num_reqs = idx_mapping.numel()
        if not num_reqs <= num_reqs_padded <= self.max_num_reqs:
            raise ValueError(
                f"num_reqs_padded must be in [R = {num_reqs}, max_num_reqs = {self.max_num_reqs}], got {num_reqs_padded}"
            )
        if not 0 <= num_tokens_padded <= self.max_num_tokens:
            raise ValueError(
                f"num_tokens_padded must be in [0, max_num_tokens = {self.max_num_tokens}], got {num_tokens_padded}")
        # The op's packed sizes and the returned views, made once per padded shape.
        shape = self._step_shapes.get((num_tokens_padded, num_reqs_padded))
        if shape is None:
            enabled = [args is not None for args in self._slot_args]
            sizes = pack_sizes(num_tokens_padded, num_reqs_padded, self.cp_world_size, self.cp_rank,
                               self.cp_interleave, [group.block_size for group in self.groups],
                               [group.blocks_per_kv_block for group in self.groups],
                               [group.cp_sharded for group in self.groups], enabled)
            views = RunnerStepInputs(self.positions[:num_tokens_padded], self.seq_lens[:num_reqs_padded],
                                     self.block_tables_by_name, self.slot_mappings_by_name)
            shape = self._step_shapes[(num_tokens_padded, num_reqs_padded)] = (sizes, views)
        sizes, views = shape
        try:
            _FUSED_STEP.select()(
                num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                prev_num_draft_tokens, cpu_num_computed_tokens, query_start_loc, self.positions, self.seq_lens,
                self.source_block_tables, self.slot_mappings, idx_mapping, sizes, self.num_blocks)
        except ValueError as error:
            raise named_after_the_wrapper(error, self.num_groups) from None
        row_first = None
        if self._masks_windows:
            # Request-indexed first positions for the gathers (the fused op's are batch-indexed).
            rows = self._scatter_rows[:num_reqs]
            rows.copy_(idx_mapping)
            rows.add_(self._ones[:num_reqs])
            self._row_first_position.index_copy_(0, rows, num_computed_tokens[:num_reqs])
            row_first = self._row_first_position[1:]
        for group, source, counts, table, reach in zip(self.groups, self.source_block_tables, self.num_blocks,
                                                       self.block_tables, self._window_reach):
            _GATHER(source, counts, idx_mapping, table, num_reqs_padded, row_first if reach else None, reach,
                    group.block_size)
        return views

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
    ) -> CommonDraftInputs:
        """The drafting layer's inputs for the step `prepare_step` (or `refresh` with
        `positions` filled by the caller) wrote: this object's positions, seq_lens, block tables
        and slot mappings, keyed by group name as `CommonDraftInputs` keys them (no copy)."""
        from specops.drafting import CommonDraftInputs

        return CommonDraftInputs(
            query_start_loc=query_start_loc, query_start_loc_cpu=query_start_loc_cpu, seq_lens=self.seq_lens,
            seq_lens_cpu=seq_lens_cpu, positions=self.positions, num_reqs=num_reqs,
            num_actual_tokens=num_actual_tokens, num_input_tokens=num_input_tokens, causal=causal,
            block_tables=self.block_tables_by_name, slot_mappings=self.slot_mappings_by_name)

    def fill_dummy(self) -> None:
        """NULL in every captured block table, PAD in every captured slot mapping (dummy runs)."""
        self._captured_tables.fill_(NULL_BLOCK_ID)
        self._captured_slots.fill_(PAD_SLOT_ID)
