"""Reference for prepare_next_token_ids: the drafter's next token and the counts around it."""

from __future__ import annotations

import torch


def prepare_next_token_ids(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    num_reqs, width = a.sampled_token_ids.shape
    sampled = a.sampled_token_ids.long()
    valid = (sampled >= 0) & (sampled < a.vocab_size)
    count = valid.sum(dim=1)
    columns = torch.arange(width).expand(num_reqs, width)
    last_valid = columns.where(valid, -1).max(dim=1).values if width else torch.full((num_reqs,), -1)
    if a.discard_request_mask is not None:
        count = count.where(~a.discard_request_mask[:num_reqs], 0)
    if a.backup_next_token_ids is not None:
        backup = a.backup_next_token_ids[:num_reqs].long()
    else:
        n = a.num_tokens_no_spec[:num_reqs].long()
        in_table = (n >= 1) & (n <= a.token_ids.size(1))
        gathered = a.token_ids[:num_reqs].long().gather(1, (n - 1).where(in_table, 0).view(-1, 1)).view(-1) \
            if a.token_ids.size(1) else torch.zeros(num_reqs, dtype=torch.int64)
        backup = gathered.where(in_table, -1)
    chosen = sampled.gather(1, last_valid.clamp(min=0).view(-1, 1)).view(-1) if width else backup
    next_token = chosen.where(count > 0, backup)

    def padded(out: torch.Tensor, values: torch.Tensor) -> None:
        out[:num_reqs] = values.to(out.dtype)
        out[num_reqs:out.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded] = 0

    padded(a.next_token_ids, next_token)
    padded(a.valid_sampled_token_count, count)
    if a.cu_num_draft_tokens is None:
        return
    cu = a.cu_num_draft_tokens.long()
    drafts = cu - torch.cat([cu.new_zeros(1), cu[:-1]])[:num_reqs]
    rejected = (drafts + 1 - count).where(drafts > 0, 0)
    qsl = a.query_start_loc.long()
    padded(a.num_rejected_tokens, rejected)
    padded(a.token_indices_to_sample, torch.maximum(qsl[1:num_reqs + 1] - 1 - rejected, qsl[:num_reqs]))
