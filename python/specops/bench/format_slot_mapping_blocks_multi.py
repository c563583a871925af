"""Benchmark of format_slot_mapping_blocks_multi: every group's slot mapping in one call, against
one format_slot_mapping_blocks call per group and what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.format_slot_mapping_blocks import numpy_format, torch_format

# (requests, tokens per request, groups); the groups' storage block sizes cycle through these.
SHAPES = [(8, 2, 4), (64, 8, 4), (256, 8, 8)]
QUICK_SHAPES = [(8, 2, 2)]
BLOCK_SIZES = (128, 32, 64, 96)


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len, num_groups in QUICK_SHAPES if quick else SHAPES:
        num_tokens = num_reqs * query_len
        generator = torch.Generator().manual_seed(num_groups)
        slots = [torch.randint(0, 1 << 27, (num_tokens,), generator=generator).to(device) for _ in range(num_groups)]
        block_sizes = [BLOCK_SIZES[g % len(BLOCK_SIZES)] for g in range(num_groups)]
        out = [torch.empty(num_tokens, 2, dtype=torch.int64, device=device) for _ in range(num_groups)]
        np_slots = [s.cpu().numpy() for s in slots]
        np_out = [np.empty((num_tokens, 2), dtype=np.int64) for _ in range(num_groups)]

        def single_ops(slots=slots, block_sizes=block_sizes, out=out):
            for s, b, o in zip(slots, block_sizes, out):
                specops.format_slot_mapping_blocks(s, b, out=o)

        def numpy_groups(slots=np_slots, block_sizes=block_sizes, out=np_out):
            for s, b, o in zip(slots, block_sizes, out):
                numpy_format(s, b, o)

        impls = {
            "specops": lambda s=slots, b=block_sizes, o=out, n=num_tokens: specops.format_slot_mapping_blocks_multi(
                s, b, num_slots=n, out=o),
            "single ops": single_ops,
            "numpy": numpy_groups,
            "torch-eager": lambda s=slots, b=block_sizes: [torch_format(x, y) for x, y in zip(s, b)],
        }
        result.append(Case("format_slot_mapping_blocks_multi", f"R={num_reqs} q={query_len} G={num_groups}",
                           num_reqs, num_tokens, impls, baselines=("single ops", "numpy", "torch-eager"),
                           family=f"q={query_len}"))
    return result
