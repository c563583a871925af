"""Model runner V2's points (vllm/v1/worker/gpu): adapters with vLLM's signatures that run
specops ops into the buffers vLLM hands them (docs/integrations.md lists each point).

Every adapter takes the original it replaces (`make_*(original)`), reads no device value on the
host, allocates only what vLLM's function allocates (and returns it as vLLM does), and writes
nothing else.

The step-input seam (point "input_ids"). `GPUModelRunner.prepare_inputs` calls, in this order,
`expand_idx_mapping` (only when drafts are scheduled), `prepare_prefill_inputs` (only when the
batch has a prefill), `prepare_pos_seq_lens` and `combine_sampled_and_draft_tokens`; specops'
prepare_input_ids does the first, second and fourth in one launch. The one sound place for that
launch is the last call, the only one that sees every input (the drafts, the last sampled tokens,
the logits layout): the method is wrapped so that, inside it, the first two record their
arguments and hand back vLLM's own freshly allocated outputs unfilled, and the fourth fills them
all. That is sound because nothing between reads what the first two write: prepare_pos_seq_lens
reads the counts and query_start_loc only, and the expanded mapping is first read after
prepare_inputs returns. prepare_input_ids computes each row's seq_len from the counts itself, so
it does not depend on prepare_pos_seq_lens either. Outside prepare_inputs (another caller), or
with adaptive verification (which reshapes the logits layout between the calls), the functions
are vLLM's. The per-call record lives in a ContextVar set by the wrapper, so nothing leaks
across calls or threads. The target_step point hands its launch (at prepare_pos_seq_lens) to the
same record, and the last call adds the input ids to it: prepare_inputs in one launch.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import weakref

import torch

import specops
from specops.integrations.vllm.fused_records import dcp_written, gathered, note_rows_left


def point(name: str, *, seam: bool = False, host: bool = False):
    """Marks an adapter with the point it belongs to (the proof harness finds adapters by it).
    A seam wraps one of vLLM's own methods and runs its body (with vLLM's own host-to-device
    copies): its extent is vLLM's, and only the adapters it calls are specops'. A host adapter
    replaces host planning: vLLM passes it host values only (NumPy arrays, ints), it reads host
    tensors it made itself and writes the device once, a host-to-device copy."""
    def mark(function):
        function.__specops_point__ = name
        function.__specops_seam__ = seam
        function.__specops_host__ = host
        return function
    return mark


class TargetLaunch:
    """The target step's fused launch (point "target_step"), deferred to the last call of
    prepare_inputs: prepare_spec_decode_inputs' arguments, and what to record once it ran."""

    __slots__ = ("kwargs", "after")

    def __init__(self, kwargs: dict, after):
        self.kwargs = kwargs  # every argument by name
        self.after = after

    def run(self, **parts) -> None:
        """The launch, with `parts` (the input ids) in it."""
        specops.prepare_spec_decode_inputs(**self.kwargs, **parts)
        self.after()


class _Pending:
    """What prepare_inputs' first calls recorded for its last one (the input-id calls, the target
    step's launch), and the host facts of the call (its runner, its padded request count) for the
    target_step point."""

    __slots__ = ("runner", "num_tokens", "num_reqs_padded", "num_computed_tokens", "expanded", "prefill", "target")

    def __init__(self, runner, num_tokens: int, num_reqs_padded: int):
        self.runner = runner
        self.num_tokens = num_tokens
        self.num_reqs_padded = num_reqs_padded
        self.num_computed_tokens: torch.Tensor = runner.req_states.num_computed_tokens.gpu
        self.expanded: tuple[torch.Tensor, torch.Tensor] | None = None
        self.prefill: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.target: TargetLaunch | None = None


_pending: contextvars.ContextVar[_Pending | None] = contextvars.ContextVar("specops_vllm_pending", default=None)


def current_step() -> _Pending | None:
    """The prepare_inputs call this one runs inside, or None outside it."""
    return _pending.get()


