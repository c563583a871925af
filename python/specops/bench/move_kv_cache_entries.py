"""Benchmark of move_kv_cache_entries: the accepted tree paths' KV moved in every cache of a model
(K and V of every layer of every KV-cache group) in one call, against the per-cache torch loop a
runner writes (the pairs of each group filtered once, then index_copy_ per cache). The launches
of a step come with the timings: specops launches once whatever the caches; the loop launches two
aten ops per cache and its filtering per group (and reads the filtered count back once a group)."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case

BLOCK_SIZE = 16
HEADS, HEAD_DIM = 1, 128  # one KV head a cache keeps the host's memory in bounds at 360 caches
DEPTH = 4  # accepted tokens a request moves at most (pairs where a token's slot changes)
# (layers, groups, requests): a small model and a 60-layer one with three KV-cache groups.
SHAPES = [(4, 1, 8), (60, 3, 8), (60, 3, 64)]
QUICK_SHAPES = [(2, 1, 4), (4, 3, 8)]


def make_pairs(num_groups: int, num_reqs: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """[G, R * DEPTH] pairs: request r's accepted tokens move from the tree slots of a path
    (1, 3, 5, 7 past its prefix) to the slots right after it; a third of the envelope is PAD."""
    blocks_per_req = 4
    src, dst = [], []
    for r in range(num_reqs):
        prefix = r * blocks_per_req * BLOCK_SIZE + 20
        for d in range(DEPTH):
            moved = (r + d) % 3 != 0
            src.append(prefix + 2 * d + 1 if moved else -1)
            dst.append(prefix + d if moved else -1)
    row = torch.tensor(src, dtype=torch.int32)
    rows = torch.stack([row] * num_groups), torch.stack([torch.tensor(dst, dtype=torch.int32)] * num_groups)
    return rows[0].to(device), rows[1].to(device), num_reqs * blocks_per_req


def make_case(num_layers: int, num_groups: int, num_reqs: int, device: torch.device) -> Case:
    src, dst, num_blocks = make_pairs(num_groups, num_reqs, device)
    caches, groups = [], []
    for g in range(num_groups):
        for _ in range(num_layers):
            kv = torch.randn(2, num_blocks, BLOCK_SIZE, HEADS, HEAD_DIM, device=device).to(torch.bfloat16)
            caches += [kv[0], kv[1]]
            groups += [g, g]

    def torch_loop():
        for g in range(num_groups):
            keep = src[g] >= 0
            moved_from, moved_to = src[g][keep].long(), dst[g][keep].long()  # a host read of the count
            for cache, group in zip(caches, groups):
                if group == g:
                    flat = cache.view(-1, HEADS * HEAD_DIM)
                    flat.index_copy_(0, moved_to, flat.index_select(0, moved_from))

    impls = {
        "specops": lambda: specops.move_kv_cache_entries(src, dst, caches, cache_groups=groups),
        "torch-eager": torch_loop,
    }
    extras = {"caches": float(len(caches))}  # the launches of each implementation: the harness counts them
    return Case("move_kv_cache_entries", f"L={num_layers} G={num_groups} R={num_reqs}", num_reqs, num_reqs * DEPTH,
                impls, baselines=("torch-eager",), extras=extras, family=f"L={num_layers} G={num_groups}")


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [make_case(*shape, device) for shape in (QUICK_SHAPES if quick else SHAPES)]
