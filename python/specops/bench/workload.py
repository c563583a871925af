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


@dataclasses.dataclass
class BenchStep:
    """One async spec-decode step: the correction's inputs, a decode batch, KV-cache groups."""

    num_computed_tokens: torch.Tensor  # int32 [R], previous layout
    num_accepted_tokens: torch.Tensor  # int32 [R]
    prev_positions: torch.Tensor  # int32 [R]
    valid_sampled_token_count: torch.Tensor  # int32 [R]
    prev_num_draft_tokens: torch.Tensor  # int32 [R]
    cpu_num_computed_tokens: torch.Tensor  # int32 [R]
    query_start_loc: torch.Tensor  # int32 [R + 1]
    block_tables: list[torch.Tensor]  # int32 [R, cols], one per group
    block_sizes: list[int]
    cp_sharded: list[bool]
    cp_world_size: int
    cp_rank: int
    pristine_counts: torch.Tensor  # num_computed_tokens before any call

    @property
    def num_reqs(self) -> int:
        return self.query_start_loc.numel() - 1

    @property
    def num_tokens(self) -> int:
        return int(self.query_start_loc[-1])

    def correction_args(self) -> tuple[torch.Tensor, ...]:
        return (self.num_computed_tokens, self.num_accepted_tokens, self.prev_positions,
                self.valid_sampled_token_count, self.prev_num_draft_tokens, self.cpu_num_computed_tokens)

    def restore(self) -> None:
        """Back to the counts before any call. The correction adds the valid counts every call,
        so without this, repeated calls would walk the positions off the block tables; every
        implementation restores alike (the benchmarks time this copy alone as `restore`)."""
        self.num_computed_tokens.copy_(self.pristine_counts)


def make_bench_step(num_reqs: int, query_len: int, *, block_sizes: list[int], cp_sharded: list[bool] | None = None,
                    cp_world_size: int = 1, max_context: int = 4096, seed: int = 0,
                    device: torch.device | str = "cpu") -> BenchStep:
    """R decodes of query_len tokens (query_len - 1 drafts) after a previous step of R rows.

    The rows are reshuffled (each continues a random previous row), 5% are new, 10% of the
    previous rows ran without drafts; acceptance is uniform in 1..query_len.
    """
    generator = torch.Generator().manual_seed(seed)
    cp_sharded = cp_sharded if cp_sharded is not None else [True] * len(block_sizes)
    counts = torch.randint(0, max_context, (num_reqs,), generator=generator, dtype=torch.int32)
    prev_positions = torch.randperm(num_reqs, generator=generator).to(torch.int32)
    prev_positions[torch.rand(num_reqs, generator=generator) < 0.05] = -1
    drafts = torch.full((num_reqs,), query_len - 1, dtype=torch.int32)
    drafts[torch.rand(num_reqs, generator=generator) < 0.1] = 0
    valid = torch.randint(1, query_len + 1, (num_reqs,), generator=generator, dtype=torch.int32)
    cpu_counts = torch.randint(0, max_context, (num_reqs,), generator=generator, dtype=torch.int32)
    query_start_loc = torch.arange(num_reqs + 1, dtype=torch.int32) * query_len
    max_seq_len = max_context + 2 * query_len
    block_tables = []
    for block_size, sharded in zip(block_sizes, cp_sharded):
        tokens_per_column = block_size * (cp_world_size if sharded else 1)
        cols = -(-max_seq_len // tokens_per_column)
        block_tables.append(torch.randint(1, 1 << 20, (num_reqs, cols), dtype=torch.int32, generator=generator))
    to = dict(device=device)
    return BenchStep(counts.to(**to), torch.zeros(num_reqs, dtype=torch.int32, **to), prev_positions.to(**to),
                     valid.to(**to), drafts.to(**to), cpu_counts.to(**to), query_start_loc.to(**to),
                     [t.to(**to) for t in block_tables], list(block_sizes), list(cp_sharded), cp_world_size,
                     cp_world_size - 1, counts.clone().to(**to))