def defer_target_launch(launch: TargetLaunch) -> bool:
    """Hands the target step's launch to prepare_inputs' last call (combine_sampled_and_draft_tokens,
    which adds the step's input ids to it); False outside prepare_inputs (then the caller launches)."""
    pending = _pending.get()
    if pending is None or pending.target is not None:
        return False
    pending.target = launch
    return True


@contextlib.contextmanager
def step_inputs(runner, num_tokens: int, num_reqs_padded: int):
    """The step-input seam's record, for a prepare_inputs of another runner class (vllm-ascend's
    NPUModelRunner): inside it the input_ids adapters defer and fuse as in vLLM's."""
    pending = _Pending(runner, num_tokens, num_reqs_padded)
    token = _pending.set(pending)
    try:
        yield
        if pending.target is not None:  # no last call took it: launched alone, before prepare_inputs returns
            pending.target, target = None, pending.target
            target.run()
    finally:
        _pending.reset(token)


def make_prepare_inputs(original):
    @point("input_ids", seam=True)
    @functools.wraps(original)
    def prepare_inputs(self, scheduler_output, batch_req_state, batch_desc, num_active_loras):
        if self.adaptive_verification is not None or self.model_state.num_new_sampled_tokens_per_step not in (0, 1):
            return original(self, scheduler_output, batch_req_state, batch_desc, num_active_loras)
        # prepare_inputs' own padded request count (InputBatch.num_reqs_after_padding).
        num_reqs_padded = batch_desc.num_reqs or len(batch_req_state.req_ids)
        with step_inputs(self, batch_req_state.num_tokens, num_reqs_padded):
            return original(self, scheduler_output, batch_req_state, batch_desc, num_active_loras)
    return prepare_inputs


def make_expand_idx_mapping(original):
    @point("input_ids")
    @functools.wraps(original)
    def expand_idx_mapping(idx_mapping, total_num_logits, cu_num_logits, max_expand_len):
        pending = _pending.get()
        if pending is None or pending.expanded is not None:
            return original(idx_mapping, total_num_logits, cu_num_logits, max_expand_len)
        # vLLM's allocations, filled by the combine adapter's launch.
        expanded = idx_mapping.new_empty(total_num_logits)
        local_pos = torch.empty(total_num_logits, dtype=torch.int32, device=idx_mapping.device)
        pending.expanded = (expanded, local_pos)
        return expanded, local_pos
    return expand_idx_mapping


def make_prepare_prefill_inputs(original):
    @point("input_ids")
    @functools.wraps(original)
    def prepare_prefill_inputs(input_ids, next_prefill_tokens, idx_mapping, query_start_loc, all_token_ids,
                               prefill_len, num_computed_tokens):
        pending = _pending.get()
        if pending is None or pending.prefill is not None or num_computed_tokens is not pending.num_computed_tokens:
            return original(input_ids, next_prefill_tokens, idx_mapping, query_start_loc, all_token_ids, prefill_len,
                            num_computed_tokens)
        pending.prefill = (input_ids, next_prefill_tokens, all_token_ids)
        return None
    return prepare_prefill_inputs


