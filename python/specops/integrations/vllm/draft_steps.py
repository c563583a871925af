"""Model runner V2's speculator: its draft prefill and decode loop (point "draft_steps";
docs/integrations.md).

Before the draft prefill, `TargetDependentARSpeculator.propose` calls `_copy_request_inputs` (the
drafter's temperatures, seeds and request mapping, the mapping padded with -1) and at once
`prepare_prefill_inputs` (one launch); specops' prepare_draft_prefill_inputs writes the prefill
inputs and the drafter's request mapping in one launch. Inside propose, for its own batch,
`_copy_request_inputs` leaves the mapping to that launch: nothing reads it between the two calls.

`TargetDependentARSpeculator._multi_step_decode` runs, for K drafts: `prepare_decode_inputs`
(one launch), then for each step k = 1 .. K - 1 `BlockTables.compute_slot_mappings` (one launch,
every group), the draft forward and sampler, and `update_draft_inputs` (one launch). Each slot
mapping is a function of the positions the launch before it wrote, so specops' advance_draft_step
computes it inside that launch: the first step's in the decode preparation, step k + 1's in step
k's update (on the last step, read on the device, the update stores the drafts and nothing else,
as vLLM's kernel does). The compute_slot_mappings call that follows then finds its slot mappings
already written for exactly its arguments and launches nothing. K - 1 launches fewer a propose.

The seam is `propose`: inside it (ContextVars hold the speculator) the request mapping's copy
joins the prefill launch (not in a dummy run, whose mapping vLLM fills with -1), and the two
updates fuse, only when vLLM's loop would compute those slot mappings itself: positions advance
between steps, attention is not skipped (a dummy run with skip_attn_for_dummy_run computes none),
the loop is `_multi_step_decode` (the fused-metadata loop computes the first step's twice and,
under full graphs, none), and the block tables' host layout is known (recorded by the
`BlockTables.__init__` seam: vLLM keeps the CP-sharded flags on the device only, and reading them
would sync). The record of what the slot mappings hold is consumed by the first
compute_slot_mappings call with the same block tables, positions, request mapping and query
layout, and by nothing else; anything else calls vLLM's own function. Under a replayed full graph
the host sees no update, so every later compute_slot_mappings launches as vLLM's does (the values
are the same either way).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import sys
import weakref

import torch

import specops
from specops.integrations.vllm.fused_records import mapped
from specops.integrations.vllm.mrv2 import point


@dataclasses.dataclass(frozen=True)
class _Layout:
    """The host copies of what BlockTables keeps on the device."""

    dcp_sharded: list[bool]
    slot_mapping_enabled: list[bool]
    sliding_window_reach: list[int]  # as vLLM keeps it: all 0 under context parallelism


_layouts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def layout_of(block_tables) -> _Layout | None:
    """The host layout recorded for these block tables, or None."""
    return _layouts.get(block_tables)


class _Loop:
    """One propose call's decode loop: its speculator, and what the slot mappings hold."""

    __slots__ = ("speculator", "written")

    def __init__(self, speculator):
        self.speculator = speculator
        self.written: tuple | None = None


_loop: contextvars.ContextVar[_Loop | None] = contextvars.ContextVar("specops_vllm_draft_loop", default=None)


class _Prefill:
    """One propose call's draft prefill: its speculator and batch, and the request-mapping copy
    `_copy_request_inputs` left to the prefill launch (the drafter's buffer, the source, R)."""

    __slots__ = ("speculator", "input_batch", "request_copy")

    def __init__(self, speculator, input_batch):
        self.speculator = speculator
        self.input_batch = input_batch
        self.request_copy: tuple[torch.Tensor, torch.Tensor, int] | None = None


_prefill: contextvars.ContextVar[_Prefill | None] = contextvars.ContextVar("specops_vllm_draft_prefill", default=None)


def _key(block_tables, idx_mapping: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor) -> tuple:
    # Host attributes only (addresses and sizes): no device value is read.
    return (id(block_tables), idx_mapping.data_ptr(), idx_mapping.numel(), query_start_loc.data_ptr(),
            query_start_loc.numel(), positions.data_ptr(), positions.numel())


