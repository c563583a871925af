"""Benchmark of build_tree_kernel_efficient against what a runner would otherwise run: a Python
loop over nodes (an eager tree speculator's, SGLang's kernel restated on the host) and a torch
composition (specops' reference: a gather, a comparison matrix and a scatter a level)."""

from __future__ import annotations

import collections
import random

import torch

import specops
from specops.bench._harness import Case
from specops.reference.build_tree_kernel_efficient import build_tree_kernel_efficient as torch_composition

SHAPES = [1, 8, 64, 256]
QUICK_SHAPES = [1, 8]
TOPK, DEPTH, DRAFT_TOKENS, MODE = 4, 4, 16, 1  # an EAGLE tree, QLEN_ONLY (SGLang's CPU / NPU mask)

_Record = collections.namedtuple("_Record", "parent_list selected_index verified_seq_len tree_mask positions "
                                 "retrive_index retrive_next_token retrive_next_sibling topk depth draft_token_num "
                                 "tree_mask_mode")


def drafted_trees(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(parent_list, selected_index, verified_seq_len) in SGLang's layout: each step's beams among
    the previous step's candidates, a parent-closed selection of DRAFT_TOKENS - 1 candidates."""
    rng = random.Random(seed)
    parents, selections = [], []
    for _ in range(batch):
        row = [-1] + list(range(TOPK))
        for step in range(1, DEPTH - 1):
            row += [TOPK + (step - 1) * TOPK * TOPK + beam for beam in rng.sample(range(TOPK * TOPK), TOPK)]
        chosen: set[int] = set()
        while len(chosen) < DRAFT_TOKENS - 1:
            candidate = rng.randrange(TOPK + (DEPTH - 1) * TOPK * TOPK)
            if candidate < TOPK or row[candidate // TOPK] in chosen:
                chosen.add(candidate)
        parents.append(row)
        selections.append(sorted(chosen))
    lengths = [rng.randrange(1, 4096) for _ in range(batch)]
    return torch.tensor(parents), torch.tensor(selections), torch.tensor(lengths)


def python_loop(parent_list, selected_index, verified_seq_len, outputs) -> None:
    """A runner's host loop: the tensors as lists, every node's parent search and walk in Python."""
    tree_mask, positions, retrive_index, next_token, next_sibling = outputs
    n = DRAFT_TOKENS
    mask, pos, index, child, sibling = [], [], [], [], []
    for b, (parents, picks, seq_len) in enumerate(zip(parent_list.tolist(), selected_index.tolist(),
                                                      verified_seq_len.tolist())):
        def parent_of(i):
            slot = picks[i - 1] // TOPK
            return 0 if slot == 0 else picks.index(parents[slot]) + 1 if parents[slot] in picks else -1
        up = [-1] + [parent_of(i) for i in range(1, n)]
        first, after = [-1] * n, [-1] * n
        for i in range(n - 1, 0, -1):
            if up[i] >= 0:
                after[i], first[up[i]] = first[up[i]], i
        for i in range(n):
            row, node, level = [True] + [False] * (n - 1), i, 0
            while node > 0 and level < DEPTH:
                row[node], level, node = True, level + 1, up[node]
            mask += row
            pos.append(seq_len + level)
        index += [b * n + i for i in range(n)]
        child += first
        sibling += after
    tree_mask.copy_(torch.tensor(mask))
    positions.copy_(torch.tensor(pos))
    retrive_index.copy_(torch.tensor(index).view_as(retrive_index))
    next_token.copy_(torch.tensor(child).view_as(next_token))
    next_sibling.copy_(torch.tensor(sibling).view_as(next_sibling))


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for batch in QUICK_SHAPES if quick else SHAPES:
        parent_list, selected_index, lengths = (t.to(device) for t in drafted_trees(batch, batch))
        n = DRAFT_TOKENS
        outputs = (torch.empty(batch * n * n, dtype=torch.bool, device=device),
                   torch.empty(batch * n, dtype=torch.int64, device=device),
                   *(torch.empty(batch, n, dtype=torch.int64, device=device) for _ in range(3)))
        record = _Record(parent_list, selected_index, lengths, *outputs, TOPK, DEPTH, n, MODE)
        args = (parent_list, selected_index, lengths)
        impls = {  # each bound to this shape's tensors (a closure would read the last shape's)
            "specops": lambda args=args, outputs=outputs, n=n: specops.build_tree_kernel_efficient(
                *args, *outputs, TOPK, DEPTH, n, MODE),
            "python-loop": lambda args=args, outputs=outputs: python_loop(*args, outputs),
            "torch-eager": lambda record=record: torch_composition(record),
        }
        result.append(Case("build_tree_kernel_efficient", f"R={batch} topk={TOPK} depth={DEPTH} n={n}", batch,
                           batch * n, impls, baselines=("python-loop", "torch-eager")))
    return result
