"""Reference for advance_draft_steps: every draft pass's device metadata of a chain-drafting step
(draft pass 1 on the target step's layout, passes 2..K one token per request), in one call.

Row k - 1 of each output holds draft pass k.
"""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts
from specops.reference.advance_draft_step import INT32_MAX
from specops.reference.advance_draft_step import draft_slots


def draft_pass_positions(positions: torch.Tensor, seq_lens: torch.Tensor, token_indices: torch.Tensor,
                         num_rejected_tokens: torch.Tensor, num_steps: int, max_model_len: int | torch.Tensor,
                         clamp: bool) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(position, seq_len, mapped) int64 / int64 / bool [R] of passes 2..num_steps: the
    advance_draft_step rule applied pass after pass (the first with the gather and the rejected
    tokens). A token index outside positions gives position 0 and no slots, as there."""
    index = token_indices.long()
    ok = (index >= 0) & (index < positions.numel())
    current = positions.long()[index.where(ok, 0)] if positions.numel() else torch.zeros_like(index)
    position = current.where(ok, -1)
    seq_len = seq_lens[:index.numel()].long() - num_rejected_tokens.long()
    passes = []
    for _ in range(num_steps - 1):
        # p = position + 1 >= max_model_len, tested on position: at 2^63 - 1 the sum wraps.
        over = ok & (position >= max_model_len - 1)
        p = position.where(ok & ~over, -1) + 1
        if clamp:
            position, seq_len, mapped = p.where(~over, max_model_len - 1), (seq_len + 1).clamp(max=max_model_len), ok
        else:
            position = p
            seq_len = (seq_len + 1).where(~over, 1).clamp(max=max_model_len)
            mapped = ok & ~over
        passes.append((position, seq_len, mapped))
    return passes


def _rope_rows(cache: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    valid = (positions >= 0) & (positions < cache.size(0))
    rows = cache[positions.where(valid, 0)] if cache.size(0) else cache.new_zeros((positions.numel(), cache.size(1)))
    return torch.where(valid[:, None], rows, torch.zeros_like(rows))


def advance_draft_steps(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_tokens, rule, storage = a.num_actual_tokens, a.past_max_model_len, a.storage_block_sizes
    # Read as a tensor when max_model_len_tensor gives it, as the device kernel reads it (a value
    # below 1 taken as 1).
    max_model_len = a.max_model_len if a.max_model_len_tensor is None else a.max_model_len_tensor.long().clamp(min=1)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    num_reqs = a.token_indices.numel()
    reqs_end = a.out_seq_lens.size(1)
    device = a.out_positions.device
    row = a.idx_mapping.long() if a.idx_mapping is not None else torch.arange(num_reqs, device=device)
    later = draft_pass_positions(a.positions, a.seq_lens, a.token_indices, a.num_rejected_tokens, a.num_steps,
                                 max_model_len, rule == 1)
    entries = torch.arange(reqs_end + 1, device=device)
    for k in range(a.num_steps):
        if k == 0:
            tokens, stream = num_tokens, a.num_input_tokens
            token_positions = a.positions[:num_tokens].long()
            seq = a.seq_lens[:num_reqs].long()
            qsl = a.query_start_loc.long()[entries.clamp(max=num_reqs)]
            slots = [target[:num_tokens].long() for target in a.target_slot_mappings]
        else:
            tokens, stream = num_reqs, a.num_reqs_padded
            token_positions, seq, mapped = later[k - 1]
            qsl = entries.clamp(max=num_reqs)
            slots = [draft_slots(table, a.num_blocks[g] if a.num_blocks else None, row, token_positions,
                                 mapped & layout.enabled, layout.block_size, layout.blocks_per_kv_block, *layout.cp)
                     for g, (table, layout) in enumerate(zip(a.block_tables, layouts))]
        per_rank = -(-stream // a.split_size)
        pad = per_rank * a.split_size
        local_start, local_end = a.split_rank * per_rank, (a.split_rank + 1) * per_rank
        padded = torch.zeros(pad, dtype=torch.int64, device=device)
        padded[:tokens] = token_positions
        a.out_positions[k, :pad] = padded.to(a.out_positions.dtype)
        rows = _rope_rows(a.rope_cos_sin_cache, padded)
        a.out_cos_sin[k, :pad] = rows
        local = rows[local_start:local_end].clone()
        local[max(tokens - local_start, 0):] = 0
        a.out_local_cos_sin[k, :per_rank] = local
        a.out_seq_lens[k, :num_reqs] = seq.to(torch.int32)
        a.out_seq_lens[k, num_reqs:] = 0
        a.out_query_start_loc[k, :reqs_end + 1] = qsl.to(torch.int32)
        clamped = qsl.clamp(local_start, local_end)
        a.out_local_query_start_loc[k, :reqs_end + 1] = (clamped - clamped[0]).to(torch.int32)
        starts, ends = qsl[:num_reqs], qsl[1:num_reqs + 1]
        local_lens = clamped[1:num_reqs + 1] - clamped[:num_reqs]
        beyond = ends - clamped[1:num_reqs + 1]  # the request's tokens on later ranks
        local_seq = torch.where((local_lens > 0) & (seq > 0), (seq - beyond).clamp(min=0), 0)
        a.out_local_seq_lens[k, :num_reqs] = local_seq.to(torch.int32)
        a.out_local_seq_lens[k, num_reqs:] = 0
        a.out_start_pos[k, :num_reqs] = (seq - (ends - starts)).to(torch.int32)
        a.out_start_pos[k, num_reqs:] = 0
        for g, (out, pairs, source) in enumerate(zip(a.out_slots, a.out_slot_pairs, slots)):
            if out.dtype == torch.int32:
                source = source.where(source <= INT32_MAX, PAD_SLOT_ID)
            written = torch.full((stream,), PAD_SLOT_ID, dtype=torch.int64, device=device)
            written[:tokens] = source
            out[k, :stream] = written.to(out.dtype)
            block = storage[g]
            pairs[k, :stream, 0] = (written // block).to(pairs.dtype)
            pairs[k, :stream, 1] = (written % block).to(pairs.dtype)
