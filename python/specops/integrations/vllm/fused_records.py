"""What the target step's fused launch wrote, per BlockTables and per DCP buffer
(docs/integrations.md, "The target step").

target_step's `prepare_pos_seq_lens` writes in one launch what `BlockTables.gather_block_tables`
(the block_tables point, mrv2.py), `BlockTables.compute_slot_mappings` (the draft_steps point)
and, under DCP, `prepare_dcp_local_seq_lens` (the dcp_local_seq_lens point) would write next; it
records here the keys of each, and each of those adapters consumes its end. The records live below the three points so that each imports them at load time: no point
imports another for them (tests/tooling/test_module_layout.py holds the package free of import
cycles, lazy ones included).
"""

from __future__ import annotations

import weakref

import torch

# BlockTables -> (gather key, gathered rows, slot-mapping key) of what the last fused launch
# wrote; each end is consumed by the first matching call.
_written: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# BlockTables -> the batch rows its gathered tables held after the last gather the block_tables
# adapter saw (vLLM clears the rows a larger batch left; a dummy run's rows, which no adapter
# sees, make the consuming end fall back to a gather of its own).
_rows_left: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _gather_key(idx_mapping: torch.Tensor, num_reqs_padded: int, num_computed_tokens: torch.Tensor) -> tuple:
    return (idx_mapping.data_ptr(), idx_mapping.numel(), num_reqs_padded, num_computed_tokens.data_ptr())


def _slots_key(idx_mapping: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor,
               num_tokens_padded: int) -> tuple:
    # Host attributes only (addresses and sizes): no device value is read.
    return (idx_mapping.data_ptr(), idx_mapping.numel(), query_start_loc.data_ptr(), positions.data_ptr(),
            num_tokens_padded)


def record_fused(tables, idx_mapping: torch.Tensor, num_reqs_padded: int, num_computed_tokens: torch.Tensor,
                 num_rows: int, query_start_loc: torch.Tensor, positions: torch.Tensor, width: int) -> None:
    """The fused launch gathered `num_rows` rows of `tables` for (idx_mapping, num_reqs_padded,
    num_computed_tokens) and mapped the slots of (idx_mapping, query_start_loc, positions) to the
    slot mappings' `width`."""
    _written[tables] = (_gather_key(idx_mapping, num_reqs_padded, num_computed_tokens), num_rows,
                        _slots_key(idx_mapping, query_start_loc, positions, width))


def rows_left(tables) -> int:
    """The batch rows the gathered tables of `tables` may hold: what the last gather the
    block_tables adapter saw left, else every row (before the first)."""
    return _rows_left.get(tables, tables.input_block_tables[0].shape[0])


def note_rows_left(tables, num_rows: int) -> None:
    """The block_tables adapter's gather left `num_rows` batch rows in the gathered tables."""
    _rows_left[tables] = num_rows


def gathered(tables, idx_mapping: torch.Tensor, num_reqs_padded: int, num_computed_tokens, rows_to_clear: int) -> bool:
    """Whether the last fused launch gathered exactly this call's rows and cleared every row up to
    `rows_to_clear` (consumes the record)."""
    written = _written.get(tables)
    if written is None or num_computed_tokens is None or written[0] is None:
        return False
    if written[0] != _gather_key(idx_mapping, num_reqs_padded, num_computed_tokens) or written[1] < rows_to_clear:
        return False
    _written[tables] = (None, written[1], written[2])
    return True


def mapped(tables, idx_mapping: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor,
           num_tokens_padded: int) -> bool:
    """Whether the last fused launch mapped exactly this call's slots (consumes the record)."""
    written = _written.get(tables)
    if written is None or written[2] is None or num_tokens_padded > tables.slot_mappings.shape[1]:
        return False
    if written[2] != _slots_key(idx_mapping, query_start_loc, positions, tables.slot_mappings.shape[1]):
        return False
    _written[tables] = (written[0], written[1], None)
    return True


# id(the runner's DCP-local seq_lens buffer) -> (a weak reference to it, the key of what the last
# fused launch wrote into it; None: nothing to consume). By id: a tensor's == is elementwise.
_dcp: dict[int, tuple[weakref.ref, tuple | None]] = {}


def record_dcp(buffer: torch.Tensor, key: tuple | None) -> None:
    """The fused launch wrote `buffer` for `key` (`dcp_key(...)`), or (None) did not write it."""
    _dcp[id(buffer)] = (weakref.ref(buffer, lambda _, at=id(buffer): _dcp.pop(at, None)), key)


def dcp_key(seq_lens: torch.Tensor, num_reqs: int, dcp_size: int, dcp_rank: int, cp_interleave: int) -> tuple:
    """prepare_dcp_local_seq_lens' arguments as the record keys them (host attributes only)."""
    return (seq_lens.data_ptr(), num_reqs, dcp_size, dcp_rank, cp_interleave)


def dcp_written(buffer: torch.Tensor, seq_lens: torch.Tensor, num_reqs: int, dcp_size: int, dcp_rank: int,
                cp_interleave: int) -> bool:
    """Whether the last fused launch wrote `buffer` for exactly this call (consumes the record)."""
    held = _dcp.get(id(buffer))
    if held is None or held[0]() is not buffer or held[1] != dcp_key(seq_lens, num_reqs, dcp_size, dcp_rank,
                                                                      cp_interleave):
        return False
    _dcp[id(buffer)] = (held[0], None)
    return True
