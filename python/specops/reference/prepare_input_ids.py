"""Reference for prepare_input_ids: the step's input ids and logits indices, request by request."""

from __future__ import annotations

import torch

from specops._step_layout import input_ids_request_rows, logits_ends


def _int32(value: int) -> int:
    """value as a store into an int32 tensor keeps it (the low 32 bits, as the kernels' casts)."""
    return (value + 2**31) % 2**32 - 2**31


def prepare_input_ids(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_reqs = a.idx_mapping.numel()
    has_prefill = a.all_token_ids is not None
    num_rows = input_ids_request_rows(a.num_computed_tokens, a.prefill_len, a.last_sampled_tokens, a.draft_tokens,
                                      a.all_token_ids, a.next_prefill_tokens)
    width = a.all_token_ids.size(1) if has_prefill else 0
    ends = logits_ends(a.num_logits_padded, a.logits_indices, a.expanded_idx_mapping, a.expanded_local_pos)
    qsl, cu = a.query_start_loc.tolist(), a.cu_num_logits.tolist()
    last = a.last_sampled_tokens.reshape(a.last_sampled_tokens.size(0), -1)[:, 0] if a.last_sampled_tokens.numel() else None
    for r in range(num_reqs):
        mapped = int(a.idx_mapping[r])
        row = mapped if 0 <= mapped < num_rows else -1
        q0, q1, c0 = qsl[r], qsl[r + 1], cu[r]
        n_log = cu[r + 1] - c0
        n_draft = n_log - a.num_new_sampled_tokens
        # Only entries inside some logits buffer are written (contradictory offsets cost nothing).
        for j in range(max(0, -c0), min(n_log, max(ends) - c0)):
            o = c0 + j
            if o < ends[0]:
                a.logits_indices[o] = q1 - n_log + j
            if o < ends[1]:
                a.expanded_idx_mapping[o] = row
            if o < ends[2]:
                a.expanded_local_pos[o] = _int32(j)  # j passes 2^31 when cu_num_logits[r] is INT32_MIN
        if row < 0:
            continue
        nc, pl = int(a.num_computed_tokens[row]), int(a.prefill_len[row])
        seq_len = nc + q1 - q0
        prefilling = has_prefill and nc < pl
        generated = seq_len > pl
        bonus = generated and a.num_new_sampled_tokens == 1 and seq_len - n_log >= pl
        for i in range(max(q0, 0), min(q1, a.input_ids.numel())):
            draft = i - (q1 - n_draft)
            if generated and 0 <= draft < a.draft_tokens.size(1):
                a.input_ids[i] = _int32(int(a.draft_tokens[row, draft]))
            elif bonus and i == q1 - n_log:
                a.input_ids[i] = _int32(int(last[row]))
            elif prefilling:
                column = nc + i - q0
                a.input_ids[i] = int(a.all_token_ids[row, column]) if 0 <= column < width else 0
        if prefilling:
            for k in range(a.next_prefill_tokens.size(0)):
                column = seq_len + k
                a.next_prefill_tokens[k, row] = int(a.all_token_ids[row, column]) if 0 <= column < min(pl, width) else 0
    num_tokens = min(max(qsl[num_reqs], 0), a.input_ids.numel())
    tokens_end = min(num_tokens if a.num_tokens_padded < 0 else a.num_tokens_padded, a.input_ids.numel())
    a.input_ids[num_tokens:tokens_end] = 0
    num_logits = max(cu[num_reqs], 0)
    a.logits_indices[num_logits:ends[0]] = 0
    a.expanded_idx_mapping[num_logits:ends[1]] = -1
    a.expanded_local_pos[num_logits:ends[2]] = 0