def make_combine_sampled_and_draft_tokens(original, prepare_prefill_original, expand_original):
    @point("input_ids")
    @functools.wraps(original)
    def combine_sampled_and_draft_tokens(input_ids, idx_mapping, last_sampled_tokens, query_start_loc, seq_lens,
                                         prefill_len, draft_tokens, cu_num_logits, num_logits,
                                         num_new_sampled_tokens=1):
        pending = _pending.get()
        if pending is None:
            return original(input_ids, idx_mapping, last_sampled_tokens, query_start_loc, seq_lens, prefill_len,
                            draft_tokens, cu_num_logits, num_logits, num_new_sampled_tokens)
        prefill, pending.prefill = pending.prefill, None
        expanded, pending.expanded = pending.expanded, None
        if prefill is not None and prefill[0] is not input_ids:
            # Not the buffers this seam knows: run what was deferred as vLLM would have.
            prepare_prefill_original(prefill[0], prefill[1], idx_mapping, query_start_loc, prefill[2], prefill_len,
                                     pending.num_computed_tokens)
            prefill = None
        logits_indices = torch.empty(num_logits, dtype=torch.int64, device=input_ids.device)
        parts = dict(prefill_len=prefill_len, last_sampled_tokens=last_sampled_tokens, draft_tokens=draft_tokens,
                     cu_num_logits=cu_num_logits, num_new_sampled_tokens=num_new_sampled_tokens,
                     all_token_ids=None if prefill is None else prefill[2],
                     next_prefill_tokens=None if prefill is None else prefill[1], logits_indices=logits_indices,
                     expanded_idx_mapping=None if expanded is None else expanded[0],
                     expanded_local_pos=None if expanded is None else expanded[1])
        target, pending.target = pending.target, None
        if target is not None and _same_batch(target, idx_mapping, query_start_loc, pending.num_computed_tokens):
            # The target step's launch writes the input ids too: one launch for prepare_inputs.
            if expanded is None:  # what prepare_input_ids allocates for them (vLLM's are its own)
                parts.update(expanded_idx_mapping=idx_mapping.new_empty(num_logits),
                             expanded_local_pos=torch.empty(num_logits, dtype=torch.int32, device=input_ids.device))
            target.run(input_ids=input_ids, **parts)
            return logits_indices
        if target is not None:
            target.run()
        specops.prepare_input_ids(input_ids, idx_mapping, query_start_loc, pending.num_computed_tokens,
                                  num_logits=num_logits, **parts)
        return logits_indices
    return combine_sampled_and_draft_tokens


def _same_batch(target: TargetLaunch, idx_mapping: torch.Tensor, query_start_loc: torch.Tensor,
                num_computed_tokens: torch.Tensor) -> bool:
    """Whether the target step's launch is over this call's batch (host attributes only)."""
    own = target.kwargs
    return (own["idx_mapping"] is idx_mapping and own["num_computed_tokens"] is num_computed_tokens
            and own["query_start_loc"].data_ptr() == query_start_loc.data_ptr())


def make_get_num_sampled_and_rejected(original):
    @point("sampled_counts")
    @functools.wraps(original)
    def get_num_sampled_and_rejected(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len):
        num_rejected = torch.empty_like(num_sampled)
        specops.count_sampled_and_rejected(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len,
                                           num_rejected=num_rejected)
        return num_sampled, num_rejected
    return get_num_sampled_and_rejected


# Point "update_prefill": inside GPUModelRunner.sample_tokens, postprocess_sampled's post_update
# (one launch) is followed, past host work and work that reads none of what it writes, by
# propose's draft prefill (one launch), which reads the last sampled tokens it writes. The seam
# over sample_tokens lets the post_update adapter hand its call to the draft prefill adapter
# (draft_steps.py), which runs both in one prepare_draft_prefill_inputs launch; a prefill that
# cannot take it (another batch, an empty one) first launches it alone, and so does the seam's
# exit should no prefill have come. Deferred only where vLLM's code between the two reads none of
# it: the speculator's propose is vLLM's (served by the draft_steps seam), the model state's
# postprocess_state is the interface's no-op, and the sampler does not watermark (0.33's
# prepare_watermarking and 0.34's prepare_propose then read the token table).
class _SampleStep:
    __slots__ = ("update",)

    def __init__(self):
        self.update: dict | None = None  # post_update_after_sampling's keywords, deferred


_sample_step: contextvars.ContextVar[_SampleStep | None] = contextvars.ContextVar("specops_vllm_sample_step",
                                                                                    default=None)


def make_sample_tokens(original, interface_postprocess_state, watermark_sampler_class):
    @point("update_prefill", seam=True)
    @functools.wraps(original)
    def sample_tokens(self, grammar_output):
        speculator = getattr(self, "speculator", None)
        defer = (speculator is not None
                 and getattr(getattr(type(speculator), "propose", None), "__specops_point__", None) == "draft_steps"
                 and getattr(type(getattr(self, "model_state", None)), "postprocess_state", None)
                 is interface_postprocess_state
                 and not isinstance(getattr(self, "sampler", None), watermark_sampler_class))
        step = _SampleStep() if defer else None
        token = _sample_step.set(step)
        try:
            return original(self, grammar_output)
        finally:
            _sample_step.reset(token)
            if step is not None:
                flush_update(step)  # no draft prefill took it (vLLM's order had it run by now)
    return sample_tokens


