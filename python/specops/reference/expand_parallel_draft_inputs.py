"""Reference for expand_parallel_draft_inputs: the parallel-drafting first pass in torch ops.

Every request's output tokens are expanded into one flat index (request, j); indices whose
output, input or hidden-mapping entry would fall outside its tensor are dropped, as the device
kernel masks them, so corrupt query layouts write nothing out of bounds here either."""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import buffer_end, group_layouts, parallel_draft_tokens
from specops.reference.advance_draft_step import draft_slots

INT32_MAX = 2**31 - 1


def expand_parallel_draft_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    slots, shift = a.slots_per_request, int(a.shift_input_ids)
    draft_token, padding_token = a.parallel_drafting_token_id, a.padding_token_id
    num_reqs, num_tokens = a.next_token_ids.numel(), a.target_token_ids.numel()
    n = slots - shift
    num_out = parallel_draft_tokens(num_tokens, num_reqs, slots, a.shift_input_ids)
    device = a.target_token_ids.device
    qsl = a.query_start_loc[:num_reqs + 1].long()
    q0, q = qsl[:-1], qsl[1:] - qsl[:-1]
    rejected = a.num_rejected_tokens.long() if a.num_rejected_tokens is not None else torch.zeros_like(q0)
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
    copied = a.target_token_ids.long()[source.where(inside, 0)].where(inside, 0) if in_tokens else torch.zeros_like(j)
    first_positions = q0.clamp(0, max(num_tokens - 1, 0))
    start = a.target_positions.long()[first_positions] if in_tokens else torch.zeros_like(q0)
    ids = torch.full_like(j, padding_token)
    ids = torch.where(is_masked, torch.full_like(j, draft_token), ids)
    ids = torch.where(j == nv, a.next_token_ids.long()[req], ids)
    ids = torch.where(j < nv, copied, ids)
    position = torch.where(is_rejected, 0, start[req] + j)
    a.input_ids[o] = ids.to(a.input_ids.dtype)
    a.positions[o] = position.to(a.positions.dtype)
    a.is_rejected_token_mask[o] = is_rejected
    a.is_masked_token_mask[o] = is_masked
    new = (j >= nv) & ~is_rejected
    a.token_indices_to_sample[(req * slots + j - nv)[new]] = o[new].to(torch.int32)
    if a.hidden_state_mapping is not None:
        hidden = (j < q[req]) & (q0[req] + j >= 0) & (q0[req] + j < num_tokens)
        a.hidden_state_mapping[(q0[req] + j)[hidden]] = o[hidden].to(torch.int32)
    row = a.idx_mapping.long()[req] if a.idx_mapping is not None else req
    mapped = ~is_rejected & (position < a.max_model_len)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled, a.cp_world_size,
                            a.cp_rank, a.cp_interleave)
    for g, (table, out, layout) in enumerate(zip(a.block_tables, a.slot_mappings, layouts)):
        slot = draft_slots(table, a.num_blocks[g] if a.num_blocks else None, row, position, mapped & layout.enabled,
                      layout.block_size, layout.blocks_per_kv_block, *layout.cp)
        if out.dtype == torch.int32:
            slot = slot.where(slot <= INT32_MAX, PAD_SLOT_ID)
        out[o] = slot.to(out.dtype)
        out[num_out:buffer_end(out, a.num_tokens_padded)] = PAD_SLOT_ID
    a.input_ids[num_out:buffer_end(a.input_ids, a.num_tokens_padded)] = 0
    a.positions[num_out:buffer_end(a.positions, a.num_tokens_padded)] = 0
    a.is_rejected_token_mask[num_out:buffer_end(a.is_rejected_token_mask, a.num_tokens_padded)] = False
    a.is_masked_token_mask[num_out:buffer_end(a.is_masked_token_mask, a.num_tokens_padded)] = False
    indices_end = a.num_reqs_padded * slots if a.num_reqs_padded >= 0 else a.token_indices_to_sample.numel()
    a.token_indices_to_sample[num_reqs * slots:indices_end] = 0
    if a.hidden_state_mapping is not None:
        a.hidden_state_mapping[num_tokens:] = 0
    a.out_query_start_loc[:num_reqs] = out0.to(torch.int32)
    qsl_end = a.num_reqs_padded + 1 if a.num_reqs_padded >= 0 else a.out_query_start_loc.numel()
    a.out_query_start_loc[num_reqs:qsl_end] = num_out
    if a.out_seq_lens is not None:
        a.out_seq_lens[:num_reqs] = (a.seq_lens[:num_reqs] + n).to(torch.int32)
        a.out_seq_lens[num_reqs:buffer_end(a.out_seq_lens, a.num_reqs_padded)] = 0
