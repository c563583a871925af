"""vllm-ascend's model runner V2 (vllm_ascend/worker/v2, written for vLLM 0.26): the Ascend points'
runner adapters (docs/integrations.md, "Ascend").

vllm-ascend's `NPUModelRunner.prepare_inputs` is a copy of vLLM's that calls the input-batch
functions through the names its own module imported, and its `AscendBlockTables` maps slots with
a kernel of its own into int32 buffers. The seam is `NPUModelRunner.prepare_inputs`: inside it
the input-id functions fuse as in vLLM's runner (mrv2.py's adapters, `prepare_input_ids`), and
`prepare_pos_seq_lens` becomes the fused target step: positions, seq_lens, every group's gathered
block table and slot mapping in one `prepare_spec_decode_inputs` launch (request-indexed counts),
written into vllm-ascend's own buffers. `prepare_attn` (vLLM's) then finds its gather and its
slot mappings written for exactly its arguments and launches nothing; any other call gathers with
`gather_block_tables_multi` or maps with vllm-ascend's own kernel.

The speculators' decode loop (`AscendAutoRegressiveSpeculator.propose` is the seam; vLLM's
`_multi_step_decode` runs under vllm-ascend's override): `prepare_decode_inputs` and each
`update_draft_inputs` become `advance_draft_step` (clamp rule), which also maps the next draft
step's slots of every group into vllm-ascend's int32 buffer; the `compute_slot_mappings` call that
follows finds them written and launches nothing.

Exact where vllm-ascend's kernel is not: it gathers block ids through float32 (a slot past 2^24
can be wrong) and loads 4096 table words a row unmasked (it misses block indices past 4096 and
reads past the table); specops' ops compute in integers over the whole table.

vLLM 0.26's `BlockTables` keeps no CP-sharded or slot-mapping flags: every group is CP-sharded
and mapped, its table holds kernel-block ids (`kernel_block_sizes`), and its gather masks no
sliding window.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import weakref

import torch

import specops
import specops.integrations.vllm.mrv2 as mrv2
from specops.integrations.vllm.mrv2 import point

# AscendBlockTables -> [gather key, slots key] of what the fused target step wrote; each end
# consumed once.
_written: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_EMPTY: dict[torch.device, torch.Tensor] = {}


def _empty(device: torch.device) -> torch.Tensor:
    empty = _EMPTY.get(device)
    if empty is None:
        empty = _EMPTY[device] = torch.empty(0, dtype=torch.int32, device=device)
    return empty


def _gather_key(idx_mapping: torch.Tensor, num_reqs_padded: int) -> tuple:
    return (idx_mapping.data_ptr(), idx_mapping.numel(), num_reqs_padded)


def _slots_key(tables, idx_mapping: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor) -> tuple:
    # Host attributes only (addresses and sizes): no device value is read.
    return (id(tables), idx_mapping.data_ptr(), idx_mapping.numel(), query_start_loc.data_ptr(), positions.data_ptr())


def _consume(tables, end: int, key: tuple) -> bool:
    written = _written.get(tables)
    if written is None or written[end] != key:
        return False
    written[end] = None
    return True


def make_prepare_inputs(original):
    """NPUModelRunner.prepare_inputs: the step-input seam (mrv2.step_inputs)."""
    @point("input_ids", seam=True)
    @functools.wraps(original)
    def prepare_inputs(self, scheduler_output, batch_desc):
        if self.model_state.num_new_sampled_tokens_per_step not in (0, 1):
            return original(self, scheduler_output, batch_desc)
        num_reqs = len(scheduler_output.num_scheduled_tokens)
        with mrv2.step_inputs(self, scheduler_output.total_num_scheduled_tokens, batch_desc.num_reqs or num_reqs):
            return original(self, scheduler_output, batch_desc)
    return prepare_inputs


def make_prepare_prefill_inputs(original):
    """vLLM's deferring adapter (mrv2.py); vLLM 0.26 keeps one next prefill token a request (a
    1-D buffer), which the fused launch takes as a [1, max_num_reqs] view (one lookahead row)."""
    deferred = mrv2.make_prepare_prefill_inputs(original)

    @point("input_ids")
    @functools.wraps(original)
    def prepare_prefill_inputs(input_ids, next_prefill_tokens, *args):
        if mrv2.current_step() is None or next_prefill_tokens.dim() != 1:
            return original(input_ids, next_prefill_tokens, *args)
        return deferred(input_ids, next_prefill_tokens.unsqueeze(0), *args)
    return prepare_prefill_inputs


def make_combine_sampled_and_draft_tokens(original, prepare_prefill_original, expand_original):
    """vLLM's adapter (mrv2.py) for the runner's own buffers; PCP's partition calls the function
    again for its local batch inside the seam, which is vLLM's own."""
    fused = mrv2.make_combine_sampled_and_draft_tokens(original, prepare_prefill_original, expand_original)

    @point("input_ids")
    @functools.wraps(original)
    def combine_sampled_and_draft_tokens(input_ids, *args, **kwargs):
        step = mrv2.current_step()
        if step is not None and input_ids is not step.runner.input_buffers.input_ids:
            return original(input_ids, *args, **kwargs)
        return fused(input_ids, *args, **kwargs)
    return combine_sampled_and_draft_tokens


