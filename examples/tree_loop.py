"""Token-tree speculation on specops' ops, several requests, two KV-cache groups, checked every step.

Each step, for every decoding request (its verified prefix already in the KV cache, its root
token the last bonus token):

    (stand-in drafter)              an EAGLE top-k tree, SGLang's draft layout (parent_list,
                                    selected_index, the draft tokens), computed here in torch
    build_tree_kernel_efficient     positions, the tree mask (QLEN_ONLY) and the retrieve links
    tree_slot_mappings              every tree token's KV slot in both groups, one launch
    (stand-in forward)              each tree token's KV entry (its token and position) written
                                    at those slots in every layer's K and V cache
    (stand-in target)               the target's prediction at every node
    verify_tree_greedy              the accepted path, its length, the bonus token
    tree_compaction_pairs           the accepted path's (source, destination) slots in both groups,
                                    and the next step's seq_lens, one launch
    move_kv_cache_entries           those entries moved in every layer's caches, one launch

All device buffers are allocated once (a graph captured over the step would stay valid): each
step uses the first rows of each. The requests' block-table rows move around the batch
(idx_mapping), requests finish and their blocks are reused. Every op's output is compared with
the same step computed here in plain Python: positions, the mask, the links, the accepted path,
and, after the move, every cache entry of every verified position of every request.

Run: python examples/tree_loop.py [--steps 30] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import random

import torch

import specops

TOPK, DEPTH, NUM_DRAFT = 3, 3, 6  # SGLang's topk, spec steps and draft tokens (root included)
VOCAB = 24
MAX_REQS = 4
BLOCK_SIZES = [16, 4]  # two KV-cache groups (a full-attention and a small-block one)
MAX_SEQ_LEN = 64
NUM_LAYERS = 2
NUM_BLOCKS = [MAX_REQS * (MAX_SEQ_LEN // b) + 1 for b in BLOCK_SIZES]  # block 0 is the null block
QLEN_ONLY = 1


def target(prefix: tuple[int, ...]) -> int:
    """The stand-in target model's greedy next token after prefix."""
    return (prefix[-1] * 7 + (prefix[-2] if len(prefix) > 1 else 3) * 5 + len(prefix)) % VOCAB


def draft_distribution(prefix: tuple[int, ...], seed: int) -> list[tuple[float, int]]:
    """The stand-in drafter's top-k (probability, token) after prefix, most likely first: the
    target's token leads often, so paths are accepted for a few levels."""
    rng = random.Random(hash((prefix, seed)))
    tokens = rng.sample(range(VOCAB), TOPK)
    if rng.random() < 0.7 and target(prefix) not in tokens:
        tokens[0] = target(prefix)
    probs = sorted((rng.uniform(0.05, 0.95) for _ in range(TOPK)), reverse=True)
    return list(zip(probs, tokens))


@dataclasses.dataclass
class DraftTree:
    """SGLang's organized draft results of one request, with each node's path kept here."""
    parent_list: list[int]  # [TOPK * (DEPTH - 1) + 1]
    selected_index: list[int]  # [NUM_DRAFT - 1], sorted
    paths: list[tuple[int, ...]]  # node n's draft tokens after the root (node 0: ())