def deferred_update() -> dict | None:
    """The post_update this sample_tokens call deferred to its draft prefill, or None."""
    step = _sample_step.get()
    return step.update if step is not None else None


def take_update() -> None:
    """The draft prefill's launch ran the deferred post_update."""
    _sample_step.get().update = None


def flush_update(step: _SampleStep | None = None) -> None:
    """Launches the deferred post_update alone (before anything that would read what it writes)."""
    step = step or _sample_step.get()
    if step is not None and step.update is not None:
        update, step.update = step.update, None
        specops.post_update_after_sampling(**update)


def make_post_update(original):
    @point("post_update")
    @functools.wraps(original)
    def post_update(idx_mapping, num_computed_tokens, last_sampled_tokens, output_bin_counts, sampled_tokens,
                    num_sampled, num_rejected, query_start_loc, all_token_ids, total_len, draft_tokens=None,
                    draft_tokens_out=None):
        step = _sample_step.get()
        if step is not None and step.update is None and draft_tokens is None and query_start_loc is not None:
            # The last pipeline rank's call inside sample_tokens: the draft prefill launches it.
            step.update = dict(idx_mapping=idx_mapping, num_computed_tokens=num_computed_tokens,
                               query_start_loc=query_start_loc, sampled_tokens=sampled_tokens, num_sampled=num_sampled,
                               num_rejected=num_rejected, last_sampled_tokens=last_sampled_tokens,
                               all_token_ids=all_token_ids, total_len=total_len, output_bin_counts=output_bin_counts)
            return
        # vLLM passes its draft buffer as draft_tokens_out on every call and the received drafts
        # only on a non-last pipeline rank; the op takes the pair as vLLM passes it.
        specops.post_update_after_sampling(
            idx_mapping, num_computed_tokens, query_start_loc=query_start_loc, sampled_tokens=sampled_tokens,
            num_sampled=num_sampled, num_rejected=num_rejected, last_sampled_tokens=last_sampled_tokens,
            all_token_ids=all_token_ids, total_len=total_len, output_bin_counts=output_bin_counts,
            draft_tokens=draft_tokens, draft_tokens_out=draft_tokens_out)
    return post_update


def make_post_update_num_computed_tokens(original):
    @point("post_update")
    @functools.wraps(original)
    def post_update_num_computed_tokens(idx_mapping, num_computed_tokens, query_start_loc):
        specops.post_update_after_sampling(idx_mapping, num_computed_tokens, query_start_loc=query_start_loc)
    return post_update_num_computed_tokens


def make_prepare_dcp_local_seq_lens(original):
    @point("dcp_local_seq_lens")
    @functools.wraps(original)
    def prepare_dcp_local_seq_lens(dcp_local_seq_lens, seq_lens, num_reqs, dcp_size, dcp_rank, cp_interleave, *,
                                   num_reqs_padded=None):
        if dcp_written(dcp_local_seq_lens, seq_lens, num_reqs, dcp_size, dcp_rank, cp_interleave):
            return dcp_local_seq_lens[:num_reqs_padded]  # the target step's fused launch wrote them
        # Entries past num_reqs are 0 to the buffer's end, as vLLM's kernel writes them.
        specops.dcp_local_seq_lens(seq_lens[:num_reqs], dcp_size, dcp_rank, cp_interleave, out=dcp_local_seq_lens)
        return dcp_local_seq_lens[:num_reqs_padded]
    return prepare_dcp_local_seq_lens