def make_prepare_pos_seq_lens(original):
    """The fused target step at prepare_inputs' prepare_pos_seq_lens (see the module docstring)."""
    @point("target_step")
    @functools.wraps(original)
    def prepare_pos_seq_lens(idx_mapping, query_start_loc, num_computed_tokens, pos, seq_lens):
        step = mrv2.current_step()
        if (step is None or pos is not step.runner.input_buffers.positions
                or seq_lens is not step.runner.input_buffers.seq_lens or num_computed_tokens is not step.num_computed_tokens):
            # PCP's local batch, or a caller outside prepare_inputs: vLLM's own.
            return original(idx_mapping, query_start_loc, num_computed_tokens, pos, seq_lens)
        runner = step.runner
        tables = runner.block_tables
        num_reqs = idx_mapping.shape[0]
        if runner.pcp_manager is not None or tables.num_kv_cache_groups == 0:
            # Not fused (PCP repartitions the batch and maps slots itself): vLLM's launch, one for one.
            specops.prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc[:num_reqs + 1], positions=pos,
                                                   seq_lens=seq_lens, num_tokens_padded=step.num_tokens,
                                                   idx_mapping=idx_mapping)
            return
        # prepare_inputs' padded request count, vllm-ascend's FIA padding included: the query
        # layout it hands in is that long (a host size).
        num_rows = query_start_loc.shape[0] - 1
        width = tables.slot_mappings.shape[1]
        empty = _empty(num_computed_tokens.device)
        specops.prepare_spec_decode_inputs(
            num_computed_tokens, empty, empty, empty, empty, empty, query_start_loc[:num_reqs + 1],
            [table.gpu for table in tables.block_tables], list(tables.kernel_block_sizes), positions=pos[:width],
            seq_lens=seq_lens, slot_mappings=list(tables.slot_mappings), cp_world_size=tables.cp_size,
            cp_rank=tables.cp_rank, cp_interleave=tables.cp_interleave, idx_mapping=idx_mapping,
            num_tokens_padded=width, num_blocks=list(tables.num_blocks.gpu.unbind(0)), request_indexed_counts=True,
            gathered_block_tables=list(tables.input_block_tables), num_gathered_rows=num_rows)
        _written[tables] = [_gather_key(idx_mapping, num_rows), _slots_key(tables, idx_mapping, query_start_loc, pos)]
    return prepare_pos_seq_lens


def make_gather_block_tables(original):
    """vLLM 0.26's BlockTables.gather_block_tables: the fused step's gather, or one
    gather_block_tables_multi launch (into the caller's tables: PCP's local ones)."""
    @point("block_tables")
    @functools.wraps(original)
    def gather_block_tables(self, idx_mapping, num_reqs_padded, out=None, out_ptrs=None):
        if self.num_kv_cache_groups == 0:
            return original(self, idx_mapping, num_reqs_padded, out, out_ptrs)
        if out is None and _consume(self, 0, _gather_key(idx_mapping, num_reqs_padded)):
            return tuple(table[:num_reqs_padded] for table in self.input_block_tables)
        target = list(self.input_block_tables if out is None else out)
        specops.gather_block_tables_multi([table.gpu for table in self.block_tables],
                                          list(self.num_blocks.gpu.unbind(0)), idx_mapping, target,
                                          num_reqs_padded=num_reqs_padded)
        return tuple(table[:num_reqs_padded] for table in target)
    return gather_block_tables


class _Loop:
    """One propose call's decode loop: its speculator, and what the slot mappings hold."""

    __slots__ = ("speculator", "written")

    def __init__(self, speculator):
        self.speculator = speculator
        self.written: tuple | None = None


_loop: contextvars.ContextVar[_Loop | None] = contextvars.ContextVar("specops_ascend_draft_loop", default=None)


