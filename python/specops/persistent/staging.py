"""The staged-write engine of the request-indexed block tables (docs/persistent_buffers.md).

Every group's source table and block counts live in one flat int32 storage (see
`PersistentMappings`). Block-id and count changes are staged on the host, merged there so that
one launch never writes a cell twice, and applied to the storage by one `apply_staged_writes`
launch. The host keeps what every row holds once the staged writes land, so a row can be moved
or swapped by staging its ids again.

Not thread-safe: the staging state belongs to one runner thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from specops._constants import NULL_BLOCK_ID
from specops.arguments import INT32_MAX, checked_int
from specops.ops.apply_staged_writes import apply_staged_writes


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


class StagedBlockWrites:
    """Staged writes into `storage`, a flat int32 tensor holding group g's [max_num_reqs,
    widths[g]] table at table_offsets[g] and then the count of every (group, row), group-major,
    at counts_offset. width_names[g] is how an error names group g's width."""

    def __init__(self, storage: torch.Tensor, *, max_num_reqs: int, widths: Sequence[int],
                 table_offsets: Sequence[int], counts_offset: int, width_names: Sequence[str]):
        num_groups = len(widths)
        self.num_groups, self.max_num_reqs = num_groups, max_num_reqs
        self.widths, self.width_names = tuple(widths), tuple(width_names)
        self._table_offsets, self._counts_offset = tuple(table_offsets), counts_offset
        self._device = storage.device
        self._storage_as_table = storage.view(1, -1)  # what apply_staged_writes writes
        # Host state, allocated once. Counts and ids include staged writes; the device catches
        # up at apply().
        self._staged_counts = np.zeros((num_groups, max_num_reqs), dtype=np.int64)
        self._staged_ids = [np.zeros((max_num_reqs, width), dtype=np.int32) for width in widths]
        # Index of the pending block write of (group, row), -1 if none: a (group, row) has at most
        # one, since a write that overlaps or adjoins it is merged into it on the host.
        self._pending_write = np.full((num_groups, max_num_reqs), -1, dtype=np.int64)
        # Index in `values` of the pending count write of (group, row), -1 if none.
        self._pending_count_at = np.full((num_groups, max_num_reqs), -1, dtype=np.int64)

        # A step that appends a block to every row of every group fits as allocated; the host
        # staging grows past that rather than applying anything before apply().
        num_cells = num_groups * max_num_reqs
        self._num_writes = 0
        self._num_values = 0
        self._rows: torch.Tensor | None = None
        self._allocate(2 * num_cells + 2, 2 * num_cells + 4 * max(widths))

        self._packed_host: torch.Tensor | None = None
        self._packed_device: torch.Tensor | None = None
        self._copy_done: torch.Event | None = None
        if self._device.type != "cpu":
            self.stage_through_copy(pin_memory=True)

    @property
    def staged_counts(self) -> np.ndarray:
        """Read-only host view [G, max_num_reqs] of the block counts, staged writes included."""
        view = self._staged_counts.view()
        view.setflags(write=False)
        return view

    @property
    def num_writes(self) -> int:
        return self._num_writes

    def stage_through_copy(self, pin_memory: bool) -> None:
        """Off the host, the staged arrays travel packed, in one copy, through a pinned buffer
        that the next apply may refill only after that copy has run (tests use this on CPU)."""
        packed_size = 3 * self._write_capacity + 1 + self._value_capacity
        self._packed_host = torch.zeros(packed_size, dtype=torch.int32, pin_memory=pin_memory)
        self._packed_device = torch.zeros(packed_size, dtype=torch.int32, device=self._device)
        self._copy_done = torch.Event(device=self._device) if self._device.type != "cpu" else None

    # ---------------------------------------------------------------- what a runner stages

    def append(self, row: int, block_ids: Sequence[Sequence[int]], overwrite: bool) -> None:
        """block_ids[g] after row `row`'s ids of group g (or replacing them): every group's ids
        and widths checked before anything is staged."""
        if not isinstance(block_ids, Sequence) or len(block_ids) != self.num_groups:
            got = len(block_ids) if isinstance(block_ids, Sequence) else type(block_ids).__name__
            raise ValueError(f"block_ids must hold one list of block ids per group ({self.num_groups}), got {got}")
        row = self._checked_row(row, "row")
        block_ids = [_checked_block_ids(ids, group) for group, ids in enumerate(block_ids)]
        for group, ids in enumerate(block_ids):
            count = len(ids) + (0 if overwrite else int(self._staged_counts[group, row]))
            width = self.widths[group]
            if count > width:
                raise ValueError(
                    f"block_ids[{group}] would give row {row} {count} blocks, more than the width of group {group} "
                    f"({self.width_names[group]} = {width})"
                )
        for group, ids in enumerate(block_ids):
            self._stage(group, row, ids, overwrite)

    def move(self, src: int, dst: int) -> None:
        """Row src's ids and counts to row dst; src left empty (NULL, count 0)."""
        src, dst = self._checked_row(src, "src"), self._checked_row(dst, "dst")
        if src == dst:
            return
        for group in range(self.num_groups):
            self._stage(group, dst, self._staged_row(group, src), overwrite=True)
            self._stage(group, src, (), overwrite=True)

    def swap(self, a: int, b: int) -> None:
        """Rows a and b exchange their ids and counts."""
        a, b = self._checked_row(a, "a"), self._checked_row(b, "b")
        if a == b:
            return
        for group in range(self.num_groups):
            ids_a, ids_b = self._staged_row(group, a), self._staged_row(group, b)
            self._stage(group, a, ids_b, overwrite=True)
            self._stage(group, b, ids_a, overwrite=True)

    def apply(self) -> None:
        """Every staged write of every group (ids and counts) in one launch."""
        num_writes, num_values = self._num_writes, self._num_values
        if num_writes == 0:
            return
        if self._packed_device is None:
            rows, starts = self._rows[:num_writes], self._starts[:num_writes]
            cu_lens, values = self._cu_lens[: num_writes + 1], self._values[:num_values]
        else:
            rows, starts, cu_lens, values = self._copy_to_device(num_writes, num_values)
        apply_staged_writes(table=self._storage_as_table, rows=rows, starts=starts, cu_lens=cu_lens, values=values)
        self._num_writes = 0
        self._num_values = 0
        self._pending_write.fill(-1)
        self._pending_count_at.fill(-1)

    # ---------------------------------------------------------------- the host arrays

    def _allocate(self, write_capacity: int, value_capacity: int) -> None:
        """Host staging arrays of the given capacities, keeping what is staged."""
        host = dict(dtype=torch.int32, device="cpu")
        staged = (self._num_writes, self._num_values)
        old = (self._rows, self._starts, self._cu_lens, self._values) if self._rows is not None else None
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
        self._allocate(max(2 * self._write_capacity, self._num_writes + writes),
                       max(2 * self._value_capacity, self._num_values + values))
        if self._packed_host is not None:
            if self._copy_done is not None:
                self._copy_done.synchronize()  # the last copy read the old buffer
            self.stage_through_copy(pin_memory=self._packed_host.is_pinned())

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
            row_start = self._table_offsets[group] + row * self.widths[group]
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
            self._add_write(self._counts_offset + group * self.max_num_reqs + row, 1)
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
        """A write of `length` values at flat offset `start` of the storage."""
        k = self._num_writes
        self._starts_np[k] = start
        self._cu_lens_np[k + 1] = self._cu_lens_np[k] + length
        self._num_writes = k + 1
        self._num_values += length

    def _copy_to_device(self, num_writes: int, num_values: int) -> tuple[torch.Tensor, ...]:
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
