"""Benchmark of correct_num_computed_tokens against what a runner would otherwise write."""

from __future__ import annotations

import numpy as np
import torch

import specops
from specops.bench._harness import Case
from specops.bench.workload import BenchStep, make_bench_step

SHAPES = [(8, 4), (256, 4), (1024, 8)]
QUICK_SHAPES = [(8, 4), (64, 4)]


def numpy_correct(num_computed_tokens: np.ndarray, num_accepted_tokens: np.ndarray, prev_positions: np.ndarray,
                  valid: np.ndarray, drafts: np.ndarray, cpu: np.ndarray) -> None:
    """Vectorized numpy: gathers make new arrays, so the stores come after every read."""
    num_rows = prev_positions.shape[0]
    limit = min(valid.shape[0], drafts.shape[0], num_computed_tokens.shape[0])
    in_range = (prev_positions >= 0) & (prev_positions < limit)
    rows = np.where(in_range, prev_positions, 0)
    continues = in_range & (drafts[rows] > 0)
    new_computed = np.where(continues, num_computed_tokens[rows] + valid[rows], cpu[:num_rows])
    num_accepted_tokens[:num_rows] = np.where(continues, valid[rows], num_accepted_tokens[:num_rows])
    num_computed_tokens[:num_rows] = new_computed


def torch_correct(num_computed_tokens: torch.Tensor, num_accepted_tokens: torch.Tensor, prev_positions: torch.Tensor,
                  valid: torch.Tensor, drafts: torch.Tensor, cpu: torch.Tensor) -> None:
    """The same composition of torch eager ops."""
    num_rows = prev_positions.numel()
    limit = min(valid.numel(), drafts.numel(), num_computed_tokens.numel())
    in_range = (prev_positions >= 0) & (prev_positions < limit)
    rows = torch.where(in_range, prev_positions, 0).long()
    continues = in_range & (drafts[rows] > 0)
    new_computed = torch.where(continues, num_computed_tokens[rows] + valid[rows], cpu[:num_rows])
    num_accepted_tokens[:num_rows] = torch.where(continues, valid[rows], num_accepted_tokens[:num_rows])
    num_computed_tokens[:num_rows] = new_computed


def numpy_step(step: BenchStep) -> tuple[list[np.ndarray], np.ndarray]:
    """Host numpy copies of the correction's arguments, and of the pristine counts."""
    return [t.cpu().numpy().copy() for t in step.correction_args()], step.pristine_counts.cpu().numpy()


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    for num_reqs, query_len in QUICK_SHAPES if quick else SHAPES:
        step = make_bench_step(num_reqs, query_len, block_sizes=[], device=device)
        np_args, np_pristine = numpy_step(step)

        def specops_impl(s=step):
            s.restore()
            specops.correct_num_computed_tokens(*s.correction_args())

        def numpy_impl(a=np_args, p=np_pristine):
            np.copyto(a[0], p)
            numpy_correct(*a)

        def torch_impl(s=step):
            s.restore()
            torch_correct(*s.correction_args())

        impls = {"specops": specops_impl, "numpy": numpy_impl, "torch-eager": torch_impl, "restore": step.restore}
        result.append(Case("correct_num_computed_tokens", f"R={num_reqs} q={query_len}", num_reqs, num_reqs * query_len,
                           impls, floors=("restore",)))
    return result
