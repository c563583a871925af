"""Benchmark of apply_staged_writes against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case, empty_op_call

COLS = 512
# (writes, values per write): decode steps append one block to some requests; admitting
# prefills writes a whole row.
SHAPES = [(8, 1), (256, 1), (1024, 1), (32, 64)]
QUICK_SHAPES = [(8, 1), (16, 16)]


def numpy_writes(table: np.ndarray, rows: np.ndarray, starts: np.ndarray, cu_lens: np.ndarray,
                 values: np.ndarray) -> None:
    """Vectorized numpy: every written cell's flat index, one scatter."""
    lens = np.diff(cu_lens)
    write = np.repeat(np.arange(rows.shape[0]), lens)
    column = starts[write] + np.arange(cu_lens[-1]) - cu_lens[write]
    table.reshape(-1)[rows[write] * table.shape[1] + column] = values[: cu_lens[-1]]


def python_rows(table: np.ndarray, rows: list[int], starts: list[int], cu_lens: list[int], values: np.ndarray) -> None:
    """A runner's host block table: one slice assignment per staged row."""
    for k, (row, start) in enumerate(zip(rows, starts)):
        table[row, start : start + cu_lens[k + 1] - cu_lens[k]] = values[cu_lens[k] : cu_lens[k + 1]]


def torch_writes(table: torch.Tensor, rows: torch.Tensor, starts: torch.Tensor, cu_lens: torch.Tensor,
                 values: torch.Tensor, total: int) -> None:
    """The same scatter as torch eager ops (the total is known on the host, as a runner has it)."""
    lens = cu_lens[1:] - cu_lens[:-1]
    write = torch.repeat_interleave(torch.arange(rows.numel(), device=rows.device), lens, output_size=total)
    column = starts[write] + torch.arange(total, device=rows.device) - cu_lens[write]
    table.view(-1)[rows[write] * table.size(1) + column] = values[:total]


def make_writes(num_writes: int, length: int, device: torch.device, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(num_writes * 2, generator=generator)[:num_writes].to(torch.int32)
    starts = torch.randint(0, COLS - length + 1, (num_writes,), dtype=torch.int32, generator=generator)
    cu_lens = torch.arange(num_writes + 1, dtype=torch.int32) * length
    values = torch.randint(1, 1 << 20, (num_writes * length,), dtype=torch.int32, generator=generator)
    return [t.to(device) for t in (rows, starts, cu_lens, values)]


def make_case(num_writes: int, length: int, device: torch.device) -> Case:
    rows, starts, cu_lens, values = make_writes(num_writes, length, device)
    table = torch.zeros(num_writes * 2, COLS, dtype=torch.int32, device=device)
    np_args = [t.cpu().numpy() for t in (rows, starts, cu_lens, values)]
    np_table = np.zeros((num_writes * 2, COLS), dtype=np.int32)
    lists = [t.tolist() for t in (rows, starts, cu_lens)]
    total = num_writes * length
    impls = {
        "specops": lambda: specops.apply_staged_writes(table, rows, starts, cu_lens, values),
        "numpy": lambda: numpy_writes(np_table, *np_args),
        "python-rows": lambda: python_rows(np_table, *lists, np_args[3]),
        "torch-eager": lambda: torch_writes(table, rows, starts, cu_lens, values, total),
        "empty-op": empty_op_call(device),
    }
    return Case("apply_staged_writes", f"K={num_writes} len={length}", num_writes, total, impls,
                baselines=("numpy", "python-rows", "torch-eager"), floors=("empty-op",), family=f"len={length}")


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [make_case(num_writes, length, device) for num_writes, length in (QUICK_SHAPES if quick else SHAPES)]
