"""Model runner V2's speculator: its draft prefill and decode loops (point "draft_steps";
docs/integrations.md).

Before the draft prefill, `TargetDependentARSpeculator.propose` calls `_copy_request_inputs` (the
drafter's temperatures, seeds and request mapping, the mapping padded with -1) and at once
`prepare_prefill_inputs` (one launch); specops' prepare_draft_prefill_inputs writes the prefill
inputs and the drafter's request mapping in one launch. Inside propose, for its own batch,
`_copy_request_inputs` leaves the mapping to that launch: nothing reads it between the two calls.

The decode loop, for K drafts: the decode preparation (0.33 `prepare_decode_inputs`, 0.34
`_prepare_decode_inputs`, one launch), then for each step k = 1 .. K - 1
`BlockTables.compute_slot_mappings` (one launch, every group), the draft forward and sampler, and
`update_draft_inputs` (one launch). Each slot mapping is a function of the positions the launch
before it wrote, so specops' advance_draft_step computes it inside that launch: the first step's
in the decode preparation, step k + 1's in step k's update (on the last step, read on the device,
the update stores the drafts and nothing else, as vLLM's kernel does). The compute_slot_mappings
call that follows then finds its slot mappings already written for exactly its arguments and
launches nothing. Both of vLLM's loops are served: the multi-step loop (`_multi_step_decode`) and
the fused-metadata loop (0.33 `_fused_multi_step_decode` / `_generate_fused_drafts`, 0.34
`_run_fused_multi_step_decode` / `_fused_multi_step_decode`, which vLLM picks when every draft
attention group updates its metadata in place), where step 1's slot mappings are asked for twice
(once to build the metadata, once inside the loop): both calls find them written.

The seam is `propose`: inside it (ContextVars hold the speculator) the request mapping's copy
joins the prefill launch (not in a dummy run, whose mapping vLLM fills with -1), and the updates
fuse, only where vLLM's loop computes those slot mappings itself: positions advance between steps,
attention is not skipped (a dummy run with skip_attn_for_dummy_run computes none), the loop is
vLLM's own (a subclass with a loop of its own keeps it), and the block tables' host layout is known
(recorded by the `BlockTables.__init__` seam: vLLM keeps the CP-sharded flags on the device only,
and reading them would sync). The fused-metadata loop's body is a seam of its own for the call
vLLM captures in a full graph outside propose: there each update computes the next step's slot
mappings into the buffer the graph reads, and step 1's stay vLLM's launch inside the graph.

The record of what the slot mappings hold serves the compute_slot_mappings calls with the same
block tables, positions, request mapping and query layout that vLLM's loop makes before the next
update (one; two for step 1 of the fused-metadata loop) and nothing else; anything else calls
vLLM's own function. Under a replayed full graph the host sees no update, so every later
compute_slot_mappings launches as vLLM's does (the values are the same either way).
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
from specops.integrations.vllm.mrv2 import deferred_update, flush_update, point, take_update


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
    """One decode loop: its speculator, what the slot mappings hold (`written`), and how many
    more compute_slot_mappings calls that record serves (`uses`)."""

    __slots__ = ("speculator", "fused", "written", "uses")

    def __init__(self, speculator, fused: bool):
        self.speculator = speculator
        self.fused = fused  # vLLM runs the fused-metadata loop: step 1's slot mappings asked for twice
        self.written: tuple | None = None
        self.uses = 0

    def forget(self) -> None:
        """vLLM's own function wrote the positions or the slot mappings: the record is stale."""
        self.written, self.uses = None, 0


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


# The methods whose call order the fusion relies on, per release (fingerprinted as the point's reads).
LOOP_0_33 = ("_multi_step_decode", "_fused_multi_step_decode", "_generate_fused_drafts", "_generate_draft")
LOOP_0_34 = ("_multi_step_decode", "_run_multi_step_decode", "_run_fused_multi_step_decode",
             "_fused_multi_step_decode", "_decode", "_prepare_decode_inputs")


def _loop_of_its_own(cls: type, owner: type, loop: tuple[str, ...]) -> bool:
    """Whether `cls` (a subclass of `owner`) defines one of `loop` itself: asked of each class's
    own namespace, not through the attribute."""
    for klass in cls.__mro__:
        if klass is owner:
            return False
        if any(name in vars(klass) for name in loop):
            return True
    return True


def _fusable(speculator, owner: type, loop: tuple[str, ...]) -> bool:
    """Whether vLLM's own loop computes the slot mappings this speculator's updates can write."""
    tables = speculator.block_tables
    return (speculator.advance_draft_positions and not _loop_of_its_own(type(speculator), owner, loop)
            and tables.num_kv_cache_groups > 0 and tables in _layouts)


