"""Benchmark of dspark_swa_indices against what a runner would otherwise write: the full table,
then this rank's slice of it."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.workload import make_bench_batch

BLOCK_SIZE = 128
WINDOW = 128
NUM_SPECULATIVE_TOKENS = 3
SHAPES = [(8, 4), (256, 4), (1024, 4)]
QUICK_SHAPES = [(8, 4), (64, 4)]


def numpy_dspark(block_table: np.ndarray, query_start_loc: np.ndarray, seq_lens: np.ndarray, width: int,
                 num_tokens_pad: int, local_start: int, local_end: int) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized numpy: every request's row, every token's row, padded, then the slice."""
    query_lens = np.diff(query_start_loc)
    start = np.maximum(seq_lens - query_lens - WINDOW, 0)
    visible = np.minimum(seq_lens - start, width)
    positions = start[:, None] + np.arange(width)[None, :]
    valid = np.arange(width)[None, :] < visible[:, None]
    columns = np.minimum(positions // BLOCK_SIZE, block_table.shape[1] - 1)
    slots = np.take_along_axis(block_table, columns, 1) * BLOCK_SIZE + positions % BLOCK_SIZE
    rows = np.where(valid, slots, -1).astype(np.int32)
    request = np.repeat(np.arange(query_lens.shape[0]), query_lens)
    table = np.full((num_tokens_pad, width), -1, dtype=np.int32)
    lens = np.zeros(num_tokens_pad, dtype=np.int32)
    table[: request.shape[0]] = rows[request]
    lens[: request.shape[0]] = visible[request]
    return table[local_start:local_end, None], lens[local_start:local_end]


def torch_dspark(block_table: torch.Tensor, query_start_loc: torch.Tensor, seq_lens: torch.Tensor, width: int,
                 num_tokens: int, num_tokens_pad: int, local_start: int, local_end: int):
    """The same composition of torch eager ops."""
    query_lens = query_start_loc[1:] - query_start_loc[:-1]
    start = (seq_lens - query_lens - WINDOW).clamp(min=0)
    visible = (seq_lens - start).clamp(max=width)
    entry = torch.arange(width, device=block_table.device)
    positions = start[:, None] + entry[None, :]
    columns = (positions // BLOCK_SIZE).clamp(max=block_table.size(1) - 1).long()
    slots = torch.gather(block_table, 1, columns) * BLOCK_SIZE + positions % BLOCK_SIZE
    rows = torch.where(entry[None, :] < visible[:, None], slots, -1).to(torch.int32)
    request = torch.repeat_interleave(torch.arange(query_lens.numel(), device=block_table.device), query_lens,
                                      output_size=num_tokens)
    table = torch.full((num_tokens_pad, width), -1, dtype=torch.int32, device=block_table.device)
    lens = torch.zeros(num_tokens_pad, dtype=torch.int32, device=block_table.device)
    table[:num_tokens] = rows[request]
    lens[:num_tokens] = visible[request].to(torch.int32)
    return table[local_start:local_end, None], lens[local_start:local_end]


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    width = -(-(WINDOW + NUM_SPECULATIVE_TOKENS) // 128) * 128
    for num_reqs, query_len in QUICK_SHAPES if quick else SHAPES:
        for cp_size in (1, 4):
            batch = make_bench_batch(num_reqs, query_len, block_size=BLOCK_SIZE, device=device)
            num_tokens = batch.num_tokens
            rank = cp_size - 1
            kwargs = dict(window=WINDOW, num_speculative_tokens=NUM_SPECULATIVE_TOKENS, block_size=BLOCK_SIZE,
                          num_tokens=num_tokens, width=width, cp_size=cp_size, cp_rank=rank)
            out, out_lens = specops.dspark_swa_indices(batch.block_table, batch.query_start_loc, batch.seq_lens,
                                                       **kwargs)
            tokens_per_rank = out.size(0)
            split = (tokens_per_rank * cp_size, rank * tokens_per_rank, (rank + 1) * tokens_per_rank)
            np_args = [t.cpu().numpy() for t in (batch.block_table, batch.query_start_loc, batch.seq_lens)]
            impls = {
                "specops": lambda b=batch, k=kwargs, o=out, ol=out_lens: specops.dspark_swa_indices(
                    b.block_table, b.query_start_loc, b.seq_lens, **k, out=o, out_lens=ol),
                "numpy": lambda a=np_args, s=split: numpy_dspark(*a, width, *s),
                "torch-eager": lambda b=batch, n=num_tokens, s=split: torch_dspark(
                    b.block_table, b.query_start_loc, b.seq_lens, width, n, *s),
            }
            result.append(Case("dspark_swa_indices", f"R={num_reqs} q={query_len} C={cp_size}", num_reqs,
                               num_tokens, impls, family=f"C={cp_size}"))
    return result
