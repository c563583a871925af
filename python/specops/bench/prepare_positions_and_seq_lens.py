"""Benchmark of prepare_positions_and_seq_lens against numpy and torch eager."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.workload import make_bench_step

SHAPES = [(8, 4), (256, 4), (1024, 8), (64, 128)]
QUICK_SHAPES = [(8, 4), (64, 4)]


def numpy_positions(num_computed_tokens: np.ndarray, query_start_loc: np.ndarray, positions: np.ndarray,
                    seq_lens: np.ndarray) -> None:
    num_reqs = query_start_loc.shape[0] - 1
    num_tokens = int(query_start_loc[-1])
    query_lens = np.diff(query_start_loc)
    counts = num_computed_tokens[:num_reqs]
    positions[:num_tokens] = np.repeat(counts - query_start_loc[:-1], query_lens) + np.arange(num_tokens)
    positions[num_tokens:] = 0
    seq_lens[:num_reqs] = counts + query_lens
    seq_lens[num_reqs:] = 0


def torch_positions(num_computed_tokens: torch.Tensor, query_start_loc: torch.Tensor, positions: torch.Tensor,
                    seq_lens: torch.Tensor, num_tokens: int) -> None:
    """num_tokens comes from the host, as in a runner (reading query_start_loc[R] would sync)."""
    num_reqs = query_start_loc.numel() - 1
    query_lens = query_start_loc[1:] - query_start_loc[:-1]
    counts = num_computed_tokens[:num_reqs]
    first = torch.repeat_interleave(counts - query_start_loc[:-1], query_lens, output_size=num_tokens)
    positions[:num_tokens] = first + torch.arange(num_tokens, device=positions.device)
    positions[num_tokens:] = 0
    seq_lens[:num_reqs] = counts + query_lens
    seq_lens[num_reqs:] = 0


def _impls(num_reqs: int, query_len: int, device: torch.device) -> dict:
    step = make_bench_step(num_reqs, query_len, block_sizes=[], device=device)
    num_tokens = step.num_tokens
    counts, query_start_loc = step.num_computed_tokens, step.query_start_loc
    positions = torch.empty(num_tokens, dtype=torch.int64, device=device)
    seq_lens = torch.empty(num_reqs, dtype=torch.int32, device=device)
    np_in = [t.cpu().numpy() for t in (counts, query_start_loc)]
    np_out = [np.empty(num_tokens, dtype=np.int64), np.empty(num_reqs, dtype=np.int32)]
    return {
        "specops": lambda: specops.prepare_positions_and_seq_lens(counts, query_start_loc, positions=positions,
                                                                  seq_lens=seq_lens),
        "numpy": lambda: numpy_positions(*np_in, *np_out),
        "torch-eager": lambda: torch_positions(counts, query_start_loc, positions, seq_lens, num_tokens),
    }


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [
        Case("prepare_positions_and_seq_lens", f"R={num_reqs} q={query_len}", num_reqs, num_reqs * query_len,
             _impls(num_reqs, query_len, device), family="prefill" if query_len > 16 else "decode")
        for num_reqs, query_len in (QUICK_SHAPES if quick else SHAPES)
    ]
