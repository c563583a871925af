"""Triton kernel for build_tree_kernel_efficient: an EAGLE draft tree's links, positions and mask.

A persistent grid of programs, each over a contiguous run of requests (FULL_MASK's rows start
after every earlier request's, so a program sums the lengths before its run once and keeps a
running start). Per request, nodes are lanes in tiles of BLOCK: each lane finds its parent by
comparing its parent's candidate index with a tile of selected_index at a time (no gather from
another lane's result, no scratch store read back), the links are the smallest child / next
larger sibling over tiles of other nodes, and each node's walk to the root (at most `depth`
steps, SGLang's bound) marks the cells of a tile of mask columns in registers, written once.

Every load is at a clamped in-bounds offset: a selection outside the candidates or a parent
that is not selected leaves the node unlinked and ends its walk; a mask cell outside the mask
(FULL_MASK with lengths the host op rejects) is not written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

MAX_BLOCK = 64
_SIGNED = {1: torch.int8, 2: torch.int16, 4: torch.int32}


@triton.jit
def _parents(parents_row, selected_row, node, live, topk, parent_width, n, BLOCK: tl.constexpr):
    """Each lane's parent node: 0 the root, 1..n-1, -1 none (node 0, a dead lane, a selection
    outside the candidates, a parent that is not selected; the first selected position wins)."""
    has = live & (node > 0)
    pick = tl.load(selected_row + tl.where(has, node - 1, 0), mask=has, other=-1)
    ok = has & (pick >= 0)
    slot = tl.where(ok, pick, 0) // topk  # non-negative: floor and truncation agree
    root = ok & (slot == 0)
    inside = ok & (slot > 0) & (slot < parent_width)
    token = tl.load(parents_row + tl.where(inside, slot, 0), mask=inside, other=0)
    first = tl.where(live, n, n)
    for p0 in range(0, n - 1, BLOCK):
        p = p0 + tl.arange(0, BLOCK)
        in_row = p < n - 1
        chosen = tl.load(selected_row + tl.where(in_row, p, 0), mask=in_row, other=0)
        hit = (chosen[None, :] == token[:, None]) & in_row[None, :] & inside[:, None]
        first = tl.minimum(first, tl.min(tl.where(hit, p[None, :], n), axis=1))
    return tl.where(root, 0, tl.where(first < n, first + 1, -1))


@triton.jit
def _build_tree_kernel(
    parent_ptr, selected_ptr, seq_len_ptr, mask_ptr, positions_ptr, index_ptr, next_ptr, sibling_ptr,
    batch, parent_width, topk, depth, n, mask_numel, per_program,
    MODE: tl.constexpr, BLOCK: tl.constexpr,
):
    lo = tl.program_id(0) * per_program
    hi = tl.minimum(lo + per_program, batch)
    # FULL_MASK: the first cell of request lo, after (seq_len + n) * n cells of each earlier one.
    start = tl.cast(lo, tl.int64) * n * n
    if MODE == 0:
        for r0 in range(0, lo, BLOCK):
            r = r0 + tl.arange(0, BLOCK)
            start += tl.sum(tl.load(seq_len_ptr + tl.where(r < lo, r, 0), mask=r < lo, other=0)) * n
    for b in range(lo, hi):
        seq_len = tl.load(seq_len_ptr + b)
        parents_row = parent_ptr + tl.cast(b, tl.int64) * parent_width
        selected_row = selected_ptr + tl.cast(b, tl.int64) * (n - 1)
        row = tl.cast(b, tl.int64) * n
        for i0 in range(0, n, BLOCK):
            i = i0 + tl.arange(0, BLOCK)
            live = i < n
            parent = _parents(parents_row, selected_row, i, live, topk, parent_width, n, BLOCK)
            # Children ascend: a parent's first child is its smallest, a node's next sibling the
            # next larger child of its parent.
            child = tl.where(live, n, n)
            sibling = tl.where(live, n, n)
            for j0 in range(0, n, BLOCK):
                j = j0 + tl.arange(0, BLOCK)
                their = _parents(parents_row, selected_row, j, j < n, topk, parent_width, n, BLOCK)
                is_child = their[None, :] == i[:, None]
                child = tl.minimum(child, tl.min(tl.where(is_child, j[None, :], n), axis=1))
                is_sibling = (their[None, :] == parent[:, None]) & (parent[:, None] >= 0) & (j[None, :] > i[:, None])
                sibling = tl.minimum(sibling, tl.min(tl.where(is_sibling, j[None, :], n), axis=1))
            safe_i = tl.where(live, i, 0)
            tl.store(index_ptr + row + safe_i, row + i, mask=live)
            tl.store(next_ptr + row + safe_i, tl.where(child < n, child, -1).to(tl.int64), mask=live)
            tl.store(sibling_ptr + row + safe_i, tl.where(sibling < n, sibling, -1).to(tl.int64), mask=live)
            # Mask columns in tiles (one tile in mode 2: n <= 32); the walk is redone per tile.
            for k0 in range(0, n, BLOCK):
                k = k0 + tl.arange(0, BLOCK)
                marks = live[:, None] & (k[None, :] == 0)
                node = i
                walking = live & (i > 0)
                level = tl.where(live, 0, 0)
                for _ in range(depth):
                    level += walking.to(tl.int32)
                    marks = marks | (walking[:, None] & (node[:, None] == k[None, :]))
                    up = _parents(parents_row, selected_row, node, walking, topk, parent_width, n, BLOCK)
                    walking = walking & (up > 0)
                    node = tl.where(walking, up, node)
                tl.store(positions_ptr + row + safe_i, seq_len + level, mask=live)
                if MODE == 2:
                    bit = tl.full((BLOCK,), 1, tl.int64) << k.to(tl.int64)
                    word = tl.sum(tl.where(marks & (k[None, :] < n), bit[None, :], 0), axis=1)
                    cell = row + i
                    fits = live & (cell < mask_numel)
                    tl.store(mask_ptr + tl.where(fits, cell, 0), word.to(mask_ptr.dtype.element_ty), mask=fits)
                else:
                    if MODE == 0:
                        first = start + (seq_len + n) * i + seq_len
                    else:
                        first = (row + i) * n
                    cell = first[:, None] + k[None, :]
                    fits = live[:, None] & (k[None, :] < n) & (cell >= 0) & (cell < mask_numel)
                    tl.store(mask_ptr + tl.where(fits, cell, 0), marks.to(tl.int8), mask=fits)
        start += (seq_len + n) * n


def build_tree_kernel_efficient(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    batch, n = a.verified_seq_len.numel(), a.draft_token_num
    if batch == 0:
        return
    block = max(2, min(triton.next_power_of_2(n), MAX_BLOCK))
    per_program = triton.cdiv(batch, num_programs(a.verified_seq_len.device, batch))
    # The mask as signed integers of its width: bool / uint8 cells as int8, a packed word's bits
    # in a signed word (one store type on every target).
    mask = a.tree_mask.view(_SIGNED[a.tree_mask.element_size()])
    _build_tree_kernel[(triton.cdiv(batch, per_program),)](
        a.parent_list, a.selected_index, a.verified_seq_len, mask, a.positions, a.retrive_index,
        a.retrive_next_token, a.retrive_next_sibling, batch, a.parent_list.size(1), a.topk, a.depth, n,
        mask.numel(), per_program, MODE=a.tree_mask_mode, BLOCK=block,
    )