def draft_tree(prefix: tuple[int, ...], seed: int) -> DraftTree:
    """EAGLE's top-k expansion for DEPTH steps, then the NUM_DRAFT - 1 best candidates
    (SGLang's select_top_k_tokens and organize_draft_results, restated)."""
    first = draft_distribution(prefix, seed)
    scores = torch.tensor([p for p, _ in first], dtype=torch.float64)
    entry_paths = [(token,) for _, token in first]  # the score list's entries, in its order
    entry_scores = list(scores)
    current = list(entry_paths)  # the TOPK nodes expanded next
    parents = [[-1] + list(range(TOPK))]
    for step in range(1, DEPTH):
        children = [draft_distribution(prefix + path, seed) for path in current]
        expanded = scores[:, None] * torch.tensor([[p for p, _ in c] for c in children], dtype=torch.float64)
        chosen = torch.topk(expanded.flatten(), TOPK).indices.tolist()
        offset = TOPK * TOPK * (step - 1) + TOPK
        step_paths = [current[c] + (tok,) for c, row in enumerate(children) for _, tok in row]
        entry_paths += step_paths
        entry_scores += list(expanded.flatten())
        parents.append([offset + k for k in chosen])
        current = [step_paths[k] for k in chosen]
        scores = expanded.flatten()[chosen]
    selected = sorted(torch.topk(torch.tensor(entry_scores), NUM_DRAFT - 1).indices.tolist())
    parent_list = [p for row in parents[:-1] for p in row]
    return DraftTree(parent_list, selected, [()] + [entry_paths[k] for k in selected])


@dataclasses.dataclass
class Request:
    row: int  # its block-table row
    tokens: list[int]  # verified tokens (KV written), then the root (the last bonus token)
    target_len: int
    blocks: list[list[int]] = dataclasses.field(default_factory=lambda: [[] for _ in BLOCK_SIZES])

    @property
    def verified(self) -> int:
        return len(self.tokens) - 1


