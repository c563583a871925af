"""Random batches shared by every op's tests: plain generators (seeded) and hypothesis strategies."""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st


@dataclasses.dataclass
class Batch:
    """One scheduler step: R requests, T tokens, and a paged block table for them."""

    query_start_loc: torch.Tensor  # int32 [R + 1]
    positions: torch.Tensor  # int64 [T]
    seq_lens: torch.Tensor  # int32 [R]: tokens of each request after this step
    block_table: torch.Tensor  # int32 [rows, cols]
    idx_mapping: torch.Tensor | None  # int32 [R] or None

    @property
    def num_reqs(self) -> int:
        return self.query_start_loc.numel() - 1

    @property
    def num_tokens(self) -> int:
        return self.positions.numel()


def make_batch(
    generator: torch.Generator,
    *,
    query_lens: list[int],
    context_lens: list[int],
    tokens_per_block_row: int,
    columns_per_block: int = 1,
    extra_rows: int = 0,
    with_idx_mapping: bool = False,
    unmapped_fraction: float = 0.0,
) -> Batch:
    """A batch whose request r has query_lens[r] new tokens after context_lens[r] old ones.

    tokens_per_block_row: how many positions one allocation block covers (block_size, or
    block_size * blocks_per_kv_block * cp_world_size for a CP table whose allocation blocks are
    columns_per_block = blocks_per_kv_block kernel blocks); the table gets just enough columns
    for the longest request. With idx_mapping, request r reads a shuffled row
    of a larger table and a fraction of requests map to row -1.
    """
    num_reqs = len(query_lens)
    query_lens_t = torch.tensor(query_lens, dtype=torch.int32)
    query_start_loc = torch.zeros(num_reqs + 1, dtype=torch.int32)
    query_start_loc[1:] = torch.cumsum(query_lens_t, 0)
    seq_lens = torch.tensor(context_lens, dtype=torch.int32) + query_lens_t
    positions = torch.cat(
        [torch.arange(c, c + q, dtype=torch.int64) for c, q in zip(context_lens, query_lens)]
        or [torch.zeros(0, dtype=torch.int64)]
    )
    max_seq = int(seq_lens.max()) if num_reqs else 0
    cols = max(1, -(-max_seq // tokens_per_block_row)) * columns_per_block
    rows = num_reqs + extra_rows
    block_table = torch.randint(0, 1 << 16, (max(rows, 1), cols), dtype=torch.int32, generator=generator)
    idx_mapping = None
    if with_idx_mapping:
        idx_mapping = torch.randperm(max(rows, 1), generator=generator)[:num_reqs].to(torch.int32)
        unmapped = torch.rand(num_reqs, generator=generator) < unmapped_fraction
        idx_mapping[unmapped] = -1
    return Batch(query_start_loc, positions, seq_lens, block_table, idx_mapping)


@st.composite
def batch_shapes(draw, max_reqs: int = 8, max_query_len: int = 8, max_context: int = 300):
    """(query_lens, context_lens) of a batch: decodes, short prefills and empty requests."""
    num_reqs = draw(st.integers(0, max_reqs))
    query_lens = draw(st.lists(st.integers(0, max_query_len), min_size=num_reqs, max_size=num_reqs))
    context_lens = draw(st.lists(st.integers(0, max_context), min_size=num_reqs, max_size=num_reqs))
    return query_lens, context_lens


def assert_same(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    """Exact equality of integer tensors, with the first mismatch in the message."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    mismatch = (actual != expected).nonzero()
    if mismatch.numel():
        index = tuple(mismatch[0].tolist())
        raise AssertionError(
            f"{what}: {mismatch.size(0)} mismatches, first at {index}: {actual[index].item()} != {expected[index].item()}"
        )


@dataclasses.dataclass
class CorrectionInputs:
    """The arguments of correct_num_computed_tokens: a previous batch and the rows that follow it."""

    num_computed_tokens: torch.Tensor  # int32 [>= n], previous layout
    num_accepted_tokens: torch.Tensor  # int32 [>= n]
    prev_positions: torch.Tensor  # int32 or int64 [n]
    valid_sampled_token_count: torch.Tensor  # int32 [previous rows]
    prev_num_draft_tokens: torch.Tensor  # int32 [previous rows, maybe another length]
    cpu_num_computed_tokens: torch.Tensor  # int32 [>= n]

    def args(self) -> tuple[torch.Tensor, ...]:
        return (self.num_computed_tokens, self.num_accepted_tokens, self.prev_positions,
                self.valid_sampled_token_count, self.prev_num_draft_tokens, self.cpu_num_computed_tokens)

    def clone(self) -> CorrectionInputs:
        return CorrectionInputs(*(t.clone() for t in self.args()))


def make_correction_inputs(
    generator: torch.Generator,
    *,
    num_rows: int,
    num_prev_rows: int,
    extra_buffer_rows: int = 0,
    length_jitter: int = 0,
    new_fraction: float = 0.2,
    out_of_range_fraction: float = 0.1,
    prev_dtype: torch.dtype = torch.int32,
) -> CorrectionInputs:
    """n = num_rows current rows after a previous batch of num_prev_rows rows.

    Most rows continue a distinct previous row (a random permutation: rows move); some are new
    (-1); some name a row past the previous buffers. valid_sampled_token_count and
    prev_num_draft_tokens get lengths up to length_jitter apart, so each bound of SPEC 3.2
    matters; a third of the previous rows did not draft.
    """
    def lengths(base: int) -> int:
        return max(0, base - int(torch.randint(0, length_jitter + 1, (1,), generator=generator)))

    buffer_rows = max(num_rows, num_prev_rows) + extra_buffer_rows
    num_computed_tokens = torch.randint(0, 5000, (buffer_rows,), dtype=torch.int32, generator=generator)
    num_accepted_tokens = torch.randint(0, 9, (buffer_rows,), dtype=torch.int32, generator=generator)
    cpu_num_computed_tokens = torch.randint(5000, 9000, (buffer_rows,), dtype=torch.int32, generator=generator)
    valid = torch.randint(0, 6, (lengths(num_prev_rows),), dtype=torch.int32, generator=generator)
    drafts = torch.randint(0, 5, (lengths(num_prev_rows),), dtype=torch.int32, generator=generator)
    drafts[torch.rand(drafts.shape, generator=generator) < 0.33] = 0

    previous = torch.randperm(max(num_prev_rows, num_rows), generator=generator)[:num_rows].to(torch.int64)
    previous[previous >= num_prev_rows] = -1
    roll = torch.rand(num_rows, generator=generator)
    previous[roll < new_fraction] = -1
    far = (roll >= new_fraction) & (roll < new_fraction + out_of_range_fraction)
    previous[far] = num_prev_rows + torch.randint(0, 3 * buffer_rows + 1, (int(far.sum()),), generator=generator)
    return CorrectionInputs(num_computed_tokens, num_accepted_tokens, previous.to(prev_dtype), valid, drafts,
                            cpu_num_computed_tokens)


@dataclasses.dataclass
class SpecDecodeStep:
    """The arguments of prepare_spec_decode_inputs: a correction, a batch and KV-cache groups."""

    correction: CorrectionInputs
    query_start_loc: torch.Tensor  # int32 [R + 1]
    block_tables: list[torch.Tensor]  # int32, one per group, covering every corrected position
    block_sizes: list[int]
    blocks_per_kv_block: list[int]
    cp_sharded: list[bool]
    idx_mapping: torch.Tensor | None

    @property
    def num_reqs(self) -> int:
        return self.query_start_loc.numel() - 1

    @property
    def num_tokens(self) -> int:
        return int(self.query_start_loc[-1])


def make_spec_decode_step(
    generator: torch.Generator,
    *,
    num_reqs: int,
    num_prev_rows: int,
    max_query_len: int,
    groups: list[tuple[int, int, bool]],  # (block_size, blocks_per_kv_block, cp_sharded)
    cp_world_size: int = 1,
    with_idx_mapping: bool = False,
    prev_dtype: torch.dtype = torch.int32,
) -> SpecDecodeStep:
    from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens

    correction = make_correction_inputs(generator, num_rows=num_reqs, num_prev_rows=num_prev_rows,
                                        extra_buffer_rows=2, length_jitter=1, prev_dtype=prev_dtype)
    query_lens = torch.randint(0, max_query_len + 1, (num_reqs,), dtype=torch.int32, generator=generator)
    query_start_loc = torch.zeros(num_reqs + 1, dtype=torch.int32)
    query_start_loc[1:] = torch.cumsum(query_lens, 0)
    corrected = correction.clone()
    correct_num_computed_tokens(*corrected.args())
    max_seq_len = int((corrected.num_computed_tokens[:num_reqs] + query_lens).max()) if num_reqs else 1
    rows = num_reqs + 3
    block_tables = []
    for block_size, blocks_per_kv_block, sharded in groups:
        tokens_per_column = block_size * blocks_per_kv_block * (cp_world_size if sharded else 1)
        columns = -(-max_seq_len // tokens_per_column) * blocks_per_kv_block
        block_tables.append(torch.randint(0, 1 << 20, (rows, max(columns, 1)), dtype=torch.int32, generator=generator))
    idx_mapping = None
    if with_idx_mapping:
        idx_mapping = torch.randperm(rows, generator=generator)[:num_reqs].to(torch.int32)
        idx_mapping[torch.rand(num_reqs, generator=generator) < 0.15] = -1
    return SpecDecodeStep(correction, query_start_loc, block_tables, [g[0] for g in groups], [g[1] for g in groups],
                          [g[2] for g in groups], idx_mapping)
