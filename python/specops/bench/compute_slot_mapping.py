"""Benchmark of compute_slot_mapping against what a runner would otherwise write.

Besides the decode and prefill shapes, one case holds the op's CP contract, in one run: 1024
requests x 8 tokens, CP W=4 with interleave 16, positions spread over a 64-column table, against
the lean numpy formula (goal: at least 8x faster) and against the same op at W=1 on a table of
the same width (goal: at most 1.2x its time)."""

from __future__ import annotations

import time

import numpy as np
import torch

import specops
from specops.bench._harness import Case, empty_op_call, goal_figure
from specops.bench.workload import make_bench_batch
from specops.slot_math import kv_placement

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


def lean_numpy_slot_mapping(query_start_loc: np.ndarray, positions: np.ndarray, block_table: np.ndarray,
                            block_size: int, world: int, rank: int, interleave: int, out: np.ndarray) -> None:
    """The same formula in the fewest numpy passes: the rank-local position straight from the
    position ((p // (W * I)) * I + p % I, no virtual-block split), one divmod, one flat gather,
    PAD written in place."""
    num_tokens = positions.shape[0]
    request = np.repeat(np.arange(query_start_loc.shape[0] - 1), np.diff(query_start_loc))
    local = (positions // (world * interleave)) * interleave + positions % interleave
    column, offset = np.divmod(local, block_size)
    column += request * block_table.shape[1]
    slots = np.take(block_table, column) * block_size + offset
    slots[(positions // interleave) % world != rank] = -1
    out[:num_tokens] = slots
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


# The CP contract case: (requests, query_len, table columns, interleave) and its goals.
CP_CASE = (1024, 8, 64, 16)
QUICK_CP_CASE = (64, 8, 64, 16)
CP_GOALS = {"lean-numpy/specops": 8.0, "W=4/W=1": 1.2}


def _cp_case(device: torch.device, num_reqs: int, query_len: int, columns: int, interleave: int) -> Case:
    """W=4 with interleave against the lean numpy formula and against W=1; both tables have
    `columns` columns, positions spread over all of them."""
    world, rank = 4, 3
    batches = {w: make_bench_batch(num_reqs, query_len, block_size=BLOCK_SIZE, cp_world_size=w,
                                   max_context=columns * BLOCK_SIZE * w - query_len, device=device)
               for w in (world, 1)}
    cp, single = batches[world], batches[1]
    out = torch.empty(cp.num_tokens, dtype=torch.int64, device=device)
    np_args = [t.cpu().numpy() for t in (cp.query_start_loc, cp.positions, cp.block_table)]
    np_out = np.empty(cp.num_tokens, dtype=np.int64)

    def run_specops(b=cp, w=world, r=rank, i=interleave):
        return specops.compute_slot_mapping(b.query_start_loc, b.positions, b.block_table, BLOCK_SIZE, out=out,
                                            cp_world_size=w, cp_rank=r, cp_interleave=i)

    run_specops()
    lean_numpy_slot_mapping(*np_args, BLOCK_SIZE, world, rank, interleave, np_out)
    if not np.array_equal(out.cpu().numpy(), np_out):
        raise RuntimeError("compute_slot_mapping CP case: specops and the lean numpy formula disagree")

    def derive(medians: dict[str, float]) -> dict[str, float]:
        return dict([goal_figure("lean-numpy/specops", medians["lean-numpy"] / medians["specops"],
                                 CP_GOALS["lean-numpy/specops"], at_least=True),
                     goal_figure("W=4/W=1", medians["specops"] / medians["specops W=1"], CP_GOALS["W=4/W=1"])])

    impls = {
        "specops": run_specops,
        "specops W=1": lambda: run_specops(single, 1, 0, 1),
        "lean-numpy": lambda: lean_numpy_slot_mapping(*np_args, BLOCK_SIZE, world, rank, interleave, np_out),
        "numpy": lambda: numpy_slot_mapping(*np_args, BLOCK_SIZE, world, rank, interleave, np_out),
        "empty-op": empty_op_call(device),
    }
    label = f"R={num_reqs} q={query_len} W={world} I={interleave} {columns} cols"
    return Case("compute_slot_mapping", label, num_reqs, cp.num_tokens, impls, baselines=("lean-numpy", "numpy"),
                floors=("empty-op",), family="CP goal", derive=derive, plotted=("specops", "specops W=1", "lean-numpy"),
                # Host-only, and its figures are ratios of a few µs: the thread's CPU time, which
                # other processes' preemption on a shared host does not inflate.
                clock=time.thread_time)


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = [_cp_case(device, *(QUICK_CP_CASE if quick else CP_CASE))]
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