def make_compute_slot_mappings(original):
    """AscendBlockTables.compute_slot_mappings: a seam. Its slot mappings already written by the
    launch before it (the fused target step, a draft step's update) for exactly its arguments:
    nothing; else vllm-ascend's own kernel."""
    @point("target_step", seam=True)
    @functools.wraps(original)
    def compute_slot_mappings(self, idx_mapping, query_start_loc, positions, num_tokens_padded, out=None):
        if out is None:
            key = _slots_key(self, idx_mapping, query_start_loc, positions)
            if _consume(self, 1, key):
                return self.slot_mappings[:, :num_tokens_padded]
            loop = _loop.get()
            if loop is not None and loop.written == key:
                loop.written = None
                return self.slot_mappings[:, :num_tokens_padded]
        return original(self, idx_mapping, query_start_loc, positions, num_tokens_padded, out)
    return compute_slot_mappings


def make_propose(original):
    """AscendAutoRegressiveSpeculator.propose: the decode loop's seam."""
    signature = inspect.signature(original)

    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def propose(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        skip_attn = bound.arguments.get("dummy_run", False) and bound.arguments.get("skip_attn_for_dummy_run", False)
        steps = not skip_attn and self.advance_draft_positions and self.block_tables.num_kv_cache_groups > 0
        token = _loop.set(_Loop(self) if steps else None)
        try:
            return original(self, *args, **kwargs)
        finally:
            _loop.reset(token)
    return propose


def _advance(loop: _Loop, positions: torch.Tensor, seq_lens: torch.Tensor, max_model_len: int, **step) -> None:
    """advance_draft_step (clamp rule) over every group, into vllm-ascend's int32 slot mappings;
    records what they now hold."""
    speculator = loop.speculator
    tables = speculator.block_tables
    num_reqs = positions.numel()
    idx_mapping = speculator.idx_mapping[:num_reqs]
    specops.advance_draft_step(
        positions, seq_lens, [table.gpu for table in tables.block_tables], list(tables.kernel_block_sizes),
        max_model_len=max_model_len, past_max_model_len="clamp", idx_mapping=idx_mapping,
        slot_mappings=list(tables.slot_mappings), cp_world_size=tables.cp_size, cp_rank=tables.cp_rank,
        cp_interleave=tables.cp_interleave, **step)
    query_start_loc = speculator.input_buffers.query_start_loc[:num_reqs + 1]
    loop.written = _slots_key(tables, idx_mapping, query_start_loc, positions)


def make_prepare_decode_inputs(original):
    @point("draft_steps")
    @functools.wraps(original)
    def prepare_decode_inputs(draft_tokens, target_seq_lens, num_rejected, input_buffers, max_model_len, max_num_reqs,
                              advance_draft_positions=True):
        loop = _loop.get()
        if loop is None or not advance_draft_positions or input_buffers is not loop.speculator.input_buffers:
            return original(draft_tokens, target_seq_lens, num_rejected, input_buffers, max_model_len, max_num_reqs,
                            advance_draft_positions)
        num_reqs = draft_tokens.shape[0]
        # vLLM passes column 0 of its drafts buffer; the op reads it as that buffer's [R, 1] view.
        first_drafts = draft_tokens.as_strided((num_reqs, 1), (draft_tokens.stride(0), 1))
        # vLLM's kernel writes max_num_reqs + 1 query starts (vllm-ascend's buffer holds one more).
        _advance(loop, input_buffers.positions[:num_reqs], input_buffers.seq_lens, max_model_len,
                 num_rejected_tokens=num_rejected[:num_reqs], target_seq_lens=target_seq_lens[:num_reqs],
                 query_start_loc=input_buffers.query_start_loc[:max_num_reqs + 1], num_reqs_padded=max_num_reqs,
                 input_ids=input_buffers.input_ids, draft_tokens=first_drafts)
    return prepare_decode_inputs


def make_update_draft_inputs(original):
    @point("draft_steps")
    @functools.wraps(original)
    def update_draft_inputs(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, num_reqs, max_model_len, num_speculative_steps,
                            advance_draft_positions=True):
        loop = _loop.get()
        if loop is None or not advance_draft_positions or input_buffers is not loop.speculator.input_buffers:
            return original(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, num_reqs, max_model_len, num_speculative_steps,
                            advance_draft_positions)
        _advance(loop, input_buffers.positions[:num_reqs], input_buffers.seq_lens[:num_reqs], max_model_len,
                 input_ids=input_buffers.input_ids, draft_tokens=output_draft_tokens,
                 sampled_tokens=draft_tokens[:num_reqs], draft_step=current_draft_step,
                 num_draft_steps=num_speculative_steps, hidden_states=hidden_states,
                 next_hidden_states=next_input_hidden_states)
    return update_draft_inputs
