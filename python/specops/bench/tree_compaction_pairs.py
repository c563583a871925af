"""Benchmark of tree_compaction_pairs: every KV-cache group's moves of the accepted tree paths and
the next step's seq_lens in one call, against the torch composition a runner would otherwise write
(the accepted nodes' positions once, then per group two gathers, the slot arithmetic and the
PAD where nothing moves)."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case
from specops.bench.tree_slot_mappings import BLOCK_SIZES, make_inputs

PAD = specops.PAD_SLOT_ID
# (requests, draft tokens per tree, accept_index columns, groups)
SHAPES = [(8, 16, 6, 1), (8, 16, 6, 3), (64, 32, 8, 2), (256, 16, 6, 3), (256, 64, 8, 3)]
QUICK_SHAPES = [(8, 16, 6, 2), (64, 32, 8, 3)]


def make_verify_output(num_reqs: int, draft_token_num: int, num_steps: int, seed: int = 0):
    """accept_index and accept_token_num as SGLang's verify_tree_greedy writes them: a random path
    of increasing tree indices from the root, -1 past it."""
    generator = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, num_steps, (num_reqs,), generator=generator)
    index = torch.full((num_reqs, num_steps), -1, dtype=torch.int32)
    for r in range(num_reqs):
        count = int(counts[r])
        path = [0] + sorted((torch.randperm(draft_token_num - 1, generator=generator)[:count] + 1).tolist())
        index[r, :count + 1] = torch.tensor(path, dtype=torch.int32) + r * draft_token_num
    return index, counts.to(torch.int32)


def torch_compaction_pairs(accept_index, accept_token_num, verified, tables, block_sizes, idx_mapping,
                           draft_token_num, src_slots, dst_slots, next_seq_lens) -> None:
    """The runner's composition: the accepted nodes' tree and final positions once, then per group
    the two slots and PAD where they are the same or the node is not accepted."""
    num_reqs, num_steps = accept_index.shape
    j = torch.arange(num_steps, device=accept_index.device)
    accepted = j[None, :] <= accept_token_num[:, None].long()
    first = (torch.arange(num_reqs, device=accept_index.device) * draft_token_num)[:, None]
    base = verified[:, None]
    source = base + (accept_index.long() - first).clamp(min=0)
    destination = base + j[None, :]
    rows = idx_mapping.long()[:, None]
    for g, (table, block_size) in enumerate(zip(tables, block_sizes)):
        src = table[rows, source // block_size].long() * block_size + source % block_size
        dst = table[rows, destination // block_size].long() * block_size + destination % block_size
        moved = accepted & (src != dst)
        src_slots[g].copy_(src.where(moved, PAD).view(-1))
        dst_slots[g].copy_(dst.where(moved, PAD).view(-1))
    next_seq_lens.copy_(verified + accept_token_num + 1)


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, draft_token_num, num_steps, num_groups in QUICK_SHAPES if quick else SHAPES:
        verified, tables, idx_mapping = make_inputs(num_reqs, draft_token_num, num_groups, device)
        accept_index, counts = (t.to(device) for t in make_verify_output(num_reqs, draft_token_num, num_steps))
        block_sizes = list(BLOCK_SIZES[:num_groups])
        src = torch.empty(num_groups, num_reqs * num_steps, dtype=torch.int64, device=device)
        dst = torch.empty_like(src)
        next_seq_lens = torch.empty_like(verified)
        args = (accept_index, counts, verified, tables)
        impls = {
            "specops": lambda a=args, b=block_sizes, i=idx_mapping, d=draft_token_num, s=src, t=dst, n=next_seq_lens:
                specops.tree_compaction_pairs(*a, b, d, idx_mapping=i, src_slots=s, dst_slots=t, next_seq_lens=n),
            "torch-eager": lambda a=args, b=block_sizes, i=idx_mapping, d=draft_token_num, s=src, t=dst, n=next_seq_lens:
                torch_compaction_pairs(*a, b, i, d, s, t, n),
        }
        result.append(Case("tree_compaction_pairs", f"R={num_reqs} D={draft_token_num} S={num_steps} G={num_groups}",
                           num_reqs, num_reqs * num_steps, impls, baselines=("torch-eager",),
                           family=f"G={num_groups}"))
    return result
