"""The embedded default workload: decode- and prefill-sized batches with paged block tables."""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class BenchBatch:
    query_start_loc: torch.Tensor  # int32 [R + 1]
    positions: torch.Tensor  # int64 [T]
    seq_lens: torch.Tensor  # int32 [R]
    block_table: torch.Tensor  # int32 [R, cols]

    @property
    def num_reqs(self) -> int:
        return self.query_start_loc.numel() - 1

    @property
    def num_tokens(self) -> int:
        return self.positions.numel()


def make_bench_batch(num_reqs: int, query_len: int, *, block_size: int, cp_world_size: int = 1,
                     max_context: int = 4096, seed: int = 0, device: torch.device | str = "cpu") -> BenchBatch:
    """R requests of `query_len` new tokens each after a random context of up to max_context."""
    generator = torch.Generator().manual_seed(seed)
    context = torch.randint(0, max_context, (num_reqs,), generator=generator)
    seq_lens = context + query_len
    query_start_loc = torch.arange(num_reqs + 1, dtype=torch.int32) * query_len
    offsets = torch.arange(query_len).repeat(num_reqs)
    positions = context.repeat_interleave(query_len) + offsets
    tokens_per_column = block_size * cp_world_size
    cols = -(-(max_context + query_len) // tokens_per_column)
    block_table = torch.randint(1, 1 << 20, (num_reqs, cols), dtype=torch.int32, generator=generator)
    return BenchBatch(query_start_loc.to(device), positions.to(device), seq_lens.to(torch.int32).to(device),
                      block_table.to(device))
