"""Reference for expand_parallel_draft_inputs: the parallel-drafting first pass in torch ops.

Every request's output tokens are expanded into one flat index (request, j); indices whose
output, input or hidden-mapping entry would fall outside its tensor are dropped, as the device
kernel masks them, so corrupt query layouts write nothing out of bounds here either."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import buffer_end, group_layouts, parallel_draft_tokens
from specops.reference.advance_draft_step import _slots

INT32_MAX = 2**31 - 1


def expand_parallel_draft_inputs(
    target_token_ids: torch.Tensor, target_positions: torch.Tensor, next_token_ids: torch.Tensor,
    query_start_loc: torch.Tensor, block_tables: list[torch.Tensor], num_rejected_tokens: torch.Tensor | None,
    seq_lens: torch.Tensor | None, idx_mapping: torch.Tensor | None, num_blocks: list[torch.Tensor],
    input_ids: torch.Tensor, positions: torch.Tensor, is_rejected_token_mask: torch.Tensor,
    is_masked_token_mask: torch.Tensor, token_indices_to_sample: torch.Tensor, hidden_state_mapping: torch.Tensor | None,
    slot_mappings: list[torch.Tensor], out_query_start_loc: torch.Tensor, out_seq_lens: torch.Tensor | None,
    slots_per_request: int, shift_input_ids: bool, max_model_len: int, parallel_drafting_token_id: int,
    padding_token_id: int, num_tokens_padded: int, num_reqs_padded: int, cp_world_size: int, cp_rank: int,
    cp_interleave: int, block_sizes: list[int], blocks_per_kv_block: list[int], cp_sharded: list[bool],
    slot_mapping_enabled: list[bool],
) -> None:
    slots, shift = slots_per_request, int(shift_input_ids)
    draft_token, padding_token = parallel_drafting_token_id, padding_token_id
    num_reqs, num_tokens = next_token_ids.numel(), target_token_ids.numel()
    n = slots - shift
    num_out = parallel_draft_tokens(num_tokens, num_reqs, slots, shift_input_ids)
    device = target_token_ids.device
    qsl = query_start_loc[:num_reqs + 1].long()
    q0, q = qsl[:-1], qsl[1:] - qsl[:-1]
    rejected = num_rejected_tokens.long() if num_rejected_tokens is not None else torch.zeros_like(q0)
    valid = q - rejected - shift
    request = torch.arange(num_reqs, device=device)
    out0 = q0 + request * n
    # j runs over [lo, hi): the outputs of the request that land inside [0, T').
    lo = (-out0).clamp(min=0)
    hi = torch.minimum(q + n, num_out - out0)
    counts = (hi - lo).clamp(min=0)
    req = torch.repeat_interleave(request, counts)
    first = torch.cumsum(counts, 0) - counts
    j = torch.arange(req.numel(), device=device) - first[req] + lo[req]
    o = out0[req] + j
    nv = valid[req]
    is_rejected = j >= nv + slots
    is_masked = (j > nv) & ~is_rejected
    in_tokens = num_tokens > 0
    # A source outside the target tokens (a rejected count below 0) reads as 0, as on device.
    source = q0[req] + j + shift
    inside = (source >= 0) & (source < num_tokens)
    copied = target_token_ids.long()[source.where(inside, 0)].where(inside, 0) if in_tokens else torch.zeros_like(j)
    first_positions = q0.clamp(0, max(num_tokens - 1, 0))
    start = target_positions.long()[first_positions] if in_tokens else torch.zeros_like(q0)
    ids = torch.full_like(j, padding_token)
    ids = torch.where(is_masked, torch.full_like(j, draft_token), ids)
    ids = torch.where(j == nv, next_token_ids.long()[req], ids)
    ids = torch.where(j < nv, copied, ids)
    position = torch.where(is_rejected, 0, start[req] + j)
    input_ids[o] = ids.to(input_ids.dtype)
    positions[o] = position.to(positions.dtype)
    is_rejected_token_mask[o] = is_rejected
    is_masked_token_mask[o] = is_masked
    new = (j >= nv) & ~is_rejected
    token_indices_to_sample[(req * slots + j - nv)[new]] = o[new].to(torch.int32)
    if hidden_state_mapping is not None:
        hidden = (j < q[req]) & (q0[req] + j >= 0) & (q0[req] + j < num_tokens)
        hidden_state_mapping[(q0[req] + j)[hidden]] = o[hidden].to(torch.int32)
    row = idx_mapping.long()[req] if idx_mapping is not None else req
    mapped = ~is_rejected & (position < max_model_len)
    layouts = group_layouts(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, cp_world_size,
                            cp_rank, cp_interleave)
    for g, (table, out, layout) in enumerate(zip(block_tables, slot_mappings, layouts)):
        slot = _slots(table, num_blocks[g] if num_blocks else None, row, position, mapped & layout.enabled,
                      layout.block_size, layout.blocks_per_kv_block, *layout.cp)
        if out.dtype == torch.int32:
            slot = slot.where(slot <= INT32_MAX, PAD_SLOT_ID)
        out[o] = slot.to(out.dtype)
        out[num_out:buffer_end(out, num_tokens_padded)] = PAD_SLOT_ID
    input_ids[num_out:buffer_end(input_ids, num_tokens_padded)] = 0
    positions[num_out:buffer_end(positions, num_tokens_padded)] = 0
    is_rejected_token_mask[num_out:buffer_end(is_rejected_token_mask, num_tokens_padded)] = False
    is_masked_token_mask[num_out:buffer_end(is_masked_token_mask, num_tokens_padded)] = False
    indices_end = num_reqs_padded * slots if num_reqs_padded >= 0 else token_indices_to_sample.numel()
    token_indices_to_sample[num_reqs * slots:indices_end] = 0
    if hidden_state_mapping is not None:
        hidden_state_mapping[num_tokens:] = 0
    out_query_start_loc[:num_reqs] = out0.to(torch.int32)
    qsl_end = num_reqs_padded + 1 if num_reqs_padded >= 0 else out_query_start_loc.numel()
    out_query_start_loc[num_reqs:qsl_end] = num_out
    if out_seq_lens is not None:
        out_seq_lens[:num_reqs] = (seq_lens[:num_reqs] + n).to(torch.int32)
        out_seq_lens[num_reqs:buffer_end(out_seq_lens, num_reqs_padded)] = 0
