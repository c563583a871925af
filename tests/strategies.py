"""Random batches shared by every op's tests: plain generators (seeded) and hypothesis strategies."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
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
    query_start_loc = query_start_loc_of(query_lens)
    seq_lens = torch.tensor(context_lens, dtype=torch.int32) + torch.tensor(query_lens, dtype=torch.int32)
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


def assert_compiles_like_eager(step, *tensors: torch.Tensor) -> None:
    """`step(*tensors)`, which writes into its tensors and returns tensors, compiles without a
    graph break and gives what it gives eagerly: its results and every tensor it writes."""
    eager = [t.clone() for t in tensors]
    expected = step(*eager)
    actual = torch.compile(step, fullgraph=True, backend="aot_eager")(*tensors)
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        assert_same(a, e, f"result {i}")
    for i, (a, e) in enumerate(zip(tensors, eager)):
        assert_same(a, e, f"argument {i}")


class QueryStartLocSizes:
    """num_reqs and num_tokens of a batch described by its query_start_loc field."""

    query_start_loc: torch.Tensor

    @property
    def num_reqs(self) -> int:
        return self.query_start_loc.numel() - 1

    @property
    def num_tokens(self) -> int:
        return int(self.query_start_loc[-1])


@dataclasses.dataclass
class CorrectionInputs:
    """The arguments of correct_num_computed_tokens: a previous batch and the rows that follow it."""

    num_computed_tokens: torch.Tensor  # int32 [>= n], previous layout
    num_accepted_tokens: torch.Tensor  # int32 [>= n]
    prev_positions: torch.Tensor  # int32 or int64 [n]
    valid_sampled_token_count: torch.Tensor  # int32 or int64 (vllm-ascend's) [previous rows]
    prev_num_draft_tokens: torch.Tensor  # int32 [previous rows, maybe another length]
    cpu_num_computed_tokens: torch.Tensor  # int32 or int64 (an int64 host copy) [>= n]

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
    valid_dtype: torch.dtype = torch.int32,
    host_dtype: torch.dtype = torch.int32,
) -> CorrectionInputs:
    """n = num_rows current rows after a previous batch of num_prev_rows rows.

    Most rows continue a distinct previous row (a random permutation: rows move); some are new
    (-1); some name a row past the previous buffers. valid_sampled_token_count and
    prev_num_draft_tokens get lengths up to length_jitter apart, so each bound of the contract
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
    return CorrectionInputs(num_computed_tokens, num_accepted_tokens, previous.to(prev_dtype), valid.to(valid_dtype),
                            drafts, cpu_num_computed_tokens.to(host_dtype))


@dataclasses.dataclass
class SpecDecodeStep(QueryStartLocSizes):
    """The arguments of prepare_spec_decode_inputs: a correction, a batch and KV-cache groups."""

    correction: CorrectionInputs
    query_start_loc: torch.Tensor  # int32 [R + 1]
    block_tables: list[torch.Tensor]  # int32, one per group, covering every corrected position
    block_sizes: list[int]
    blocks_per_kv_block: list[int]
    cp_sharded: list[bool]
    idx_mapping: torch.Tensor | None


def make_block_source(generator: torch.Generator, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A request-indexed block table int32 [rows, cols] and its counts int32 [rows].

    Ids past each row's count are random, not NULL: a gather that copies past the count
    shows them.
    """
    table = torch.randint(1, 1 << 20, (rows, cols), dtype=torch.int32, generator=generator)
    num_blocks = torch.randint(0, cols + 1, (rows,), dtype=torch.int32, generator=generator)
    return table, num_blocks


def make_staged_writes(
    generator: torch.Generator, table_rows: int, table_cols: int, *, row_fraction: float = 0.5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rows, starts, cu_lens, values) of non-overlapping writes into a [table_rows, table_cols]
    table, in random order: some rows get several writes, some none, some writes are empty."""
    writes = []
    for row in range(table_rows):
        if torch.rand(1, generator=generator).item() >= row_fraction:
            continue
        cuts = sorted(torch.randint(0, table_cols + 1, (3,), generator=generator).tolist())
        bounds = [0, *cuts, table_cols]
        for start, end in zip(bounds[:-1], bounds[1:]):
            if torch.rand(1, generator=generator).item() < 0.6:
                writes.append((row, start, end - start))
    order = torch.randperm(len(writes), generator=generator).tolist()
    writes = [writes[i] for i in order]
    lens = [length for _, _, length in writes]
    cu_lens = torch.zeros(len(writes) + 1, dtype=torch.int32)
    cu_lens[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int32), 0) if writes else cu_lens[1:]
    rows = torch.tensor([row for row, _, _ in writes], dtype=torch.int64)
    starts = torch.tensor([start for _, start, _ in writes], dtype=torch.int32)
    values = torch.randint(1, 1 << 20, (int(cu_lens[-1]),), dtype=torch.int32, generator=generator)
    return rows, starts, cu_lens, values