def make_block_tables_init(original):
    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def __init__(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group, device,
                 cp_size=1, cp_rank=0, cp_interleave=1, slot_mapping_enabled=None, dcp_sharded=None,
                 sliding_window_reach=None):
        original(self, block_sizes, max_num_reqs, max_num_batched_tokens, max_num_blocks_per_group, device, cp_size,
                 cp_rank, cp_interleave, slot_mapping_enabled, dcp_sharded, sliding_window_reach)
        num_groups = len(block_sizes)
        _layouts[self] = _Layout(
            dcp_sharded=[bool(x) for x in dcp_sharded] if dcp_sharded is not None else [True] * num_groups,
            slot_mapping_enabled=([bool(x) for x in slot_mapping_enabled] if slot_mapping_enabled is not None
                                  else [True] * num_groups),
            sliding_window_reach=([int(x) for x in sliding_window_reach]
                                  if sliding_window_reach is not None and cp_size == 1 else [0] * num_groups))
    return __init__


# The methods whose call order the fusion relies on (fingerprinted as the point's reads).
LOOP = ("_multi_step_decode", "_generate_draft")


def _loop_of_its_own(cls: type, owner: type) -> bool:
    """Whether `cls` (a subclass of `owner`) defines one of LOOP itself: asked of each class's
    own namespace, not through the attribute."""
    for klass in cls.__mro__:
        if klass is owner:
            return False
        if any(name in vars(klass) for name in LOOP):
            return True
    return True


