"""Point "v1_eagle": the V1 runner's Eagle path (vllm/v1/spec_decode, vllm/v1/worker/gpu_model_runner.py),
which vLLM still runs wherever model runner V2 is unsupported.

Adapters, as in mrv2.py, take vLLM's signatures, write only into the buffers vLLM hands them and
read no device value on the host:
- `update_num_computed_tokens_for_batch_change` (the runner's count correction under async
  scheduling) is `correct_num_computed_tokens`, one for one.
- `eagle_step_update_slot_mapping_and_metadata` (each later draft step's positions, slot mapping
  and seq_lens) is `advance_draft_step` with the "reset" rule, one for one.
- The first pass with extra input slots (parallel drafting, draft models: the branch of
  `set_inputs_first_pass` that launches `copy_and_expand_eagle_inputs_kernel` and then maps the
  new slots with `compute_new_slot_mapping`'s dozen tensor ops) is `expand_parallel_draft_inputs`,
  one launch for both; the hidden-state rows and the extended query layout stay vLLM's code.
- The padded drafter batch launches `eagle_prepare_next_token_padded_kernel` in
  `prepare_next_token_ids_padded` and, a little later, `eagle_prepare_inputs_padded_kernel` in
  `prepare_inputs_padded`. `prepare_next_token_ids` computes both in one launch. The first call
  does not see what the second reads (the step's drafts per request and its query layout), but
  `GPUModelRunner.propose_draft_token_ids`, which makes both calls, is given them: that method is
  the seam. Inside it the first call launches the fused op, and the second finds its outputs
  computed for exactly its arguments (the same tensors) and launches nothing; the
  `prepare_inputs_padded` seam then returns those outputs in place of the two it allocated.
  Sound because between the two calls nothing writes the drafts' prefix sums, the query layout or
  the valid counts (the runner copies the counts to the host and picks the drafter's hidden
  states). Any other caller gets one launch per call, as vLLM.

The kernels are replaced by rebinding vLLM's host-side launchers, not through vLLM's
`register_kernels`: an override registered there cannot be withdrawn (the plugin installs all of
its points or none), it does not see the launch grid (the padded width of the eagle step), and it
would also run on vLLM's JIT warm-up inputs. The launchers' own warm-up registration still reaches
vLLM's kernels (harmless: they are compiled and never launched).
"""

from __future__ import annotations

import contextvars
import functools

import torch

import specops
from specops.integrations.vllm.mrv2 import point


class _Step:
    """What the seam knows about one propose_draft_token_ids call, and the fused launch's outputs."""

    __slots__ = ("cu_num_draft_tokens", "query_start_loc", "num_reqs", "valid_count", "outputs", "taken")

    def __init__(self, cu_num_draft_tokens: torch.Tensor, query_start_loc: torch.Tensor, num_reqs: int):
        self.cu_num_draft_tokens = cu_num_draft_tokens
        self.query_start_loc = query_start_loc
        self.num_reqs = num_reqs
        self.valid_count: torch.Tensor | None = None  # the fused launch's valid counts (vLLM's tensor)
        self.outputs: tuple[torch.Tensor, torch.Tensor] | None = None  # (indices to sample, rejected)
        self.taken: tuple[torch.Tensor, torch.Tensor] | None = None  # vLLM's unfilled pair they replace


_step: contextvars.ContextVar[_Step | None] = contextvars.ContextVar("specops_vllm_v1_step", default=None)


def make_propose_draft_token_ids(original):
    @point("v1_eagle", seam=True)
    @functools.wraps(original)
    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids, sampling_metadata, hidden_states,
                                sample_hidden_states, aux_hidden_states, spec_decode_metadata, common_attn_metadata,
                                slot_mappings):
        step = None
        if spec_decode_metadata is not None and isinstance(sampled_token_ids, torch.Tensor):
            step = _Step(spec_decode_metadata.cu_num_draft_tokens, common_attn_metadata.query_start_loc,
                         common_attn_metadata.num_reqs)
        token = _step.set(step)
        try:
            return original(self, scheduler_output, sampled_token_ids, sampling_metadata, hidden_states,
                            sample_hidden_states, aux_hidden_states, spec_decode_metadata, common_attn_metadata,
                            slot_mappings)
        finally:
            _step.reset(token)
    return propose_draft_token_ids


