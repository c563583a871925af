"""Benchmark of dcp_local_seq_lens against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case

SHAPES = [8, 256, 4096]
QUICK_SHAPES = [8, 64]
WORLD, RANK, INTERLEAVE = 4, 1, 16


def numpy_local_seq_lens(seq_lens: np.ndarray, world: int, rank: int, interleave: int) -> np.ndarray:
    """Vectorized numpy, one rank's column only."""
    base = seq_lens // interleave // world * interleave
    return base + np.clip(seq_lens - base * world - rank * interleave, 0, interleave)


def torch_all_ranks(seq_lens: torch.Tensor, world: int, rank: int, interleave: int) -> torch.Tensor:
    """The torch eager composition a runner writes today: every rank's length ([R, W], as the
    peer helper returns it), then this rank's column."""
    tiled = seq_lens.unsqueeze(-1)
    rank_offsets = torch.arange(world, dtype=seq_lens.dtype, device=seq_lens.device)
    base = tiled // interleave // world * interleave
    return (base + torch.clamp(tiled - base * world - rank_offsets * interleave, 0, interleave))[:, rank]


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs in QUICK_SHAPES if quick else SHAPES:
        generator = torch.Generator().manual_seed(num_reqs)
        seq_lens = torch.randint(1, 1 << 17, (num_reqs,), dtype=torch.int32, generator=generator).to(device)
        out = torch.empty_like(seq_lens)
        np_seq_lens = seq_lens.cpu().numpy()
        args = (WORLD, RANK, INTERLEAVE)
        impls = {
            "specops": lambda s=seq_lens, o=out: specops.dcp_local_seq_lens(s, *args, out=o),
            "numpy": lambda s=np_seq_lens: numpy_local_seq_lens(s, *args),
            "torch-eager": lambda s=seq_lens: torch_all_ranks(s, *args),
        }
        result.append(Case("dcp_local_seq_lens", f"R={num_reqs} W={WORLD} I={INTERLEAVE}", num_reqs, num_reqs,
                           impls))
    return result
