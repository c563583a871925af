"""Benchmark of tree_slot_mappings: every draft-tree token's slot in every KV-cache group in one
call, against the torch composition a runner would otherwise write (the tree's positions once,
then one gather and its slot arithmetic per group)."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case

BLOCK_SIZES = (128, 64, 16)  # full attention, then the smaller blocks of a hybrid model's other groups
CONTEXT = 4096
# (requests, draft tokens per tree, groups)
SHAPES = [(8, 16, 1), (8, 16, 3), (64, 32, 2), (256, 16, 3), (256, 64, 3)]
QUICK_SHAPES = [(8, 16, 2), (64, 32, 3)]


def make_inputs(num_reqs: int, draft_token_num: int, num_groups: int, device: torch.device, seed: int = 0):
    """verified_seq_len, request-indexed tables (distinct block ids per group), idx_mapping."""
    generator = torch.Generator().manual_seed(seed)
    rows = num_reqs + 4
    verified = torch.randint(1, CONTEXT - draft_token_num, (num_reqs,), generator=generator)
    tables = []
    for g in range(num_groups):
        cols = -(-CONTEXT // BLOCK_SIZES[g])
        tables.append(torch.randperm(rows * cols, generator=generator).view(rows, cols).to(torch.int32).to(device))
    idx_mapping = torch.randperm(rows, generator=generator)[:num_reqs].to(torch.int32).to(device)
    return verified.to(device), tables, idx_mapping


def torch_tree_slots(verified: torch.Tensor, tables: list[torch.Tensor], block_sizes: list[int],
                     idx_mapping: torch.Tensor, draft_token_num: int, out: list[torch.Tensor]) -> None:
    """The runner's composition: positions [R, D] once, then per group a gather of the block ids
    and the slot arithmetic, into the group's buffer."""
    positions = verified[:, None] + torch.arange(draft_token_num, device=verified.device)
    rows = idx_mapping.long()[:, None]
    for table, block_size, slots in zip(tables, block_sizes, out):
        block_ids = table[rows, positions // block_size].long()
        slots.copy_((block_ids * block_size + positions % block_size).view(-1))


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, draft_token_num, num_groups in QUICK_SHAPES if quick else SHAPES:
        verified, tables, idx_mapping = make_inputs(num_reqs, draft_token_num, num_groups, device)
        block_sizes = list(BLOCK_SIZES[:num_groups])
        out = [torch.empty(num_reqs * draft_token_num, dtype=torch.int64, device=device) for _ in tables]
        impls = {
            "specops": lambda v=verified, t=tables, b=block_sizes, i=idx_mapping, d=draft_token_num, o=out:
                specops.tree_slot_mappings(v, t, b, d, idx_mapping=i, slot_mappings=o),
            "torch-eager": lambda v=verified, t=tables, b=block_sizes, i=idx_mapping, d=draft_token_num, o=out:
                torch_tree_slots(v, t, b, i, d, o),
        }
        result.append(Case("tree_slot_mappings", f"R={num_reqs} D={draft_token_num} G={num_groups}", num_reqs,
                           num_reqs * draft_token_num, impls, baselines=("torch-eager",), family=f"G={num_groups}"))
    return result
