"""Reference for verify_tree_greedy: the greedy walk of each request's draft tree."""

from __future__ import annotations

import torch


def verify_tree_greedy(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name. Every request
    moves one level per step; a level tries at most n siblings (a longer list has a cycle)."""
    batch, n = a.candidates.shape
    num_spec = a.accept_index.size(1)
    flat_end = batch * n
    device = a.candidates.device
    rows = torch.arange(batch, device=device)
    targets = a.target_predict.reshape(-1)
    predicts = a.predicts
    last = a.retrive_index[:, 0].clone()
    alive = (last >= 0) & (last < flat_end)  # a root outside the batch accepts nothing
    accepted = torch.full((batch, num_spec), -1, dtype=torch.int64, device=device)
    accepted[:, 0] = torch.where(alive, last, -1)
    count = torch.zeros(batch, dtype=torch.int64, device=device)
    current = torch.zeros(batch, dtype=torch.int64, device=device)
    for _ in range(1, num_spec):
        current = torch.where(alive, a.retrive_next_token[rows, current.clamp(0, n - 1)], -1)
        target = targets[last.clamp(0, max(flat_end - 1, 0))]
        searching, found = alive.clone(), torch.zeros_like(alive)
        for _ in range(n):
            searching &= (current >= 0) & (current < n)  # a link outside the row ends the list
            node = current.clamp(0, n - 1)
            draft = a.retrive_index[rows, node]
            hit = searching & (a.candidates[rows, node] == target) & (draft >= 0) & (draft < flat_end)
            predicts[last[hit]] = target[hit].to(predicts.dtype)
            count += hit
            accepted[rows[hit], count[hit]] = draft[hit]
            last = torch.where(hit, draft, last)
            found |= hit
            searching &= ~hit
            current = torch.where(searching, a.retrive_next_sibling[rows, node], current)
        alive &= found
    a.accept_index.copy_(accepted.to(a.accept_index.dtype))
    a.accept_token_num.copy_(count.to(a.accept_token_num.dtype))
    ended = (a.retrive_index[:, 0] >= 0) & (a.retrive_index[:, 0] < flat_end)
    predicts[last[ended]] = targets[last[ended]].to(predicts.dtype)