def assert_rejected_without_writes(fn: Callable[..., object], call: dict, *, argument: str, written: tuple[str, ...],
                                   errors: type[Exception] | tuple[type[Exception], ...] = (ValueError, RuntimeError)) -> None:
    """fn(**call) must raise an error that names `argument` and leave the tensors call[name],
    for each name in `written`, byte-identical."""
    before = {name: call[name].clone() for name in written}
    with pytest.raises(errors, match=argument):
        fn(**call)
    for name in written:
        assert torch.equal(call[name], before[name]), f"a rejected call wrote {name}"


@st.composite
def attention_batches(draw, max_reqs: int = 8, max_prefill: int = 300, max_context: int = 4000):
    """(query_lens, kv_lens) of an attention batch, seqused_kv counting the new tokens: empty
    requests, requests without KV (their tokens sit before position 0), decodes, long prefills."""
    query_lens, kv_lens = [], []
    for _ in range(draw(st.integers(0, max_reqs))):
        kind = draw(st.sampled_from(["empty", "no_kv", "decode", "decode", "prefill"]))
        if kind == "empty":
            query_len, kv_len = 0, draw(st.integers(0, max_context))
        elif kind == "no_kv":
            query_len, kv_len = draw(st.integers(1, 8)), 0
        else:
            query_len = draw(st.integers(1, 8 if kind == "decode" else max_prefill))
            kv_len = query_len + draw(st.integers(0, max_context))
        query_lens.append(query_len)
        kv_lens.append(kv_len)
    return query_lens, kv_lens


def query_start_loc_of(query_lens: list[int]) -> torch.Tensor:
    """int32 [R + 1]: 0, then the running sum of the query lengths (query_start_loc, cu_seqlens_q)."""
    query_start_loc = torch.zeros(len(query_lens) + 1, dtype=torch.int32)
    query_start_loc[1:] = torch.cumsum(torch.tensor(query_lens, dtype=torch.int32), 0)
    return query_start_loc


@st.composite
def sas_calls(draw, max_reqs: int = 6, max_prefill: int = 40, max_context: int = 3000) -> dict:
    """Keyword arguments of a sas_metadata call the AI-CPU kernel accepts, `out` included: every
    layout, where the lengths come from (seqused_*, cumulative, the max_seqlen_* of BSND), int32
    or int64 tensors, mask modes, windows, compressed KV, core counts and both tile shapes."""
    query_lens, kv_lens = draw(attention_batches(max_reqs=max_reqs, max_prefill=max_prefill, max_context=max_context))
    layout_q = draw(st.sampled_from(["TND", "TND", "BSND"]))
    layout_kv = draw(st.sampled_from(["PA_ND", "PA_ND", "TND"] + (["BSND"] if layout_q == "BSND" else [])))
    if not query_lens:
        layout_kv = "TND"  # an empty seqused_kv is "not provided", which PA_ND refuses
    heads = draw(st.sampled_from([32, 64] if layout_kv == "BSND" else [1, 8, 16, 32, 64, 128]))
    dtype = draw(st.sampled_from([torch.int32, torch.int64]))
    batches = len(query_lens)
    if layout_q == "BSND" and not draw(st.booleans()):
        query_lens = [max(query_lens, default=0)] * batches  # every batch max_seqlen_q long
    call = dict(num_heads_q=heads, num_heads_kv=1, head_dim=draw(st.sampled_from([512, 128])), batch_size=batches,
                max_seqlen_q=max(query_lens, default=0), layout_q=layout_q, layout_kv=layout_kv,
                num_cube_cores=draw(st.integers(1, 36)), num_vector_cores=draw(st.integers(1, 72)),
                soc_version=draw(st.sampled_from(["Ascend910B1", "Ascend910B1", "Ascend950PR"])))
    if layout_q == "TND" or (batches and query_lens[0] != max(query_lens)) or draw(st.booleans()):
        if layout_q == "TND":
            call["cu_seqlens_q"] = query_start_loc_of(query_lens).to(dtype)
        if layout_q == "BSND" or draw(st.integers(0, 3)) == 0:
            call["seqused_q"] = torch.tensor(query_lens, dtype=dtype)
    if layout_kv == "PA_ND" or draw(st.booleans()):
        call["seqused_kv"] = torch.tensor(kv_lens, dtype=dtype)
    elif layout_kv == "TND":
        call["cu_seqlens_ori_kv"] = query_start_loc_of(kv_lens).to(dtype)
    else:
        kv_lens = [max(kv_lens, default=0)] * batches
    call["max_seqlen_kv"] = max(kv_lens, default=0)
    mode = draw(st.sampled_from([0, 3, 4, 4]))
    left, right = draw(st.sampled_from([(127, 0), (133, 0), (0, 0), (1, 0), (63, 3), (1000, 0), (5, 200)]))
    call.update(ori_mask_mode=mode, ori_win_left=left, ori_win_right=right)
    ratio, topk = draw(st.sampled_from([(None, 0), (4, 512), (4, 1024), (4, 0), (128, 0)]))
    call.update(has_cmp_kv=ratio is not None, cmp_ratio=ratio or 1, cmp_topk=topk)
    call["out"] = torch.full((1024,), 0x0BADF00D, dtype=torch.int32)
    return call


