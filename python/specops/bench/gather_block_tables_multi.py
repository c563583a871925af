"""Benchmark of gather_block_tables_multi: every KV-cache group's batch table in one call, against
one gather_block_tables call per group and the torch composition a runner would otherwise write.
Each case's launches (specops ops and aten ops a call makes) come with its timings: one op
launch for up to four groups against G."""

from __future__ import annotations

import torch

import specops
from specops.bench._harness import Case
from specops.bench.gather_block_tables import BLOCK_SIZE, MAX_NUM_REQS, PADDING, WINDOW_REACH, make_source, torch_gather

# (requests, block-table columns, groups): decode batches of a hybrid model, one full-attention
# group and the rest sliding-window ones, at 4K context of 128-token blocks.
SHAPES = [(8, 32, 2), (256, 32, 2), (256, 32, 3), (1024, 32, 3), (256, 32, 6)]
QUICK_SHAPES = [(8, 32, 2), (64, 32, 3)]


def make_case(num_reqs: int, cols: int, num_groups: int, device: torch.device) -> Case:
    sources = [make_source(num_reqs, cols, device, seed=g) for g in range(num_groups)]
    idx_mapping = sources[0][2]
    tables, counts = [src for src, _, _ in sources], [num_blocks for _, num_blocks, _ in sources]
    padded = min(MAX_NUM_REQS, num_reqs + PADDING)
    out = [torch.empty(MAX_NUM_REQS, cols, dtype=torch.int32, device=device) for _ in range(num_groups)]
    # Each request's first position somewhere in its blocks (of group 0's counts).
    first_positions = (counts[0].cpu().long() * BLOCK_SIZE * 3 // 4).to(torch.int32).to(device)
    reach = [0] + [WINDOW_REACH] * (num_groups - 1)

    def single_ops():
        for g in range(num_groups):
            specops.gather_block_tables(tables[g], counts[g], idx_mapping, out[g], num_reqs_padded=padded,
                                        num_computed_tokens=first_positions, sliding_window_reach=reach[g],
                                        block_size=BLOCK_SIZE)

    def torch_eager():
        for g in range(num_groups):
            torch_gather(tables[g], counts[g], idx_mapping, out[g], padded, first_positions if reach[g] else None)

    impls = {
        "specops": lambda: specops.gather_block_tables_multi(
            tables, counts, idx_mapping, out, num_reqs_padded=padded, num_computed_tokens=first_positions,
            sliding_window_reach=reach, block_sizes=BLOCK_SIZE),
        "single ops": single_ops,
        "torch-eager": torch_eager,
    }
    return Case("gather_block_tables_multi", f"R={num_reqs} cols={cols} G={num_groups}", num_reqs, 0, impls,
                baselines=("single ops", "torch-eager"), family=f"G={num_groups}")


def cases(device: torch.device, quick: bool) -> list[Case]:
    return [make_case(num_reqs, cols, num_groups, device)
            for num_reqs, cols, num_groups in (QUICK_SHAPES if quick else SHAPES)]
