"""Benchmark of pcp_gathered_slot_mappings: three KV-cache groups in one launch, against one call
per group and vLLM's torch composition (index_select over the stacked groups, then where)."""

from __future__ import annotations

import time

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.pcp_partition import batch

SHAPES = [(8, 2), (64, 4), (256, 8)]
QUICK_SHAPES = [(8, 2)]
NUM_GROUPS = 3


def torch_gathered(stacked: torch.Tensor, gather: torch.Tensor, mask: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.unsqueeze(0), torch.index_select(stacked, 1, gather), pad)


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, world in QUICK_SHAPES if quick else SHAPES:
        q, c, f = batch(num_reqs, num_reqs + world)
        lay = specops.pcp_partition(q, c, f, world, shard_decode_requests=True)
        moved = lay.copy_to(device)
        total = int(q.sum())
        generator = torch.Generator().manual_seed(num_reqs)
        stacked = torch.randint(0, 1 << 30, (NUM_GROUPS, total), generator=generator).to(device)
        slots = list(stacked.unbind(0))
        out = [torch.empty(moved.padded_gather_idx.numel(), dtype=torch.int64, device=device)
               for _ in range(NUM_GROUPS)]
        pad = torch.tensor(specops.PAD_SLOT_ID, dtype=torch.int64, device=device)
        gather, mask = moved.padded_gather_idx, moved.gathered_kv_write_mask

        def per_group(slots=slots, gather=gather, mask=mask, out=out):
            for s, o in zip(slots, out):
                specops.pcp_gathered_slot_mappings([s], gather, mask, out=[o])

        np_slots, np_gather, np_mask = stacked.cpu().numpy(), gather.cpu().numpy(), mask.cpu().numpy()
        impls = {
            "specops": lambda slots=slots, gather=gather, mask=mask, out=out: specops.pcp_gathered_slot_mappings(
                slots, gather, mask, out=out),
            "one call per group": per_group,
            "torch-eager": lambda stacked=stacked, gather=gather, mask=mask, pad=pad: torch_gathered(
                stacked, gather, mask, pad),
            "numpy": lambda s=np_slots, g=np_gather, m=np_mask: np.where(m[None, :], s[:, g], -1),
        }
        result.append(Case("pcp_gathered_slot_mappings", f"R={num_reqs} P={world} G={NUM_GROUPS}", num_reqs,
                           moved.padded_gather_idx.numel(), impls,
                           baselines=("one call per group", "numpy", "torch-eager"), family=f"G={NUM_GROUPS}",
                           clock=time.thread_time if device.type == "cpu" else time.perf_counter))
    return result