class _Launcher:
    """Stands in for one of vLLM's JIT-warm-up launchers: calls go to the adapter, everything else
    (`register_warmup`, the kernel it owns) to vLLM's launcher."""

    def __init__(self, original, adapter):
        self._original = original
        self._adapter = adapter
        functools.update_wrapper(self, original, updated=())
        self.__specops_point__ = adapter.__specops_point__
        self.__specops_seam__ = False

    def __call__(self, *args, **kwargs):
        return self._adapter(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._original, name)


def make_prepare_next_token_padded(original):
    @point("v1_eagle")
    def eagle_prepare_next_token_padded(sampled_token_ids, discard_request_mask, backup_next_token_ids, next_token_ids,
                                        valid_sampled_tokens_count, vocab_size, num_sampled_tokens_per_req, num_reqs,
                                        stride_sampled_token_ids, *, BLOCK_SIZE_TOKENS):
        sampled = sampled_token_ids[:num_reqs, :num_sampled_tokens_per_req]
        step = _step.get()
        fused = (step is not None and step.outputs is None and step.num_reqs == num_reqs
                 and step.cu_num_draft_tokens.shape == (num_reqs,))
        if not fused:
            specops.prepare_next_token_ids(
                sampled, vocab_size, discard_request_mask=discard_request_mask[:num_reqs],
                backup_next_token_ids=backup_next_token_ids[:num_reqs], next_token_ids=next_token_ids[:num_reqs],
                valid_sampled_token_count=valid_sampled_tokens_count[:num_reqs])
            return
        # The pair prepare_inputs_padded would allocate, computed in this launch.
        indices = torch.empty(num_reqs, dtype=torch.int32, device=next_token_ids.device)
        rejected = torch.empty(num_reqs, dtype=torch.int32, device=next_token_ids.device)
        specops.prepare_next_token_ids(
            sampled, vocab_size, discard_request_mask=discard_request_mask[:num_reqs],
            backup_next_token_ids=backup_next_token_ids[:num_reqs], cu_num_draft_tokens=step.cu_num_draft_tokens,
            query_start_loc=step.query_start_loc[:num_reqs + 1], next_token_ids=next_token_ids[:num_reqs],
            valid_sampled_token_count=valid_sampled_tokens_count[:num_reqs], num_rejected_tokens=rejected,
            token_indices_to_sample=indices)
        step.valid_count, step.outputs = valid_sampled_tokens_count, (indices, rejected)
    return _Launcher(original, eagle_prepare_next_token_padded)


def make_prepare_inputs_padded_launch(original):
    @point("v1_eagle")
    def eagle_prepare_inputs_padded(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc_gpu,
                                    token_indices_to_sample, num_rejected_tokens_gpu, num_reqs):
        step = _step.get()
        if (step is not None and step.outputs is not None and step.taken is None and num_reqs == step.num_reqs
                and cu_num_draft_tokens is step.cu_num_draft_tokens and query_start_loc_gpu is step.query_start_loc
                and valid_sampled_tokens_count is step.valid_count):
            step.taken = (token_indices_to_sample, num_rejected_tokens_gpu)
            return
        # No specops op computes these two alone (prepare_next_token_ids needs the sampled tokens).
        original(cu_num_draft_tokens, valid_sampled_tokens_count, query_start_loc_gpu, token_indices_to_sample,
                 num_rejected_tokens_gpu, num_reqs)
    return _Launcher(original, eagle_prepare_inputs_padded)


def make_prepare_inputs_padded(original):
    @point("v1_eagle", seam=True)
    @functools.wraps(original)
    def prepare_inputs_padded(self, common_attn_metadata, spec_decode_metadata, valid_sampled_tokens_count):
        attn, indices, rejected = original(self, common_attn_metadata, spec_decode_metadata, valid_sampled_tokens_count)
        step = _step.get()
        if step is not None and step.taken is not None and step.taken[0] is indices and step.taken[1] is rejected:
            indices, rejected = step.outputs
            step.taken = ()  # consumed: no later call matches
        return attn, indices, rejected
    return prepare_inputs_padded