def make_gather_block_tables(original):
    @point("block_tables")
    @functools.wraps(original)
    def gather_block_tables(self, idx_mapping, num_reqs_padded, out=None, out_ptrs=None, num_computed_tokens=None):
        if self.num_kv_cache_groups == 0:
            return ()
        if out is None and gathered(self, idx_mapping, num_reqs_padded, num_computed_tokens,
                                    max(num_reqs_padded, self._num_dirty_rows)):
            # The target step's fused launch gathered these rows (and cleared any a larger batch left).
            self._num_dirty_rows = idx_mapping.shape[0]
            note_rows_left(self, idx_mapping.shape[0])
            return tuple(table[:num_reqs_padded] for table in self.input_block_tables)
        num_rows = num_reqs_padded
        if out is None:
            # vLLM's own buffers: also clear the rows a larger previous batch left, as vLLM does.
            out = self.input_block_tables
            num_rows = max(num_rows, self._num_dirty_rows)
            self._num_dirty_rows = idx_mapping.shape[0]
            note_rows_left(self, idx_mapping.shape[0])
        # vLLM masks the sliding-window groups only when it has some and is given the counts; its
        # host list of reaches is all zeros under context parallelism, as the op then needs.
        masking = self.has_sliding_window_groups and num_computed_tokens is not None
        specops.gather_block_tables_multi(
            [table.gpu for table in self.block_tables], self.num_blocks.gpu.unbind(0), idx_mapping, list(out),
            num_reqs_padded=num_rows, num_computed_tokens=num_computed_tokens if masking else None,
            sliding_window_reach=self._sliding_window_reach, block_sizes=self.block_sizes)
        return tuple(table[:num_reqs_padded] for table in out)
    return gather_block_tables


# Point "request_state": RequestState.apply_staged_writes applies its three staged tensors
# (total_len, all_token_ids, num_computed_tokens) with one `_apply_write_kernel` launch each, on
# every step where requests join. vLLM's own FusedStagedWriter applies several int32
# StagedWriteTensors with that kernel's multi-table form in one launch (the block tables' writes
# use it); the point gives the request state's three tensors one such writer, made with their
# device addresses and row strides when the state is made (as BlockTables makes its own), so the
# step applies the same cells with the same values in one launch, at the same place.
_state_writers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class _StateWriter:
    __slots__ = ("writer", "tensors", "ptrs", "strides")

    def __init__(self, writer_class, state):
        self.tensors = (state.total_len, state.all_token_ids, state.num_computed_tokens)
        device = state.total_len.gpu.device
        self.writer = writer_class(device, len(self.tensors) * state.max_num_reqs)
        # Addresses as uint64 (vLLM's BlockTables does the same for its tables).
        self.ptrs = torch.tensor([t.gpu.data_ptr() for t in self.tensors], dtype=torch.uint64, device=device)
        self.strides = torch.tensor([t.gpu.stride(0) for t in self.tensors], dtype=torch.int64, device=device)


def make_request_state_init(original, writer_class):
    # A seam: vLLM's own __init__, then the fused writer of the state's staged tensors (device
    # tensors made at init, as vLLM makes its own: no capture sees them change).
    @point("request_state", seam=True)
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        staged = (self.total_len, self.all_token_ids, self.num_computed_tokens)
        # The multi-table kernel writes int32 cells (vLLM's three are int32).
        if all(t.gpu.dtype == torch.int32 and t.gpu.dim() in (1, 2) for t in staged):
            _state_writers[self] = _StateWriter(writer_class, self)
    return __init__


def make_request_state_apply_staged_writes(original):
    # A seam: vLLM's body with the three single-table writes as one multi-table write (its
    # host-to-device copies are vLLM's own).
    @point("request_state", seam=True)
    @functools.wraps(original)
    def apply_staged_writes(self):
        fused = _state_writers.get(self)
        if fused is None:
            return original(self)
        self.prompt_len.copy_to_uva()
        self.prefill_len.copy_to_uva()
        # Applies and clears the staged writes of all three (a tensor with none adds nothing).
        fused.writer.apply(fused.tensors, fused.ptrs, fused.strides)
    return apply_staged_writes
