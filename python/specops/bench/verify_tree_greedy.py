"""Benchmark of verify_tree_greedy against what a runner would otherwise run: a Python loop over
each request's tree (an eager tree speculator's walk) and a torch composition (specops'
reference: every request one level a step, the siblings tried in turn)."""

from __future__ import annotations

import collections

import torch

import specops
from specops.bench._harness import Case
from specops.bench.build_tree_kernel_efficient import DEPTH, DRAFT_TOKENS, TOPK, drafted_trees
from specops.reference.verify_tree_greedy import verify_tree_greedy as torch_composition

SHAPES = [1, 8, 64, 256]
QUICK_SHAPES = [1, 8]
VOCAB = 3  # small, so that paths are accepted and siblings tried

_Record = collections.namedtuple("_Record", "predicts accept_index accept_token_num candidates retrive_index "
                                 "retrive_next_token retrive_next_sibling target_predict")


def python_loop(candidates, retrive_index, next_token, next_sibling, target, outputs) -> None:
    """A runner's host loop: the tree as lists, the greedy walk in Python, the results copied back."""
    predicts, accept_index, accept_token_num = outputs
    flat = target.reshape(-1).tolist()
    pred = predicts.tolist()
    accepted, counts = [], []
    for b, (tokens, index, child, sibling) in enumerate(zip(candidates.tolist(), retrive_index.tolist(),
                                                            next_token.tolist(), next_sibling.tolist())):
        last, node, path = index[0], 0, [index[0]]
        while len(path) < accept_index.size(1):
            node = child[node]
            while node != -1 and tokens[node] != flat[last]:
                node = sibling[node]
            if node == -1:
                break
            pred[last] = flat[last]
            last = index[node]
            path.append(last)
        pred[last] = flat[last]
        accepted.append(path + [-1] * (accept_index.size(1) - len(path)))
        counts.append(len(path) - 1)
    predicts.copy_(torch.tensor(pred, dtype=torch.int32))
    accept_index.copy_(torch.tensor(accepted, dtype=torch.int32))
    accept_token_num.copy_(torch.tensor(counts, dtype=torch.int32))


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for batch in QUICK_SHAPES if quick else SHAPES:
        n = DRAFT_TOKENS
        tree = specops.build_tree_kernel_efficient(*drafted_trees(batch, batch), topk=TOPK, depth=DEPTH,
                                                   draft_token_num=n, tree_mask_mode=1)
        generator = torch.Generator().manual_seed(batch)
        candidates = torch.randint(VOCAB, (batch, n), generator=generator).to(device)
        target = torch.randint(VOCAB, (batch, n), generator=generator).to(device)
        links = tuple(t.to(device) for t in (tree.retrive_index, tree.retrive_next_token, tree.retrive_next_sibling))
        outputs = (torch.zeros(batch * n, dtype=torch.int32, device=device),
                   torch.full((batch, DEPTH + 1), -1, dtype=torch.int32, device=device),
                   torch.zeros(batch, dtype=torch.int32, device=device))
        record = _Record(*outputs, candidates, *links, target)
        inputs = (candidates, *links, target)
        impls = {  # each bound to this shape's tensors (a closure would read the last shape's)
            "specops": lambda inputs=inputs, outputs=outputs: specops.verify_tree_greedy(*outputs, *inputs),
            "python-loop": lambda inputs=inputs, outputs=outputs: python_loop(*inputs, outputs),
            "torch-eager": lambda record=record: torch_composition(record),
        }
        result.append(Case("verify_tree_greedy", f"R={batch} topk={TOPK} depth={DEPTH} n={n}", batch, batch * n,
                           impls, baselines=("python-loop", "torch-eager")))
    return result
