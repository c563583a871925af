"""The vLLM plugin's V1 Eagle point on stand-ins (no vLLM needed): the fused next-token launch
happens only inside `propose_draft_token_ids` and is consumed only by the launch with exactly its
tensors; the eagle step and the count correction against hand-computed values.
tests/vllm_integration/drive_v1.py drives it in vLLM's own code."""

from __future__ import annotations

import types

import pytest
import torch

from specops.integrations.vllm import v1_eagle

I32 = torch.int32


class _Original:
    """A stand-in for one of vLLM's launchers: records its calls, owns a warm-up hook."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)

    def register_warmup(self, **kwargs):
        return "vllm's warm-up"


def _step_inputs():
    # Three requests: 2 drafts (1 accepted), a partial prefill (discarded), 1 draft (accepted).
    sampled = torch.tensor([[5, 6, -1], [9, -1, -1], [7, 8, -1]], dtype=I32)
    discard = torch.tensor([False, True, False])
    backup = torch.tensor([40, 41, 42], dtype=I32)
    cu = torch.tensor([2, 2, 3], dtype=I32)
    qsl = torch.tensor([0, 3, 10, 12, 99], dtype=I32)  # longer than R + 1, as vLLM's buffers are
    return sampled, discard, backup, cu, qsl


def _launchers():
    next_original, inputs_original = _Original(), _Original()
    return (next_original, v1_eagle.make_prepare_next_token_padded(next_original),
            inputs_original, v1_eagle.make_prepare_inputs_padded_launch(inputs_original))


def _runner_method(next_launch, inputs_launch, *, other_cu=False):
    """A stand-in for propose_draft_token_ids: vLLM's two launches, as prepare_next_token_ids_padded
    and prepare_inputs_padded make them, returning what prepare_inputs_padded returns."""
    def inputs_padded(self, common_attn_metadata, spec_decode_metadata, valid_count):
        indices, rejected = torch.empty(3, dtype=I32), torch.empty(3, dtype=I32)
        inputs_launch(spec_decode_metadata.cu_num_draft_tokens, valid_count, common_attn_metadata.query_start_loc,
                      indices, rejected, common_attn_metadata.num_reqs)
        return "attn", indices, rejected

    seam = v1_eagle.make_prepare_inputs_padded(inputs_padded)

    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids, sampling_metadata, hidden_states,
                                sample_hidden_states, aux_hidden_states, spec_decode_metadata, common_attn_metadata,
                                slot_mappings):
        _, discard, backup, _, _ = _step_inputs()
        next_ids, valid = torch.empty(3, dtype=I32), torch.empty(3, dtype=I32)
        next_launch(sampled_token_ids, discard, backup, next_ids, valid, 97, 3, 3, sampled_token_ids.stride(0),
                    BLOCK_SIZE_TOKENS=4)
        metadata = spec_decode_metadata
        if other_cu:
            metadata = types.SimpleNamespace(cu_num_draft_tokens=metadata.cu_num_draft_tokens.clone())
        return next_ids, valid, seam(None, common_attn_metadata, metadata, valid)

    return v1_eagle.make_propose_draft_token_ids(propose_draft_token_ids)


def _call(method):
    sampled, _, _, cu, qsl = _step_inputs()
    metadata = types.SimpleNamespace(cu_num_draft_tokens=cu)
    attn = types.SimpleNamespace(query_start_loc=qsl, num_reqs=3)
    return method(None, None, sampled, None, None, None, None, metadata, attn, None)


def test_inside_the_seam_one_launch_computes_both_and_the_second_launches_nothing():
    next_original, next_launch, inputs_original, inputs_launch = _launchers()
    next_ids, valid, (attn, indices, rejected) = _call(_runner_method(next_launch, inputs_launch))
    assert next_ids.tolist() == [6, 41, 8] and valid.tolist() == [2, 0, 2]
    # rejected = drafts + 1 - valid for a request that drafted; index = qsl[r+1] - 1 - rejected.
    assert rejected.tolist() == [1, 0, 0] and indices.tolist() == [1, 9, 11]
    assert attn == "attn" and next_original.calls == [] and inputs_original.calls == []
    assert v1_eagle._step.get() is None  # nothing leaks out of the call


def test_a_launch_with_other_tensors_is_vllms_own():
    next_original, next_launch, inputs_original, inputs_launch = _launchers()
    _, _, (_, indices, _) = _call(_runner_method(next_launch, inputs_launch, other_cu=True))
    assert len(inputs_original.calls) == 1 and inputs_original.calls[0][3] is indices


def test_outside_the_seam_each_call_launches_once():
    next_original, next_launch, inputs_original, inputs_launch = _launchers()
    sampled, discard, backup, cu, qsl = _step_inputs()
    next_ids, valid = torch.full((3,), -7, dtype=I32), torch.full((3,), -7, dtype=I32)
    next_launch(sampled, discard, backup, next_ids, valid, 97, 3, 3, 3, BLOCK_SIZE_TOKENS=4)
    assert next_ids.tolist() == [6, 41, 8] and valid.tolist() == [2, 0, 2]
    inputs_launch(cu, valid, qsl, torch.empty(3, dtype=I32), torch.empty(3, dtype=I32), 3)
    assert len(inputs_original.calls) == 1 and next_original.calls == []


def test_the_launchers_keep_vllms_warm_up_hook():
    _, next_launch, _, inputs_launch = _launchers()
    assert next_launch.register_warmup(max_batch_size=4) == "vllm's warm-up"
    assert inputs_launch.__specops_point__ == "v1_eagle"


def test_eagle_step_resets_past_max_model_len_and_pads():
    step = v1_eagle.make_eagle_step(None)
    positions = torch.tensor([5, 19, 30], dtype=torch.int64)  # the second reaches max_model_len = 20
    table = torch.tensor([[3, 4], [5, 6], [7, 8]], dtype=I32)
    seq_lens = torch.tensor([6, 20, 12], dtype=I32)
    out_positions, slots = torch.full((3,), 99, dtype=torch.int64), torch.full((5,), 99, dtype=torch.int64)
    step(positions, table, seq_lens, 16, 20, out_positions, slots, input_batch_size=5)
    assert out_positions.tolist() == [6, 0, 0] and seq_lens.tolist() == [7, 1, 1]
    assert slots.tolist() == [3 * 16 + 6, -1, -1, -1, -1]


@pytest.mark.parametrize("prev_positions", [[1, -1, 0], [0, 1, 2]])
def test_count_correction_is_the_op(prev_positions):
    correct = v1_eagle.make_update_num_computed_tokens(None)
    counts, accepted = torch.tensor([10, 20, 30], dtype=I32), torch.ones(3, dtype=I32)
    prev = torch.tensor(prev_positions, dtype=I32)
    valid, drafts, cpu = torch.tensor([2, 3, 1], dtype=I32), torch.tensor([3, 0, 2], dtype=I32), torch.tensor(
        [50, 51, 52], dtype=I32)
    correct(counts, accepted, prev, valid, drafts, cpu)
    if prev_positions == [1, -1, 0]:
        # row 0 continues row 1 (no drafts): the scheduler's; row 2 continues row 0 (drafted).
        assert counts.tolist() == [50, 51, 12] and accepted.tolist() == [1, 1, 2]
    else:
        assert counts.tolist() == [12, 51, 31] and accepted.tolist() == [2, 1, 1]


def test_the_first_pass_without_extra_slots_is_vllms_own():
    calls = []
    first_pass = v1_eagle.make_set_inputs_first_pass(lambda *args: calls.append(args) or "vllm", None)
    drafter = types.SimpleNamespace(needs_extra_input_slots=False, use_heterogeneous_vocab=False)
    assert first_pass(drafter, *range(7)) == "vllm" and len(calls) == 1
