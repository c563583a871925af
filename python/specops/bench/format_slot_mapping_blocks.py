"""Benchmark of format_slot_mapping_blocks against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.workload import make_bench_batch

SHAPES = [(8, 1), (256, 4), (1024, 8), (32, 256)]
QUICK_SHAPES = [(8, 1), (64, 4)]


def numpy_format(slot_mapping: np.ndarray, block_size: int, out: np.ndarray) -> None:
    """Vectorized numpy (floor division and modulo, like the op)."""
    np.floor_divide(slot_mapping, block_size, out=out[:, 0])
    np.remainder(slot_mapping, block_size, out=out[:, 1])


def torch_format(slot_mapping: torch.Tensor, block_size: int) -> torch.Tensor:
    """The torch eager composition a runner writes (allocates its result)."""
    return torch.stack((slot_mapping // block_size, slot_mapping % block_size), dim=1)


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len in QUICK_SHAPES if quick else SHAPES:
        for block_size in (128, 96):  # the shift path and the division path
            batch = make_bench_batch(num_reqs, query_len, block_size=block_size, cp_world_size=2, device=device)
            slots = specops.compute_slot_mapping(batch.query_start_loc, batch.positions, batch.block_table,
                                                 block_size, cp_world_size=2, cp_rank=1)
            out = torch.empty(slots.numel(), 2, dtype=torch.int64, device=device)
            np_slots = slots.cpu().numpy()
            np_out = np.empty((np_slots.shape[0], 2), dtype=np.int64)
            impls = {
                "specops": lambda s=slots, o=out, b=block_size: specops.format_slot_mapping_blocks(s, b, out=o),
                "numpy": lambda s=np_slots, o=np_out, b=block_size: numpy_format(s, b, o),
                "torch-eager": lambda s=slots, b=block_size: torch_format(s, b),
            }
            result.append(Case("format_slot_mapping_blocks", f"R={num_reqs} q={query_len} bs={block_size}",
                               num_reqs, batch.num_tokens, impls, family=f"bs={block_size}"))
    return result
