"""Benchmark of gather_block_tables against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case, empty_op_call

# (requests in the batch, block-table columns): decode batches at 4K and 64K context of
# 128-token blocks.
# (requests, columns, sliding window): the window cases mask the entries below a 1K-token window.
SHAPES = [(8, 32, False), (256, 32, False), (256, 512, False), (1024, 32, False), (256, 32, True), (256, 512, True)]
QUICK_SHAPES = [(8, 32, False), (64, 32, False), (64, 32, True)]
MAX_NUM_REQS = 1024
PADDING = 8
BLOCK_SIZE = 128
WINDOW_REACH = 1024


def numpy_gather(src: np.ndarray, num_blocks: np.ndarray, idx_mapping: np.ndarray, out: np.ndarray,
                 num_reqs_padded: int, first_positions: np.ndarray | None = None) -> None:
    """Vectorized numpy, as a runner builds the batch table on the host."""
    num_reqs = idx_mapping.shape[0]
    valid = idx_mapping >= 0
    rows = np.where(valid, idx_mapping, 0)
    counts = np.where(valid, num_blocks[rows], 0)
    columns = np.arange(out.shape[1])
    keep = columns < counts[:, None]
    if first_positions is not None:
        keep &= columns >= (np.maximum(first_positions[rows] - WINDOW_REACH, 0) // BLOCK_SIZE)[:, None]
    out[:num_reqs] = np.where(keep, src[rows], 0)
    out[num_reqs:num_reqs_padded] = 0


def torch_gather(src: torch.Tensor, num_blocks: torch.Tensor, idx_mapping: torch.Tensor, out: torch.Tensor,
                 num_reqs_padded: int, first_positions: torch.Tensor | None = None) -> None:
    """The same composition of torch eager ops."""
    num_reqs = idx_mapping.numel()
    valid = idx_mapping >= 0
    rows = torch.where(valid, idx_mapping, 0)
    counts = torch.where(valid, num_blocks[rows], 0)
    columns = torch.arange(out.size(1), device=out.device)
    keep = columns < counts[:, None]
    if first_positions is not None:
        keep &= columns >= ((first_positions[rows] - WINDOW_REACH).clamp(min=0) // BLOCK_SIZE)[:, None]
    out[:num_reqs] = torch.where(keep, src[rows], 0)
    out[num_reqs:num_reqs_padded] = 0


def make_source(num_reqs: int, cols: int, device: torch.device, seed: int = 0):
    """A full request-indexed table, random counts, and a batch of distinct rows."""
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(1, 1 << 20, (MAX_NUM_REQS, cols), dtype=torch.int32, generator=generator)
    num_blocks = torch.randint(1, cols + 1, (MAX_NUM_REQS,), dtype=torch.int32, generator=generator)
    idx_mapping = torch.randperm(MAX_NUM_REQS, generator=generator)[:num_reqs].to(torch.int32)
    return src.to(device), num_blocks.to(device), idx_mapping.to(device)


def make_case(num_reqs: int, cols: int, window: bool, device: torch.device) -> Case:
    src, num_blocks, idx_mapping = make_source(num_reqs, cols, device)
    padded = min(MAX_NUM_REQS, num_reqs + PADDING)
    out = torch.empty(MAX_NUM_REQS, cols, dtype=torch.int32, device=device)
    np_src, np_counts, np_idx = (t.cpu().numpy() for t in (src, num_blocks, idx_mapping))
    np_out = np.empty((MAX_NUM_REQS, cols), dtype=np.int32)
    first_positions = np_first = None
    masking = {}
    if window:  # each request's first position somewhere in its blocks
        first_positions = (num_blocks.cpu().long() * BLOCK_SIZE * 3 // 4).to(torch.int32).to(device)
        np_first = first_positions.cpu().numpy()
        masking = dict(num_computed_tokens=first_positions, sliding_window_reach=WINDOW_REACH, block_size=BLOCK_SIZE)
    impls = {
        "specops": lambda: specops.gather_block_tables(src, num_blocks, idx_mapping, out, num_reqs_padded=padded,
                                                       **masking),
        "numpy": lambda: numpy_gather(np_src, np_counts, np_idx, np_out, padded, np_first),
        "torch-eager": lambda: torch_gather(src, num_blocks, idx_mapping, out, padded, first_positions),
        "empty-op": empty_op_call(device),
    }
    label = f"R={num_reqs} cols={cols}" + (" window" if window else "")
    return Case("gather_block_tables", label, num_reqs, 0, impls, floors=("empty-op",),
                family=f"cols={cols}" + (" window" if window else ""))


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [make_case(num_reqs, cols, window, device) for num_reqs, cols, window in (QUICK_SHAPES if quick else SHAPES)]
