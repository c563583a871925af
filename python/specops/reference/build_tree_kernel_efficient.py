"""Reference for build_tree_kernel_efficient: an EAGLE draft tree's links, positions and mask."""

from __future__ import annotations

import torch

_SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32}


def tree_parents(parent_list: torch.Tensor, selected_index: torch.Tensor, topk: int) -> torch.Tensor:
    """[B, n]: each node's parent node, 0 the root, -1 none (node 0; a selection outside the
    candidates; a parent that is not selected). The first selected position wins."""
    batch, columns = selected_index.shape
    if columns == 0:  # n = 1: the root alone
        return torch.full((batch, 1), -1, dtype=torch.int64, device=selected_index.device)
    pick = selected_index
    slot = pick.clamp(min=0) // topk
    root = (pick >= 0) & (slot == 0)
    inside = (pick >= 0) & (slot > 0) & (slot < parent_list.size(1))
    if parent_list.size(1):
        token = torch.gather(parent_list, 1, torch.where(inside, slot, 0))
    else:
        token = torch.zeros_like(pick)
    hits = (selected_index[:, None, :] == token[:, :, None]) & inside[:, :, None]  # [B, child, position]
    first = hits.to(torch.int8).argmax(-1)  # the first hit, as the kernels' forward search
    parent = torch.where(root, 0, torch.where(hits.any(-1), first + 1, -1))
    return torch.cat([torch.full((batch, 1), -1, dtype=torch.int64, device=pick.device), parent], dim=1)


def _first_where(hits: torch.Tensor) -> torch.Tensor:
    """The first True index along the last dimension, -1 where there is none."""
    return torch.where(hits.any(-1), hits.to(torch.int8).argmax(-1), -1)


def build_tree_kernel_efficient(a) -> None:
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    batch, n = a.verified_seq_len.numel(), a.draft_token_num
    device = a.verified_seq_len.device
    parent = tree_parents(a.parent_list, a.selected_index, a.topk)
    nodes = torch.arange(n, device=device)
    a.retrive_index.copy_(torch.arange(batch, device=device)[:, None] * n + nodes)
    # Children in ascending order: a parent's first child and each node's next sibling.
    is_child = (parent[:, None, :] == nodes[None, :, None]) & (nodes > 0)  # [B, parent k, node i]
    a.retrive_next_token.copy_(_first_where(is_child))
    same = (parent[:, None, :] == parent[:, :, None]) & (parent[:, :, None] >= 0) & (nodes[None, :] > nodes[:, None])
    a.retrive_next_sibling.copy_(_first_where(same))

    # Each node's walk to the root, at most `depth` steps, marking its ancestors-or-self.
    marks = torch.zeros(batch, n, n, dtype=torch.bool, device=device)
    marks[:, :, 0] = True
    current = nodes.expand(batch, n).clone()
    active = (nodes > 0).expand(batch, n).clone()
    level = torch.zeros(batch, n, dtype=torch.int64, device=device)
    for _ in range(a.depth):
        level += active
        marks.scatter_(2, current[:, :, None], active[:, :, None] | torch.gather(marks, 2, current[:, :, None]))
        up = torch.gather(parent, 1, current)
        active &= up > 0
        current = torch.where(active, up, current)
    a.positions.copy_((a.verified_seq_len[:, None] + level).reshape(-1))

    mask = a.tree_mask
    if a.tree_mask_mode == 2:
        bits = (marks.long() << nodes).sum(-1).reshape(-1)
        width = mask.element_size()
        bits = torch.where(bits >= 2 ** (8 * width - 1), bits - 2 ** (8 * width), bits)  # the word's bits, signed
        mask.view(_SIGNED[width])[: batch * n] = bits.to(_SIGNED[width])
        return
    if a.tree_mask_mode == 1:
        starts = (torch.arange(batch, device=device) * n * n)[:, None] + nodes[None, :] * n
    else:
        seq_len = a.verified_seq_len
        request_cells = (seq_len + n) * n
        first = torch.cumsum(request_cells, 0) - request_cells
        starts = first[:, None] + (seq_len[:, None] + n) * nodes[None, :] + seq_len[:, None]
    cells = (starts[:, :, None] + nodes).reshape(-1)
    inside = (cells >= 0) & (cells < mask.numel())  # a cell past the mask is not written
    mask[cells[inside]] = marks.reshape(-1)[inside].to(mask.dtype)