def _owner(method) -> type:
    """The class that defines `method` (vLLM's propose)."""
    return getattr(sys.modules[method.__module__], method.__qualname__.split(".")[0])


def make_propose(original, *, loop: tuple[str, ...] = LOOP_0_33):
    signature = inspect.signature(original)
    owner = _owner(original)

    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def propose(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        dummy_run = bound.arguments.get("dummy_run", False)
        # The draft prefill: propose copies the request mapping, then prepares the prefill inputs
        # (nothing reads the drafter's mapping between them), which the prefill launch does both.
        prefill = _prefill.set(_Prefill(self, bound.arguments.get("input_batch")) if not dummy_run else None)
        skip_attn = dummy_run and bound.arguments.get("skip_attn_for_dummy_run", False)
        steps = not skip_attn and _fusable(self, owner, loop)
        token = _loop.set(_Loop(self, fused=bool(self.supports_decode_metadata_update)) if steps else None)
        try:
            return original(self, *args, **kwargs)
        finally:
            _loop.reset(token)
            _prefill.reset(prefill)
    return propose


def make_fused_drafts(original, propose_original, *, loop: tuple[str, ...] = LOOP_0_33):
    """The fused-metadata loop's body (0.33 `_generate_fused_drafts`, 0.34
    `_fused_multi_step_decode`): inside propose it runs as it is; called alone (vLLM captures it in a
    full graph) it gets a decode loop of its own, so each update writes the next step's slot
    mappings into the buffer the graph reads."""
    owner = _owner(propose_original)

    @point("draft_steps", seam=True)
    @functools.wraps(original)
    def fused_drafts(self, *args, **kwargs):
        if _loop.get() is not None or not isinstance(self, owner) or not _fusable(self, owner, loop):
            return original(self, *args, **kwargs)
        token = _loop.set(_Loop(self, fused=True))
        try:
            return original(self, *args, **kwargs)
        finally:
            _loop.reset(token)
    return fused_drafts


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
        update = deferred_update()
        if update is not None and not (num_reqs > 0 and _updates(update, input_batch, num_sampled, num_rejected,
                                                                 last_sampled)):
            flush_update()  # another batch's (or an empty one): vLLM's order, its launch first
            update = None
        if num_reqs == 0:  # vLLM's empty grid writes nothing; the op would write the padding
            return original(last_token_indices, current_draft_step, input_buffers, input_batch, num_sampled,
                            num_rejected, last_sampled, next_prefill_tokens, max_num_reqs)
        prefill = _prefill.get()
        request_copy = None
        if prefill is not None and prefill.input_batch is input_batch:
            request_copy, prefill.request_copy = prefill.request_copy, None
        # The post_update sample_tokens deferred to this launch (point "update_prefill").
        parts = {} if update is None else dict(
            num_computed_tokens=update["num_computed_tokens"], sampled_tokens=update["sampled_tokens"],
            all_token_ids=update["all_token_ids"], total_len=update["total_len"],
            output_bin_counts=update["output_bin_counts"])
        # vLLM's kernel pads the request-indexed buffers to max_num_reqs (+ 1); the op pads to the
        # end of the views it is given.
        specops.prepare_draft_prefill_inputs(
            input_batch.input_ids, input_batch.positions, input_batch.idx_mapping[:num_reqs],
            input_batch.query_start_loc, input_batch.seq_lens, num_sampled[:num_reqs], num_rejected[:num_reqs],
            last_sampled, next_prefill_tokens, input_ids=input_buffers.input_ids, positions=input_buffers.positions,
            out_query_start_loc=input_buffers.query_start_loc[:max_num_reqs + 1],
            out_seq_lens=input_buffers.seq_lens[:max_num_reqs], last_token_indices=last_token_indices[:max_num_reqs],
            current_draft_step=current_draft_step,
            request_idx_mapping=None if request_copy is None else request_copy[0], **parts)
        if update is not None:
            take_update()
        return last_token_indices
    return prepare_prefill_inputs


def _updates(update: dict, input_batch, num_sampled: torch.Tensor, num_rejected: torch.Tensor,
             last_sampled: torch.Tensor) -> bool:
    """Whether the deferred post_update is over this prefill's batch (host attributes only)."""
    return (update["idx_mapping"] is input_batch.idx_mapping and update["num_sampled"] is num_sampled
            and update["num_rejected"] is num_rejected and update["last_sampled_tokens"] is last_sampled
            and update["query_start_loc"] is input_batch.query_start_loc)


def _advance(loop: _Loop, positions: torch.Tensor, seq_lens: torch.Tensor, max_model_len, *, first: bool,
             **step) -> None:
    """advance_draft_step (clamp rule) over every group of the speculator's block tables, into
    vLLM's slot-mapping buffer; records what the slot mappings now hold. `max_model_len` as vLLM
    passes it: an int (0.33) or a 0-d int32 device tensor (0.34's update), read on the device."""
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
    loop.uses = 2 if first and loop.fused else 1


def _prepare_decode(loop: _Loop, first_drafts: torch.Tensor, target_seq_lens: torch.Tensor,
                    num_rejected: torch.Tensor, input_buffers, sample_src_positions: torch.Tensor, max_model_len,
                    max_num_reqs: int) -> None:
    """The decode preparation and step 1's slot mappings in one launch. `first_drafts` is column 0
    of the drafts buffer, as vLLM passes it; the op reads it as that buffer's [R, 1] view."""
    num_reqs = first_drafts.shape[0]
    first_drafts = first_drafts.as_strided((num_reqs, 1), (first_drafts.stride(0), 1))
    _advance(loop, input_buffers.positions[:num_reqs], input_buffers.seq_lens, max_model_len, first=True,
             num_rejected_tokens=num_rejected[:num_reqs], target_seq_lens=target_seq_lens[:num_reqs],
             query_start_loc=input_buffers.query_start_loc, num_reqs_padded=max_num_reqs,
             input_ids=input_buffers.input_ids, draft_tokens=first_drafts, sample_positions=sample_src_positions)


def _serving(input_buffers, advance_draft_positions: bool) -> _Loop | None:
    """The loop this call serves, or None (then vLLM's own function runs, and any record of the
    loop it belongs to is stale)."""
    loop = _loop.get()
    if loop is not None and advance_draft_positions and input_buffers is loop.speculator.input_buffers:
        return loop
    if loop is not None:
        loop.forget()
    return None


def make_prepare_decode_inputs(original):
    """0.33's module function."""
    @point("draft_steps")
    @functools.wraps(original)
    def prepare_decode_inputs(draft_tokens, target_seq_lens, num_rejected, input_buffers, sample_src_positions,
                              max_model_len, max_num_reqs, advance_draft_positions=True):
        loop = _serving(input_buffers, advance_draft_positions)
        if loop is None:
            return original(draft_tokens, target_seq_lens, num_rejected, input_buffers, sample_src_positions,
                            max_model_len, max_num_reqs, advance_draft_positions)
        _prepare_decode(loop, draft_tokens, target_seq_lens, num_rejected, input_buffers, sample_src_positions,
                        max_model_len, max_num_reqs)
    return prepare_decode_inputs


def make_prepare_decode_inputs_method(original):
    """0.34's `TargetDependentARSpeculator._prepare_decode_inputs` (its kernel's arguments, as
    vLLM's method passes them)."""
    @point("draft_steps")
    @functools.wraps(original)
    def _prepare_decode_inputs(self, input_batch, num_rejected, num_reqs, skip_attn, batch_desc):
        loop = _serving(self.input_buffers, self.advance_draft_positions)
        if loop is None:
            return original(self, input_batch, num_rejected, num_reqs, skip_attn, batch_desc)
        _prepare_decode(loop, self.draft_tokens[:num_reqs, 0], input_batch.seq_lens, num_rejected, self.input_buffers,
                        self.sample_src_positions, self.max_model_len, self.max_num_reqs)
    return _prepare_decode_inputs


def make_update_draft_inputs(original):
    @point("draft_steps")
    @functools.wraps(original)
    def update_draft_inputs(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, sample_src_positions, num_reqs, max_model_len,
                            num_speculative_steps, advance_draft_positions=True):
        loop = _serving(input_buffers, advance_draft_positions)
        if loop is None:
            return original(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, sample_src_positions, num_reqs, max_model_len,
                            num_speculative_steps, advance_draft_positions)
        _advance(loop, input_buffers.positions[:num_reqs], input_buffers.seq_lens[:num_reqs], max_model_len,
                 first=False, input_ids=input_buffers.input_ids, draft_tokens=output_draft_tokens,
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
        if loop is not None and out is None:
            if loop.written is not None and loop.written == _key(self, idx_mapping, query_start_loc, positions):
                loop.uses -= 1
                if loop.uses == 0:
                    loop.written = None
                return self.slot_mappings[:, :num_tokens_padded]
            loop.forget()  # vLLM's launch below writes the slot mappings
        return original(self, idx_mapping, query_start_loc, positions, num_tokens_padded, out)
    return compute_slot_mappings
