"""Benchmark of compute_slot_mapping against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case, empty_op_call
from specops.bench.workload import make_bench_batch
from specops.reference._slot_math import kv_placement

BLOCK_SIZE = 128
SHAPES = [(8, 1), (256, 4), (256, 8), (1024, 8)]
QUICK_SHAPES = [(8, 1), (64, 4)]


def numpy_slot_mapping(query_start_loc: np.ndarray, positions: np.ndarray, block_table: np.ndarray,
                       block_size: int, world: int, rank: int, interleave: int, out: np.ndarray) -> None:
    """Vectorized numpy, as a runner computes slot mappings on the host."""
    num_tokens = positions.shape[0]
    query_lens = np.diff(query_start_loc)
    request = np.repeat(np.arange(query_lens.shape[0]), query_lens)
    local, virtual_block, local_offset = kv_placement(positions, block_size, world, rank, interleave)
    block_ids = block_table[request, virtual_block + local_offset // block_size]
    out[:num_tokens] = np.where(local, block_ids * block_size + local_offset % block_size, -1)
    out[num_tokens:] = -1


def torch_slot_mapping(query_start_loc: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
                       block_size: int, world: int, rank: int, interleave: int, out: torch.Tensor) -> None:
    """The same composition of torch eager ops."""
    num_tokens = positions.numel()
    query_lens = query_start_loc[1:] - query_start_loc[:-1]
    request = torch.repeat_interleave(torch.arange(query_lens.numel(), device=positions.device), query_lens,
                                      output_size=num_tokens)
    local, virtual_block, local_offset = kv_placement(positions, block_size, world, rank, interleave)
    block_ids = block_table[request, virtual_block + local_offset // block_size]
    out[:num_tokens] = torch.where(local, block_ids * block_size + local_offset % block_size, -1)
    out[num_tokens:] = -1


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len in QUICK_SHAPES if quick else SHAPES:
        for world in (1, 4):
            batch = make_bench_batch(num_reqs, query_len, block_size=BLOCK_SIZE, cp_world_size=world, device=device)
            rank = world - 1
            out = torch.empty(batch.num_tokens, dtype=torch.int64, device=device)
            np_args = [t.cpu().numpy() for t in (batch.query_start_loc, batch.positions, batch.block_table)]
            np_out = np.empty(batch.num_tokens, dtype=np.int64)
            impls = {
                "specops": lambda b=batch, o=out, w=world, r=rank: specops.compute_slot_mapping(
                    b.query_start_loc, b.positions, b.block_table, BLOCK_SIZE, out=o, cp_world_size=w, cp_rank=r),
                "numpy": lambda a=np_args, o=np_out, w=world, r=rank: numpy_slot_mapping(
                    *a, BLOCK_SIZE, w, r, 1, o),
                "torch-eager": lambda b=batch, o=out, w=world, r=rank: torch_slot_mapping(
                    b.query_start_loc, b.positions, b.block_table, BLOCK_SIZE, w, r, 1, o),
                "empty-op": empty_op_call(device),
            }
            result.append(Case("compute_slot_mapping", f"R={num_reqs} q={query_len} W={world}", num_reqs,
                               batch.num_tokens, impls, floors=("empty-op",), family=f"W={world}"))
    return result
