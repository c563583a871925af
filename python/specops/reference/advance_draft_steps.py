"""Reference for advance_draft_steps: every draft pass's device metadata of a chain-drafting step
(draft pass 1 on the target step's layout, passes 2..K one token per request), in one call.

Row k - 1 of each output holds draft pass k.
"""

from __future__ import annotations

import torch

from specops._constants import PAD_SLOT_ID
from specops._step_layout import group_layouts
from specops.reference.advance_draft_step import INT32_MAX
from specops.reference.advance_draft_step import _slots as draft_slots


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


def advance_draft_steps(
    query_start_loc: torch.Tensor, positions: torch.Tensor, seq_lens: torch.Tensor, token_indices: torch.Tensor,
    num_rejected_tokens: torch.Tensor, idx_mapping: torch.Tensor | None, block_tables: list[torch.Tensor],
    num_blocks: list[torch.Tensor], target_slot_mappings: list[torch.Tensor], rope_cos_sin_cache: torch.Tensor,
    out_positions: torch.Tensor, out_seq_lens: torch.Tensor, out_query_start_loc: torch.Tensor,
    out_cos_sin: torch.Tensor, out_local_cos_sin: torch.Tensor, out_local_query_start_loc: torch.Tensor,
    out_local_seq_lens: torch.Tensor, out_start_pos: torch.Tensor, out_slots: list[torch.Tensor],
    out_slot_pairs: list[torch.Tensor], num_steps: int, num_actual_tokens: int, num_input_tokens: int,
    num_reqs_padded: int, max_model_len: int, past_max_model_len: int, split_size: int, split_rank: int,
    cp_world_size: int, cp_rank: int, cp_interleave: int, block_sizes: list[int], blocks_per_kv_block: list[int],
    cp_sharded: list[bool], slot_mapping_enabled: list[bool], storage_block_sizes: list[int],
    max_model_len_tensor: torch.Tensor | None = None,
) -> None:
    num_tokens, rule, storage = num_actual_tokens, past_max_model_len, storage_block_sizes
    if max_model_len_tensor is not None:
        # Read as a tensor, as the device kernel reads it (a value below 1 taken as 1).
        max_model_len = max_model_len_tensor.long().clamp(min=1)
    layouts = group_layouts(block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, cp_world_size,
                            cp_rank, cp_interleave)
    num_reqs = token_indices.numel()
    reqs_end = out_seq_lens.size(1)
    device = out_positions.device
    row = idx_mapping.long() if idx_mapping is not None else torch.arange(num_reqs, device=device)
    later = draft_pass_positions(positions, seq_lens, token_indices, num_rejected_tokens, num_steps, max_model_len,
                                 rule == 1)
    entries = torch.arange(reqs_end + 1, device=device)
    for k in range(num_steps):
        if k == 0:
            tokens, stream = num_tokens, num_input_tokens
            token_positions = positions[:num_tokens].long()
            seq = seq_lens[:num_reqs].long()
            qsl = query_start_loc.long()[entries.clamp(max=num_reqs)]
            slots = [target[:num_tokens].long() for target in target_slot_mappings]
        else:
            tokens, stream = num_reqs, num_reqs_padded
            token_positions, seq, mapped = later[k - 1]
            qsl = entries.clamp(max=num_reqs)
            slots = [draft_slots(table, num_blocks[g] if num_blocks else None, row, token_positions,
                                 mapped & layout.enabled, layout.block_size, layout.blocks_per_kv_block, *layout.cp)
                     for g, (table, layout) in enumerate(zip(block_tables, layouts))]
        per_rank = -(-stream // split_size)
        pad = per_rank * split_size
        local_start, local_end = split_rank * per_rank, (split_rank + 1) * per_rank
        padded = torch.zeros(pad, dtype=torch.int64, device=device)
        padded[:tokens] = token_positions
        out_positions[k, :pad] = padded.to(out_positions.dtype)
        rows = _rope_rows(rope_cos_sin_cache, padded)
        out_cos_sin[k, :pad] = rows
        local = rows[local_start:local_end].clone()
        local[max(tokens - local_start, 0):] = 0
        out_local_cos_sin[k, :per_rank] = local
        out_seq_lens[k, :num_reqs] = seq.to(torch.int32)
        out_seq_lens[k, num_reqs:] = 0
        out_query_start_loc[k, :reqs_end + 1] = qsl.to(torch.int32)
        clamped = qsl.clamp(local_start, local_end)
        out_local_query_start_loc[k, :reqs_end + 1] = (clamped - clamped[0]).to(torch.int32)
        starts, ends = qsl[:num_reqs], qsl[1:num_reqs + 1]
        local_lens = clamped[1:num_reqs + 1] - clamped[:num_reqs]
        beyond = ends - clamped[1:num_reqs + 1]  # the request's tokens on later ranks
        local_seq = torch.where((local_lens > 0) & (seq > 0), (seq - beyond).clamp(min=0), 0)
        out_local_seq_lens[k, :num_reqs] = local_seq.to(torch.int32)
        out_local_seq_lens[k, num_reqs:] = 0
        out_start_pos[k, :num_reqs] = (seq - (ends - starts)).to(torch.int32)
        out_start_pos[k, num_reqs:] = 0
        for g, (out, pairs, source) in enumerate(zip(out_slots, out_slot_pairs, slots)):
            if out.dtype == torch.int32:
                source = source.where(source <= INT32_MAX, PAD_SLOT_ID)
            written = torch.full((stream,), PAD_SLOT_ID, dtype=torch.int64, device=device)
            written[:tokens] = source
            out[k, :stream] = written.to(out.dtype)
            block = storage[g]
            pairs[k, :stream, 0] = (written // block).to(pairs.dtype)
            pairs[k, :stream, 1] = (written % block).to(pairs.dtype)
