"""Benchmark of cp_local_metadata against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.workload import make_bench_batch

SHAPES = [(8, 1), (256, 4), (1024, 8), (32, 256)]
QUICK_SHAPES = [(8, 1), (64, 4)]
CP_SIZE = 4


def numpy_cp_local_metadata(query_start_loc: np.ndarray, seq_lens: np.ndarray, local_start: int, local_end: int):
    """Vectorized numpy on the host copies, as a runner computes it before copying to the device."""
    local_query_start = np.clip(query_start_loc[:-1], local_start, local_end)
    local_query_end = np.clip(query_start_loc[1:], local_start, local_end)
    local_query_lens = local_query_end - local_query_start
    local_query_start_loc = np.zeros_like(query_start_loc)
    np.cumsum(local_query_lens, out=local_query_start_loc[1:])
    later = query_start_loc[1:] - local_query_end
    local_seq_lens = np.where((local_query_lens > 0) & (seq_lens > 0), np.maximum(seq_lens - later, 0), 0)
    start_pos = seq_lens - (query_start_loc[1:] - query_start_loc[:-1])
    return (local_query_start_loc, local_seq_lens, start_pos,
            max(1, int(local_query_lens.max())), max(1, int(local_seq_lens.max())))


def torch_cp_local_metadata(query_start_loc: torch.Tensor, seq_lens: torch.Tensor, local_start: int, local_end: int):
    """The same composition of torch eager ops, maxima read back as Python ints."""
    local_query_start = query_start_loc[:-1].clamp(local_start, local_end)
    local_query_end = query_start_loc[1:].clamp(local_start, local_end)
    local_query_lens = local_query_end - local_query_start
    local_query_start_loc = torch.nn.functional.pad(torch.cumsum(local_query_lens, 0), (1, 0))
    later = query_start_loc[1:] - local_query_end
    local_seq_lens = torch.where((local_query_lens > 0) & (seq_lens > 0), (seq_lens - later).clamp(min=0), 0)
    start_pos = seq_lens - (query_start_loc[1:] - query_start_loc[:-1])
    return (local_query_start_loc, local_seq_lens, start_pos,
            max(1, int(local_query_lens.max())), max(1, int(local_seq_lens.max())))


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len in QUICK_SHAPES if quick else SHAPES:
        batch = make_bench_batch(num_reqs, query_len, block_size=128, device=device)
        num_tokens = batch.num_tokens
        rank = 1
        meta = specops.cp_local_metadata(batch.query_start_loc, batch.seq_lens, num_tokens, CP_SIZE, rank)
        outputs = dict(local_query_start_loc=meta.local_query_start_loc, local_seq_lens=meta.local_seq_lens,
                       start_pos=meta.start_pos)
        host_copies = {}
        if device.type != "cpu":
            host_copies = dict(query_start_loc_cpu=batch.query_start_loc.cpu(), seq_lens_cpu=batch.seq_lens.cpu())
        np_args = (batch.query_start_loc.cpu().numpy(), batch.seq_lens.cpu().numpy(), meta.local_start, meta.local_end)
        impls = {
            "specops": lambda b=batch, n=num_tokens, o=outputs, h=host_copies: specops.cp_local_metadata(
                b.query_start_loc, b.seq_lens, n, CP_SIZE, rank, **o, **h),
            "numpy": lambda a=np_args: numpy_cp_local_metadata(*a),
            "torch-eager": lambda b=batch, m=meta: torch_cp_local_metadata(
                b.query_start_loc, b.seq_lens, m.local_start, m.local_end),
        }
        result.append(Case("cp_local_metadata", f"R={num_reqs} q={query_len} C={CP_SIZE}", num_reqs, num_tokens,
                           impls, family="decode" if query_len <= 8 else "prefill"))
    return result
