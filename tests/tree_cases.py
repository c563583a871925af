"""Draft trees in SGLang's layout and the tree ops' expectations, in plain Python over ints.

The layout (SGLang 0.5.23, eagle_utils.organize_draft_results and the drafter's
select_top_k_tokens): the drafter's candidates are the root's topk children (flat 0..topk-1),
then topk * topk a step; step s >= 1's candidate topk + (s - 1) * topk^2 + r * topk + c is child
c of that step's beam r. parent_list (topk * (depth - 1) + 1 entries, none for depth 1) is the
concatenation of the steps' parents: [-1, 0, ..., topk - 1] for the first step (beam r of step 1
is the root's child r), then each later step's topk beams, flat indices of the previous step's
candidates. selected_index: n - 1 candidates, sorted, closed under parents (a child's parent
scores higher in the drafter).

The expectations restate SGLang's kernels (build: the Triton version's walk bound and its
skipped unlinked node; verify: the sibling walk) without torch, and independently of
python/specops/reference.
"""

from __future__ import annotations

import random

import torch


def packed_dtype(n: int) -> torch.dtype:
    """SGLang's word for a bit-packed mask row (eagle_utils: uint8 / uint16 / uint32)."""
    return torch.uint32 if n > 16 else torch.uint16 if n > 8 else torch.uint8


def num_candidates(topk: int, depth: int) -> int:
    return topk + (depth - 1) * topk * topk


def random_request(rng: random.Random, topk: int, depth: int, n: int, shape: str = "random") -> tuple[list, list]:
    """One request's (parent_list row, selected_index row). shape: "random", or "chain" (the first
    candidate of every step, down one branch as far as it goes), "star" (the root's children)."""
    parents = [-1] + list(range(topk)) if depth > 1 else []
    for step in range(1, depth - 1):
        base = topk + (step - 1) * topk * topk
        beams = rng.sample(range(topk * topk), topk) if shape == "random" else list(range(topk))
        parents += [base + beam for beam in beams]

    def parent(candidate: int) -> int | None:
        return None if candidate < topk else parents[candidate // topk]

    chosen: set[int] = set()
    for _ in range(n - 1):
        frontier = [c for c in range(num_candidates(topk, depth))
                    if c not in chosen and (parent(c) is None or parent(c) in chosen)]
        if shape == "chain":
            deepest = [c for c in frontier if parent(c) is not None and parent(c) == max(chosen, default=None)]
            pick = min(deepest or frontier)
        elif shape == "star":
            pick = min(c for c in frontier if c < topk) if any(c < topk for c in frontier) else min(frontier)
        else:
            pick = rng.choice(frontier)
        chosen.add(pick)
    return parents, sorted(chosen)


def random_batch(rng: random.Random, batch: int, topk: int, depth: int, n: int, shape: str = "random",
                 max_seq_len: int = 40) -> dict:
    rows = [random_request(rng, topk, depth, n, shape) for _ in range(batch)]
    width = topk * (depth - 1) + 1 if depth > 1 else 0
    return dict(
        parent_list=torch.tensor([p for p, _ in rows], dtype=torch.int64).reshape(batch, width),
        selected_index=torch.tensor([s for _, s in rows], dtype=torch.int64).reshape(batch, n - 1),
        verified_seq_len=torch.tensor([rng.randint(0, max_seq_len) for _ in range(batch)], dtype=torch.int64),
        topk=topk, depth=depth, draft_token_num=n,
    )


def max_draft_tokens(topk: int, depth: int) -> int:
    return num_candidates(topk, depth) + 1


def _parent_node(parents: list, selected: list, topk: int, node: int) -> int:
    """0 the root, a node, or -1 (a selection outside the candidates, a parent not selected)."""
    pick = selected[node - 1]
    if pick < 0:
        return -1
    if pick // topk == 0:
        return 0
    if pick // topk >= len(parents):
        return -1
    wanted = parents[pick // topk]
    for position, value in enumerate(selected):
        if value == wanted:
            return position + 1
    return -1


def expect_build(call: dict, mask: list) -> dict:
    """The outputs as lists, `mask` the mask's values before the call (FULL_MASK keeps the
    prefix cells): tree_mask cells (0/1, or the packed words), positions, the three [B][n]."""
    n, topk, depth, mode = call["draft_token_num"], call["topk"], call["depth"], call["tree_mask_mode"]
    mask = list(mask)
    out = dict(positions=[], retrive_index=[], retrive_next_token=[], retrive_next_sibling=[])
    start = 0
    for b, seq_len in enumerate(call["verified_seq_len"].tolist()):
        parents, selected = call["parent_list"][b].tolist(), call["selected_index"][b].tolist()
        parent_of = [-1] + [_parent_node(parents, selected, topk, i) for i in range(1, n)]
        children = {p: [i for i in range(1, n) if parent_of[i] == p] for p in range(n)}
        out["retrive_index"].append([b * n + i for i in range(n)])
        out["retrive_next_token"].append([children[p][0] if children[p] else -1 for p in range(n)])
        siblings = []
        for i in range(n):
            later = [j for j in children.get(parent_of[i], []) if j > i] if parent_of[i] >= 0 else []
            siblings.append(later[0] if later else -1)
        out["retrive_next_sibling"].append(siblings)
        for i in range(n):
            row, node, level = [1] + [0] * (n - 1), i, 0
            for _ in range(depth if i else 0):
                level += 1
                row[node] = 1
                up = _parent_node(parents, selected, topk, node)
                if up <= 0:
                    break
                node = up
            out["positions"].append(seq_len + level)
            if mode == 2:
                mask[b * n + i] = sum(bit << k for k, bit in enumerate(row))
            else:
                first = start + (seq_len + n) * i + seq_len if mode == 0 else (b * n + i) * n
                mask[first:first + n] = row
        start += (seq_len + n) * n
    out["tree_mask"] = mask
    return out


def expect_verify(candidates: list, retrive_index: list, next_token: list, next_sibling: list, target: list,
                  num_spec: int, predicts: list) -> dict:
    """SGLang's greedy walk over lists ([B][n], target flat [B * n]); predicts: its values before."""
    batch, n = len(candidates), len(candidates[0]) if candidates else 0
    flat = [t for row in target for t in row]
    predicts = list(predicts)
    accept_index, accept_token_num = [], []
    for b in range(batch):
        last = retrive_index[b][0]
        if not 0 <= last < batch * n:
            accept_index.append([-1] * num_spec)
            accept_token_num.append(0)
            continue
        path, current = [last], 0
        for _ in range(1, num_spec):
            current = next_token[b][current]
            found = False
            for _ in range(n):
                if not 0 <= current < n:
                    break
                draft = retrive_index[b][current]
                if candidates[b][current] == flat[last] and 0 <= draft < batch * n:
                    predicts[last] = flat[last]
                    path.append(draft)
                    last, found = draft, True
                    break
                current = next_sibling[b][current]
            if not found:
                break
        predicts[last] = flat[last]
        accept_index.append(path + [-1] * (num_spec - len(path)))
        accept_token_num.append(len(path) - 1)
    # int32 outputs: a token id past int32 wraps as the kernels' stores do.
    predicts = [(p + 2**31) % 2**32 - 2**31 for p in predicts]
    return dict(predicts=predicts, accept_index=accept_index, accept_token_num=accept_token_num)
