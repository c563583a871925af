"""Model runner V2's target-step metadata (point "target_step"; docs/integrations.md).

`GPUModelRunner.execute_model` calls `prepare_inputs`, whose `prepare_pos_seq_lens` writes the
step's positions and seq_lens (one launch), then at once `prepare_attn`, which gathers every
group's batch block table (`BlockTables.gather_block_tables`, one launch) and maps every group's
slots from those positions (`BlockTables.compute_slot_mappings`, one launch). specops'
prepare_spec_decode_inputs does all three in one launch, in its request-indexed mode (model runner
V2's counts, indexed by block-table row, no correction), at the prepare_pos_seq_lens call: the
block tables' staged writes are applied before prepare_inputs, and nothing between the two
methods writes the counts, the tables or those buffers, so the launch computes from what
prepare_attn's calls would read. Those two calls then find their outputs already written for
exactly their arguments (a record per BlockTables, consumed once) and launch nothing.

The fusion needs what only the prepare_inputs seam knows on the host (the runner, the token
count, the padded request count), the block tables' host layout (recorded by the draft_steps
point's `BlockTables.__init__` seam), no PCP manager (PCP partitions the batch between the two
methods and maps slots itself), and at least one KV-cache group. Otherwise prepare_pos_seq_lens
is specops' prepare_positions_and_seq_lens, one for one (outside prepare_inputs, where the token
count is not known on the host, vLLM's own). With the block_tables or draft_steps point off (they
hold the consuming ends) the fusion is correct but saves nothing. With the fusion the target
positions past the step's tokens are 0 where vLLM leaves them stale (docs/conformance.md).
"""

from __future__ import annotations

import functools
import weakref

import torch

import specops
from specops.integrations.vllm import draft_steps, mrv2
from specops.integrations.vllm.mrv2 import point

# BlockTables -> (gather key, gathered rows, slot-mapping key) of what the last fused launch
# wrote; each end is consumed by the first matching call.
_written: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# BlockTables -> the batch rows its gathered tables held after the last gather the block_tables
# adapter saw (vLLM clears the rows a larger batch left; a dummy run's rows, which no adapter
# sees, make the consuming end fall back to a gather of its own).
_rows_left: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_EMPTY: dict[torch.device, torch.Tensor] = {}


def _empty(device: torch.device) -> torch.Tensor:
    """The op's correction inputs, empty (request-indexed counts have nothing to correct); one
    per device, made once."""
    empty = _EMPTY.get(device)
    if empty is None:
        empty = _EMPTY[device] = torch.empty(0, dtype=torch.int32, device=device)
    return empty


def _gather_key(idx_mapping: torch.Tensor, num_reqs_padded: int, num_computed_tokens: torch.Tensor) -> tuple:
    return (idx_mapping.data_ptr(), idx_mapping.numel(), num_reqs_padded, num_computed_tokens.data_ptr())


def _slots_key(idx_mapping: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor,
               num_tokens_padded: int) -> tuple:
    # Host attributes only (addresses and sizes): no device value is read.
    return (idx_mapping.data_ptr(), idx_mapping.numel(), query_start_loc.data_ptr(), positions.data_ptr(),
            num_tokens_padded)


def make_prepare_pos_seq_lens(original):
    @point("target_step")
    @functools.wraps(original)
    def prepare_pos_seq_lens(idx_mapping, query_start_loc, num_computed_tokens, pos, seq_lens):
        step = mrv2.current_step()
        if step is None:  # outside prepare_inputs: the token count is not known on the host
            return original(idx_mapping, query_start_loc, num_computed_tokens, pos, seq_lens)
        runner = step.runner
        tables = runner.block_tables
        layout = draft_steps.layout_of(tables)
        num_reqs = idx_mapping.shape[0]
        if (layout is None or runner.pcp_manager is not None or tables.num_kv_cache_groups == 0
                or num_computed_tokens is not step.num_computed_tokens
                or pos is not runner.input_buffers.positions or seq_lens is not runner.input_buffers.seq_lens):
            # Not fused: the same launch as vLLM's (its positions [0, T), seq_lens padded with 0).
            specops.prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc[:num_reqs + 1], positions=pos,
                                                   seq_lens=seq_lens, num_tokens_padded=step.num_tokens,
                                                   idx_mapping=idx_mapping)
            return
        width = tables.slot_mappings.shape[1]
        # The padded rows and any a larger batch left, as vLLM's gather rewrites them (every row
        # before the first gather this module saw).
        num_rows = max(step.num_reqs_padded, _rows_left.get(tables, tables.input_block_tables[0].shape[0]))
        empty = _empty(num_computed_tokens.device)
        specops.prepare_spec_decode_inputs(
            num_computed_tokens, empty, empty, empty, empty, empty, query_start_loc[:num_reqs + 1],
            [table.gpu for table in tables.block_tables], tables.block_sizes, positions=pos[:width], seq_lens=seq_lens,
            slot_mappings=list(tables.slot_mappings), cp_sharded=layout.dcp_sharded,
            slot_mapping_enabled=layout.slot_mapping_enabled, cp_world_size=tables.cp_size, cp_rank=tables.cp_rank,
            cp_interleave=tables.cp_interleave, idx_mapping=idx_mapping, num_tokens_padded=width,
            num_blocks=list(tables.num_blocks.gpu.unbind(0)), request_indexed_counts=True,
            gathered_block_tables=list(tables.input_block_tables), num_gathered_rows=num_rows,
            # vLLM masks the windows only when it has some (and prepare_attn passes the counts).
            sliding_window_reach=layout.sliding_window_reach if tables.has_sliding_window_groups else 0)
        _written[tables] = (_gather_key(idx_mapping, step.num_reqs_padded, num_computed_tokens), num_rows,
                            _slots_key(idx_mapping, query_start_loc, pos, width))
    return prepare_pos_seq_lens


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
