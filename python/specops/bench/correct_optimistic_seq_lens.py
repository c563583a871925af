"""Benchmark of correct_optimistic_seq_lens (a host op) against numpy and torch eager."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.correct_num_computed_tokens import QUICK_SHAPES, SHAPES
from specops.bench.workload import make_bench_step


def numpy_correct_seq_lens(seq_lens: np.ndarray, prev_positions: np.ndarray, valid: np.ndarray,
                           drafts: np.ndarray) -> None:
    num_rows = prev_positions.shape[0]
    limit = min(valid.shape[0], drafts.shape[0])
    in_range = (prev_positions >= 0) & (prev_positions < limit)
    rows = np.where(in_range, prev_positions, 0)
    continues = in_range & (drafts[rows] > 0)
    seq_lens[:num_rows] -= np.where(continues, drafts[rows] + 1 - valid[rows], 0)


def torch_correct_seq_lens(seq_lens: torch.Tensor, prev_positions: torch.Tensor, valid: torch.Tensor,
                           drafts: torch.Tensor) -> None:
    num_rows = prev_positions.numel()
    limit = min(valid.numel(), drafts.numel())
    in_range = (prev_positions >= 0) & (prev_positions < limit)
    rows = torch.where(in_range, prev_positions, 0).long()
    continues = in_range & (drafts[rows] > 0)
    seq_lens[:num_rows] -= torch.where(continues, drafts[rows] + 1 - valid[rows], 0)


def _impls(num_reqs: int, query_len: int) -> dict:
    # A host op: its inputs are on the host whatever the device.
    step = make_bench_step(num_reqs, query_len, block_sizes=[])
    pristine = step.cpu_num_computed_tokens + query_len
    seq_lens = pristine.clone()
    args = (step.prev_positions, step.valid_sampled_token_count, step.prev_num_draft_tokens)
    np_pristine = pristine.numpy()
    np_seq_lens = np_pristine.copy()
    np_args = [t.numpy() for t in args]

    def specops_impl():
        seq_lens.copy_(pristine)  # every call corrects the same optimistic seq_lens
        specops.correct_optimistic_seq_lens(seq_lens, *args)

    def numpy_impl():
        np.copyto(np_seq_lens, np_pristine)
        numpy_correct_seq_lens(np_seq_lens, *np_args)

    def torch_impl():
        seq_lens.copy_(pristine)
        torch_correct_seq_lens(seq_lens, *args)

    return {"specops": specops_impl, "numpy": numpy_impl, "torch-eager": torch_impl,
            "restore": lambda: seq_lens.copy_(pristine)}


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [
        Case("correct_optimistic_seq_lens", f"R={num_reqs} q={query_len}", num_reqs, num_reqs * query_len,
             _impls(num_reqs, query_len), floors=("restore",))
        for num_reqs, query_len in (QUICK_SHAPES if quick else SHAPES)
    ]