@dataclasses.dataclass
class CPBatch(QueryStartLocSizes):
    """A batch under DSA-CP: requests (some empty, some with seq_len 0), a padded token stream
    split over cp_size ranks, and a block table covering every request's seq_len."""

    query_start_loc: torch.Tensor  # int32 [R + 1]
    seq_lens: torch.Tensor  # int32 [R]
    block_table: torch.Tensor  # int32 [R + extra rows, cols]; some block ids are -1
    num_input_tokens: int  # T plus padding
    cp_size: int


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
    valid_dtype: torch.dtype = torch.int32,
    host_dtype: torch.dtype = torch.int32,
) -> SpecDecodeStep:
    from specops.ops.registry import OPS
    from specops.reference.correct_num_computed_tokens import correct_num_computed_tokens

    correction = make_correction_inputs(generator, num_rows=num_reqs, num_prev_rows=num_prev_rows,
                                        extra_buffer_rows=2, length_jitter=1, prev_dtype=prev_dtype,
                                        valid_dtype=valid_dtype, host_dtype=host_dtype)
    query_lens = torch.randint(0, max_query_len + 1, (num_reqs,), dtype=torch.int32, generator=generator)
    query_start_loc = query_start_loc_of(query_lens.tolist())
    corrected = correction.clone()
    correct_num_computed_tokens(OPS["correct_num_computed_tokens"].arguments(*corrected.args()))
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


@st.composite
def cp_batches(draw, max_reqs: int = 8, max_query_len: int = 12, max_context: int = 80, block_size: int = 4):
    """CPBatch with cp_size in {1, 2, 3, 4, 8}: decodes and prefills that straddle rank
    boundaries, zero-length requests, seq_lens of 0 and padded token counts."""
    query_lens, context_lens = draw(batch_shapes(max_reqs, max_query_len, max_context))
    num_reqs = len(query_lens)
    zero_seq = draw(st.lists(st.booleans(), min_size=num_reqs, max_size=num_reqs))
    seq_lens = [0 if zero else c + q for zero, c, q in zip(zero_seq, context_lens, query_lens)]
    query_start_loc = query_start_loc_of(query_lens)
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)
    cols = max(1, -(-max(seq_lens, default=0) // block_size))
    block_table = torch.randint(0, 1 << 12, (num_reqs + 2, cols), dtype=torch.int32, generator=generator)
    block_table[torch.rand(block_table.shape, generator=generator) < 0.05] = -1
    cp_size = draw(st.sampled_from([1, 2, 3, 4, 8]))
    padding = draw(st.integers(0, 2 * cp_size))
    return CPBatch(query_start_loc, torch.tensor(seq_lens, dtype=torch.int32), block_table,
                   sum(query_lens) + padding, cp_size)