def make_eagle_step(original):
    @point("v1_eagle")
    @functools.wraps(original)
    def eagle_step_update_slot_mapping_and_metadata(positions_1d, block_table_tensor, seq_lens, block_size,
                                                    max_model_len, out_clamped_positions, out_slot_mapping,
                                                    input_batch_size=None):
        specops.advance_draft_step(
            positions_1d, seq_lens, [block_table_tensor], block_size, max_model_len=max_model_len,
            past_max_model_len="reset", out_positions=out_clamped_positions[:positions_1d.shape[0]],
            slot_mappings=[out_slot_mapping],
            num_tokens_padded=positions_1d.shape[0] if input_batch_size is None else input_batch_size)
    return eagle_step_update_slot_mapping_and_metadata


def make_update_num_computed_tokens(original):
    @point("v1_eagle")
    @functools.wraps(original)
    def update_num_computed_tokens_for_batch_change(num_computed_tokens, num_accepted_tokens, prev_positions,
                                                    valid_sampled_token_count, prev_num_draft_tokens,
                                                    cpu_num_computed_tokens):
        specops.correct_num_computed_tokens(num_computed_tokens, num_accepted_tokens, prev_positions,
                                            valid_sampled_token_count, prev_num_draft_tokens, cpu_num_computed_tokens)
    return update_num_computed_tokens_for_batch_change


@point("v1_eagle")
def expand_first_pass(drafter, extend_all_queries_by_n, target_token_ids, next_token_ids, target_positions,
                      target_hidden_states, cad, num_rejected_tokens_gpu):
    """set_inputs_first_pass's branch for extra input slots, with vLLM's allocations and results."""
    batch_size = cad.batch_size()
    num_new = drafter.net_num_new_slots_per_request
    num_in = target_token_ids.shape[0]
    num_out = num_in + num_new * batch_size
    shift = drafter.pass_hidden_states_to_model
    device = target_token_ids.device
    indices = torch.empty(batch_size * drafter.extra_slots_per_request, dtype=torch.int32, device=device)
    mapping = torch.empty(num_in, dtype=torch.int32, device=device)
    slots = torch.empty(num_out, dtype=torch.int64, device=device)
    # Views to T' tokens: vLLM's kernel writes nothing past them.
    specops.expand_parallel_draft_inputs(
        target_token_ids, target_positions, next_token_ids, cad.query_start_loc, [cad.block_table_tensor],
        drafter.block_size, slots_per_request=drafter.extra_slots_per_request, max_model_len=drafter.max_model_len,
        parallel_drafting_token_id=drafter.parallel_drafting_token_id, shift_input_ids=shift, padding_token_id=0,
        num_rejected_tokens=num_rejected_tokens_gpu, input_ids=drafter.input_ids[:num_out],
        positions=drafter.positions[:num_out], is_rejected_token_mask=drafter.is_rejected_token_mask[:num_out],
        is_masked_token_mask=drafter.is_masked_token_mask[:num_out], token_indices_to_sample=indices,
        hidden_state_mapping=mapping if shift else None, slot_mappings=[slots])
    if shift:
        drafter.hidden_states[mapping] = target_hidden_states
        mask = drafter.is_masked_token_mask[:num_out]
        torch.where(mask.unsqueeze(1), drafter.parallel_drafting_hidden_state_tensor,
                    drafter.hidden_states[:num_out], out=drafter.hidden_states[:num_out])
    return num_out, indices, extend_all_queries_by_n(cad, N=num_new, arange=drafter.arange, new_slot_mapping=slots)


def make_set_inputs_first_pass(original, extend_all_queries_by_n):
    # A seam: without extra input slots it runs vLLM's own body (its copies into the drafter's
    # buffers); with them, the adapter above (looked up at each call, where the proof watches it).
    @point("v1_eagle", seam=True)
    @functools.wraps(original)
    def set_inputs_first_pass(self, target_token_ids, next_token_ids, target_positions, target_hidden_states,
                              token_indices_to_sample, cad, num_rejected_tokens_gpu):
        if not self.needs_extra_input_slots or self.use_heterogeneous_vocab:
            return original(self, target_token_ids, next_token_ids, target_positions, target_hidden_states,
                            token_indices_to_sample, cad, num_rejected_tokens_gpu)
        return expand_first_pass(self, extend_all_queries_by_n, target_token_ids, next_token_ids, target_positions,
                                 target_hidden_states, cad, num_rejected_tokens_gpu)
    return set_inputs_first_pass
