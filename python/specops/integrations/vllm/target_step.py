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

The launch is handed to the prepare_inputs seam's record (mrv2.defer_target_launch): its last
call, combine_sampled_and_draft_tokens (nothing runs between the two), runs it with the step's
input ids in it, or it runs alone before prepare_inputs returns. Under DCP, execute_model next
asks prepare_dcp_local_seq_lens for the DCP-local lengths of these seq_lens into the runner's
buffer; where the block tables' CP layout is the runner's DCP layout the launch writes them too,
and the dcp_local_seq_lens adapter consumes the record (fused_records.py).
"""

from __future__ import annotations

import functools

import torch

import specops
from specops.integrations.vllm.draft_steps import layout_of
from specops.integrations.vllm.fused_records import dcp_key, record_dcp, record_fused, rows_left
from specops.integrations.vllm.mrv2 import TargetLaunch, current_step, defer_target_launch, point

_EMPTY: dict[torch.device, torch.Tensor] = {}


def _empty(device: torch.device) -> torch.Tensor:
    """The op's correction inputs, empty (request-indexed counts have nothing to correct); one
    per device, made once."""
    empty = _EMPTY.get(device)
    if empty is None:
        empty = _EMPTY[device] = torch.empty(0, dtype=torch.int32, device=device)
    return empty


def make_prepare_pos_seq_lens(original):
    @point("target_step")
    @functools.wraps(original)
    def prepare_pos_seq_lens(idx_mapping, query_start_loc, num_computed_tokens, pos, seq_lens):
        step = current_step()
        if step is None:  # outside prepare_inputs: the token count is not known on the host
            return original(idx_mapping, query_start_loc, num_computed_tokens, pos, seq_lens)
        runner = step.runner
        tables = runner.block_tables
        layout = layout_of(tables)
        num_reqs = idx_mapping.shape[0]
        if getattr(runner, "dcp_size", 1) > 1:
            record_dcp(runner.input_buffers.dcp_local_seq_lens, None)  # an earlier step's record is stale
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
        num_rows = max(step.num_reqs_padded, rows_left(tables))
        empty = _empty(num_computed_tokens.device)
        kwargs = dict(
            num_computed_tokens=num_computed_tokens, num_accepted_tokens=empty, prev_positions=empty,
            valid_sampled_token_count=empty, prev_num_draft_tokens=empty, cpu_num_computed_tokens=empty,
            query_start_loc=query_start_loc[:num_reqs + 1], block_tables=[table.gpu for table in tables.block_tables],
            block_sizes=tables.block_sizes, positions=pos[:width], seq_lens=seq_lens,
            slot_mappings=list(tables.slot_mappings), cp_sharded=layout.dcp_sharded,
            slot_mapping_enabled=layout.slot_mapping_enabled, cp_world_size=tables.cp_size, cp_rank=tables.cp_rank,
            cp_interleave=tables.cp_interleave, idx_mapping=idx_mapping, num_tokens_padded=width,
            num_blocks=list(tables.num_blocks.gpu.unbind(0)), request_indexed_counts=True,
            gathered_block_tables=list(tables.input_block_tables), num_gathered_rows=num_rows,
            # vLLM masks the windows only when it has some (and prepare_attn passes the counts).
            sliding_window_reach=layout.sliding_window_reach if tables.has_sliding_window_groups else 0)
        dcp = _dcp_part(runner, seq_lens, num_reqs)
        if dcp is not None:
            kwargs["dcp_local_seq_lens"] = dcp[0]

        def after() -> None:
            record_fused(tables, idx_mapping, step.num_reqs_padded, num_computed_tokens, num_rows, query_start_loc,
                         pos, width)
            if dcp is not None:
                record_dcp(*dcp)

        launch = TargetLaunch(kwargs, after)
        if not defer_target_launch(launch):
            launch.run()
    return prepare_pos_seq_lens


def _dcp_part(runner, seq_lens: torch.Tensor, num_reqs: int) -> tuple[torch.Tensor, tuple] | None:
    """The DCP-local seq_lens execute_model asks for right after prepare_attn (DCP > 1: vLLM's
    prepare_dcp_local_seq_lens over these seq_lens, the runner's own buffer, its DCP rank and
    interleave), when the block tables' CP layout is that DCP layout: (buffer, the call's key)."""
    if getattr(runner, "dcp_size", 1) <= 1:
        return None
    tables, buffer = runner.block_tables, runner.input_buffers.dcp_local_seq_lens
    if (tables.cp_size, tables.cp_rank, tables.cp_interleave) != (runner.dcp_size, runner.dcp_rank,
                                                                   runner.cp_interleave):
        return None
    return buffer, dcp_key(seq_lens, num_reqs, runner.dcp_size, runner.dcp_rank, runner.cp_interleave)