def slot(request: Request, group: int, position: int) -> int:
    size = BLOCK_SIZES[group]
    return request.blocks[group][position // size] * size + position % size


class Loop:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.seed = seed
        self.requests: list[Request] = []
        self.free = [list(range(1, n)) for n in NUM_BLOCKS]
        self.counts = {"steps": 0, "accepted": 0, "moved": 0, "finished": 0}
        bs, n, steps = MAX_REQS, NUM_DRAFT, DEPTH + 1
        self.block_tables = [torch.zeros(MAX_REQS, MAX_SEQ_LEN // b, dtype=torch.int32) for b in BLOCK_SIZES]
        self.tree_mask = torch.ones(bs * n * n, dtype=torch.bool)
        self.positions = torch.zeros(bs * n, dtype=torch.int64)
        self.retrive = torch.full((3, bs, n), -1, dtype=torch.int64)
        self.slot_mappings = [torch.zeros(bs * n, dtype=torch.int64) for _ in BLOCK_SIZES]
        self.predicts = torch.zeros(bs * n, dtype=torch.int32)
        self.accept_index = torch.full((bs, steps), -1, dtype=torch.int32)
        self.accept_token_num = torch.zeros(bs, dtype=torch.int32)
        self.src_slots = torch.zeros(len(BLOCK_SIZES), bs * steps, dtype=torch.int64)
        self.dst_slots = torch.zeros(len(BLOCK_SIZES), bs * steps, dtype=torch.int64)
        self.next_seq_lens = torch.zeros(bs, dtype=torch.int32)
        # Every layer's K and V cache of each group: an entry holds (token, position).
        self.caches = [torch.full((NUM_BLOCKS[g], BLOCK_SIZES[g], 1, 2), -1.0)
                       for _ in range(NUM_LAYERS) for g in range(len(BLOCK_SIZES)) for _kv in range(2)]
        self.cache_groups = [g for _ in range(NUM_LAYERS) for g in range(len(BLOCK_SIZES)) for _kv in range(2)]

    # ------------------------------------------------------------------ host side

    def _grow(self, request: Request, num_positions: int) -> None:
        for g, size in enumerate(BLOCK_SIZES):
            while len(request.blocks[g]) * size < num_positions:
                request.blocks[g].append(self.free[g].pop(self.rng.randrange(len(self.free[g]))))
            self.block_tables[g][request.row, : len(request.blocks[g])] = torch.tensor(request.blocks[g])

    def _write_entry(self, request: Request, position: int, token: int) -> None:
        """The stand-in prefill's KV write of one token."""
        for cache, g in zip(self.caches, self.cache_groups):
            cache.view(-1, 1, 2)[slot(request, g, position)] = torch.tensor([[token, position]], dtype=cache.dtype)

    def _admit_and_retire(self) -> None:
        for request in [r for r in self.requests if r.verified >= r.target_len]:
            self.requests.remove(request)
            for g in range(len(BLOCK_SIZES)):
                self.free[g] += request.blocks[g]
            self.counts["finished"] += 1
        rows = sorted(set(range(MAX_REQS)) - {r.row for r in self.requests})
        while rows and self.rng.random() < 0.6:
            prompt = [self.rng.randrange(VOCAB) for _ in range(self.rng.randint(1, 20))]
            request = Request(rows.pop(self.rng.randrange(len(rows))), prompt + [target(tuple(prompt))],
                              self.rng.randint(len(prompt) + 1, MAX_SEQ_LEN - NUM_DRAFT - DEPTH - 1))
            self._grow(request, len(prompt))
            for position, token in enumerate(prompt):
                self._write_entry(request, position, token)
            self.requests.append(request)

    # ------------------------------------------------------------------ one step

    def step(self) -> None:
        self._admit_and_retire()
        batch = list(self.requests)
        self.rng.shuffle(batch)
        if not batch:
            return
        bs, n = len(batch), NUM_DRAFT
        trees = [draft_tree(tuple(r.tokens), self.seed + self.counts["steps"]) for r in batch]
        for request in batch:
            self._grow(request, request.verified + n)
        parent_list = torch.tensor([t.parent_list for t in trees], dtype=torch.int64).reshape(bs, -1)
        selected_index = torch.tensor([t.selected_index for t in trees], dtype=torch.int64)
        verified_seq_len = torch.tensor([r.verified for r in batch], dtype=torch.int64)
        idx_mapping = torch.tensor([r.row for r in batch], dtype=torch.int32)
        candidates = torch.tensor([[r.tokens[-1]] + [t.paths[i][-1] for i in range(1, n)]
                                   for r, t in zip(batch, trees)], dtype=torch.int64)

        tree_mask, positions = self.tree_mask[: bs * n * n], self.positions[: bs * n]
        retrive_index, next_token, next_sibling = self.retrive[:, :bs]
        tree_mask.fill_(True)  # SGLang's caller fills a QLEN_ONLY mask before the build
        self.retrive[:, :bs].fill_(-1)
        specops.build_tree_kernel_efficient(parent_list, selected_index, verified_seq_len, tree_mask, positions,
                                            retrive_index, next_token, next_sibling, topk=TOPK, depth=DEPTH,
                                            draft_token_num=n, tree_mask_mode=QLEN_ONLY)
        slot_mappings = specops.tree_slot_mappings(verified_seq_len, self.block_tables, BLOCK_SIZES, n,
                                                   idx_mapping=idx_mapping,
                                                   slot_mappings=[s[: bs * n] for s in self.slot_mappings])
        self._check_tree(batch, trees, tree_mask, positions, retrive_index, next_token, next_sibling, slot_mappings)

        # The stand-in forward: each tree token's KV (its token, its position) at its tree slot.
        entries = torch.stack([candidates.flatten().to(torch.float32), positions.to(torch.float32)], 1)
        for cache, g in zip(self.caches, self.cache_groups):
            cache.view(-1, 1, 2).index_copy_(0, slot_mappings[g], entries[:, None])
        target_predict = torch.tensor([[target(tuple(r.tokens) + t.paths[i]) for i in range(n)]
                                       for r, t in zip(batch, trees)], dtype=torch.int64)

        predicts, accept_index = self.predicts[: bs * n], self.accept_index[:bs]
        accept_token_num = self.accept_token_num[:bs]
        accept_index.fill_(-1)
        specops.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, retrive_index, next_token,
                                   next_sibling, target_predict)
        paths = self._check_verify(batch, trees, predicts, accept_index, accept_token_num)

        steps = DEPTH + 1
        src, dst = self.src_slots[:, : bs * steps], self.dst_slots[:, : bs * steps]
        specops.tree_compaction_pairs(accept_index, accept_token_num, verified_seq_len, self.block_tables,
                                      BLOCK_SIZES, n, idx_mapping=idx_mapping, src_slots=src, dst_slots=dst,
                                      next_seq_lens=self.next_seq_lens[:bs])
        specops.move_kv_cache_entries(src, dst, self.caches, self.cache_groups)
        self.counts["moved"] += int((src[0] >= 0).sum())

        for r, (request, tree, path) in enumerate(zip(batch, trees, paths)):
            bonus = target(tuple(request.tokens) + tree.paths[path[-1]])
            request.tokens += [tree.paths[i][-1] for i in path[1:]] + [bonus]
            assert int(self.next_seq_lens[r]) == request.verified, "next_seq_lens"
            self.counts["accepted"] += len(path) - 1
        self._check_caches(batch)
        self.counts["steps"] += 1

    # ------------------------------------------------------------------ the ground truth

    def _check_tree(self, batch, trees, tree_mask, positions, retrive_index, next_token, next_sibling,
                    slot_mappings) -> None:
        n = NUM_DRAFT
        for r, (request, tree) in enumerate(zip(batch, trees)):
            depths = [len(p) for p in tree.paths]
            assert positions[r * n: (r + 1) * n].tolist() == [request.verified + d for d in depths], "positions"
            assert retrive_index[r].tolist() == list(range(r * n, (r + 1) * n)), "retrive_index"
            for i, path in enumerate(tree.paths):
                ancestors = {a for a, other in enumerate(tree.paths) if path[: len(other)] == other}
                row = tree_mask[(r * n + i) * n: (r * n + i + 1) * n].tolist()
                assert row == [a in ancestors for a in range(n)], f"tree_mask of node {i}"
                children = [c for c, other in enumerate(tree.paths) if len(other) == len(path) + 1
                            and other[: len(path)] == path]
                linked, c = [], int(next_token[r, i])
                while c != -1:
                    linked.append(c)
                    c = int(next_sibling[r, c])
                assert linked == children, f"the links of node {i}"
                for g in range(len(BLOCK_SIZES)):
                    assert int(slot_mappings[g][r * n + i]) == slot(request, g, request.verified + i), "slots"

    def _check_verify(self, batch, trees, predicts, accept_index, accept_token_num) -> list[list[int]]:
        n, paths = NUM_DRAFT, []
        for r, (request, tree) in enumerate(zip(batch, trees)):
            path = [0]
            while True:
                want = target(tuple(request.tokens) + tree.paths[path[-1]])
                match = [c for c, p in enumerate(tree.paths) if p == tree.paths[path[-1]] + (want,)]
                if not match:
                    break
                path.append(match[0])
            assert int(accept_token_num[r]) == len(path) - 1, "accept_token_num"
            assert accept_index[r].tolist() == [r * n + i for i in path] + [-1] * (DEPTH + 1 - len(path)), \
                "accept_index"
            for i in path:
                assert int(predicts[r * n + i]) == target(tuple(request.tokens) + tree.paths[i]), "predicts"
            paths.append(path)
        return paths

    def _check_caches(self, batch) -> None:
        """Every verified position of every request holds its token's entry, in every cache."""
        for request in batch:
            for cache, g in zip(self.caches, self.cache_groups):
                flat = cache.view(-1, 2)
                for position in range(request.verified):
                    got = flat[slot(request, g, position)].tolist()
                    assert got == [request.tokens[position], position], \
                        f"group {g}, position {position}: {got}, expected {[request.tokens[position], position]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    loop = Loop(args.seed)
    for _ in range(args.steps):
        loop.step()
    print(f"{loop.counts['steps']} steps clean: {loop.counts['accepted']} drafts accepted, "
          f"{loop.counts['moved']} KV entries moved per cache of group 0, {loop.counts['finished']} requests done")


if __name__ == "__main__":
    main()
