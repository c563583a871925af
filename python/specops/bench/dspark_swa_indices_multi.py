"""Benchmark of dspark_swa_indices_multi: every DSpark group's indices in one call, against one
dspark_swa_indices call per group and the torch composition a runner would otherwise write."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case
from specops.bench.dspark_swa_indices import torch_dspark
from specops.bench.workload import make_bench_batch

BLOCK_SIZE = 128
WINDOW = 128
NUM_SPECULATIVE_TOKENS = 3
# (requests, tokens per request, DSpark groups)
SHAPES = [(8, 4, 2), (64, 4, 2), (256, 4, 2)]
QUICK_SHAPES = [(8, 4, 2)]


def cases(device: torch.device, quick: bool) -> list[Case]:
    result = []
    width = -(-(WINDOW + NUM_SPECULATIVE_TOKENS) // 128) * 128
    for num_reqs, query_len, num_groups in QUICK_SHAPES if quick else SHAPES:
        batches = [make_bench_batch(num_reqs, query_len, block_size=BLOCK_SIZE, seed=g, device=device)
                   for g in range(num_groups)]
        batch = batches[0]
        tables = [b.block_table for b in batches]
        num_tokens = batch.num_tokens
        kwargs = dict(num_speculative_tokens=NUM_SPECULATIVE_TOKENS, num_tokens=num_tokens)
        out, out_lens = specops.dspark_swa_indices_multi(tables, batch.query_start_loc, batch.seq_lens,
                                                         windows=WINDOW, block_sizes=BLOCK_SIZE, widths=width, **kwargs)

        def single_ops(batch=batch, tables=tables, out=out, out_lens=out_lens, kwargs=kwargs):
            for table, o, ol in zip(tables, out, out_lens):
                specops.dspark_swa_indices(table, batch.query_start_loc, batch.seq_lens, window=WINDOW,
                                           block_size=BLOCK_SIZE, width=width, out=o, out_lens=ol, **kwargs)

        impls = {
            "specops": lambda b=batch, t=tables, o=out, ol=out_lens, k=kwargs: specops.dspark_swa_indices_multi(
                t, b.query_start_loc, b.seq_lens, windows=WINDOW, block_sizes=BLOCK_SIZE, widths=width, out=o,
                out_lens=ol, **k),
            "single ops": single_ops,
            "torch-eager": lambda b=batch, t=tables, n=num_tokens: [
                torch_dspark(table, b.query_start_loc, b.seq_lens, width, n, n, 0, n) for table in t],
        }
        result.append(Case("dspark_swa_indices_multi", f"R={num_reqs} q={query_len} G={num_groups}", num_reqs,
                           num_tokens, impls, baselines=("single ops", "torch-eager"), family=f"G={num_groups}"))
    return result