def make_propose(original):
    signature = inspect.signature(original)
    owner = getattr(sys.modules[original.__module__], original.__qualname__.split(".")[0])

    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def propose(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        dummy_run = bound.arguments.get("dummy_run", False)
        # The draft prefill: propose copies the request mapping, then prepares the prefill inputs
        # (nothing reads the drafter's mapping between them), which the prefill launch does both.
        prefill = _prefill.set(_Prefill(self, bound.arguments.get("input_batch")) if not dummy_run else None)
        skip_attn = dummy_run and bound.arguments.get("skip_attn_for_dummy_run", False)
        steps = not (skip_attn or not self.advance_draft_positions or self.supports_decode_metadata_update
                     or _loop_of_its_own(type(self), owner)
                     or self.block_tables.num_kv_cache_groups == 0 or self.block_tables not in _layouts)
        loop = _loop.set(_Loop(self) if steps else None)
        try:
            return original(self, *args, **kwargs)
        finally:
            _loop.reset(loop)
            _prefill.reset(prefill)
    return propose


def make_copy_request_inputs(original):
    # A seam: vLLM's own body, or (inside propose, for its batch) its two whole-buffer copies, with
    # the request mapping's copy and -1 fill left to the prefill launch that follows.
    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def _copy_request_inputs(self, num_reqs, idx_mapping, temperature, seeds, dummy_run=False):
        prefill = _prefill.get()
        if (dummy_run or prefill is None or prefill.speculator is not self or num_reqs == 0
                or idx_mapping is not prefill.input_batch.idx_mapping or num_reqs != prefill.input_batch.num_reqs):
            return original(self, num_reqs, idx_mapping, temperature, seeds, dummy_run)
        self.temperature.copy_(temperature)
        self.seeds.copy_(seeds)
        prefill.request_copy = (self.idx_mapping, idx_mapping, num_reqs)
    return _copy_request_inputs


def make_prepare_prefill_inputs(original):
    @point("draft_steps")
    @functools.wraps(original)
    def prepare_prefill_inputs(last_token_indices, current_draft_step, input_buffers, input_batch, num_sampled,
                               num_rejected, last_sampled, next_prefill_tokens, max_num_reqs):
        num_reqs = input_batch.num_reqs
        if num_reqs == 0:  # vLLM's empty grid writes nothing; the op would write the padding
            return original(last_token_indices, current_draft_step, input_buffers, input_batch, num_sampled,
                            num_rejected, last_sampled, next_prefill_tokens, max_num_reqs)
        prefill = _prefill.get()
        request_copy = None
        if prefill is not None and prefill.input_batch is input_batch:
            request_copy, prefill.request_copy = prefill.request_copy, None
        # vLLM's kernel pads the request-indexed buffers to max_num_reqs (+ 1); the op pads to the
        # end of the views it is given.
        specops.prepare_draft_prefill_inputs(
            input_batch.input_ids, input_batch.positions, input_batch.idx_mapping[:num_reqs],
            input_batch.query_start_loc, input_batch.seq_lens, num_sampled[:num_reqs], num_rejected[:num_reqs],
            last_sampled, next_prefill_tokens, input_ids=input_buffers.input_ids, positions=input_buffers.positions,
            out_query_start_loc=input_buffers.query_start_loc[:max_num_reqs + 1],
            out_seq_lens=input_buffers.seq_lens[:max_num_reqs], last_token_indices=last_token_indices[:max_num_reqs],
            current_draft_step=current_draft_step,
            request_idx_mapping=None if request_copy is None else request_copy[0])
        return last_token_indices
    return prepare_prefill_inputs


def _advance(loop: _Loop, positions: torch.Tensor, seq_lens: torch.Tensor, max_model_len: int, **step) -> None:
    """advance_draft_step (clamp rule) over every group of the speculator's block tables, into
    vLLM's slot-mapping buffer; records what the slot mappings now hold."""
    speculator = loop.speculator
    tables = speculator.block_tables
    layout = _layouts[tables]
    idx_mapping = speculator.idx_mapping[:positions.numel()]
    specops.advance_draft_step(
        positions, seq_lens, [table.gpu for table in tables.block_tables], tables.block_sizes,
        max_model_len=max_model_len, past_max_model_len="clamp", idx_mapping=idx_mapping,
        slot_mappings=list(tables.slot_mappings), cp_sharded=layout.dcp_sharded,
        slot_mapping_enabled=layout.slot_mapping_enabled, cp_world_size=tables.cp_size, cp_rank=tables.cp_rank,
        cp_interleave=tables.cp_interleave, **step)
    query_start_loc = speculator.input_buffers.query_start_loc[:positions.numel() + 1]
    loop.written = _key(tables, idx_mapping, query_start_loc, positions)


def make_prepare_decode_inputs(original):
    @point("draft_steps")
    @functools.wraps(original)
    def prepare_decode_inputs(draft_tokens, target_seq_lens, num_rejected, input_buffers, sample_src_positions,
                              max_model_len, max_num_reqs, advance_draft_positions=True):
        loop = _loop.get()
        if loop is None or not advance_draft_positions or input_buffers is not loop.speculator.input_buffers:
            return original(draft_tokens, target_seq_lens, num_rejected, input_buffers, sample_src_positions,
                            max_model_len, max_num_reqs, advance_draft_positions)
        num_reqs = draft_tokens.shape[0]
        # vLLM passes column 0 of its drafts buffer; the op reads it as that buffer's [R, 1] view.
        first_drafts = draft_tokens.as_strided((num_reqs, 1), (draft_tokens.stride(0), 1))
        _advance(loop, input_buffers.positions[:num_reqs], input_buffers.seq_lens, max_model_len,
                 num_rejected_tokens=num_rejected[:num_reqs], target_seq_lens=target_seq_lens[:num_reqs],
                 query_start_loc=input_buffers.query_start_loc, num_reqs_padded=max_num_reqs,
                 input_ids=input_buffers.input_ids, draft_tokens=first_drafts, sample_positions=sample_src_positions)
    return prepare_decode_inputs


def make_update_draft_inputs(original):
    @point("draft_steps")
    @functools.wraps(original)
    def update_draft_inputs(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, sample_src_positions, num_reqs, max_model_len,
                            num_speculative_steps, advance_draft_positions=True):
        loop = _loop.get()
        if loop is None or not advance_draft_positions or input_buffers is not loop.speculator.input_buffers:
            return original(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, sample_src_positions, num_reqs, max_model_len,
                            num_speculative_steps, advance_draft_positions)
        _advance(loop, input_buffers.positions[:num_reqs], input_buffers.seq_lens[:num_reqs], max_model_len,
                 input_ids=input_buffers.input_ids, draft_tokens=output_draft_tokens,
                 sampled_tokens=draft_tokens[:num_reqs], draft_step=current_draft_step,
                 num_draft_steps=num_speculative_steps, sample_positions=sample_src_positions,
                 hidden_states=hidden_states, next_hidden_states=next_input_hidden_states)
    return update_draft_inputs


def make_compute_slot_mappings(original):
    # A seam: it runs vLLM's own method, or (its slot mappings already written by the launch
    # before) nothing at all.
    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def compute_slot_mappings(self, idx_mapping, query_start_loc, positions, num_tokens_padded, out=None):
        if out is None and mapped(self, idx_mapping, query_start_loc, positions, num_tokens_padded):
            return self.slot_mappings[:, :num_tokens_padded]  # the target step's fused launch mapped them
        loop = _loop.get()
        if (loop is not None and out is None and loop.written is not None
                and loop.written == _key(self, idx_mapping, query_start_loc, positions)):
            loop.written = None
            return self.slot_mappings[:, :num_tokens_padded]
        return original(self, idx_mapping, query_start_loc, positions, num_tokens_padded, out)
    return compute_slot_mappings
