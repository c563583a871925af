"""Triton kernel for compressor_metadata: a persistent grid over blocks of BLOCK rows. A program
finds each row's request by scanning the requests RB at a time (their row counts, prefix-summed
with a carry, compared with the rows as a [BLOCK, RB] block), then gathers the row's block id and
its RoPE rows. Every load and store is masked at clamped in-bounds offsets."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK = 32
RB = 32


@triton.jit
def compressor_tile(
    cos_ptr, sin_ptr, cu_ptr, start_ptr, table_ptr, out_cos_ptr, out_sin_ptr, slot_ptr, r0,
    table_stride, table_width, block_size, ratio, num_reqs, rope_rows, rope_stride, num_rows, rope_dim,
    FORMAT: tl.constexpr, BLOCK: tl.constexpr, RB: tl.constexpr, DIM: tl.constexpr,
):
    """Rows r0 .. r0 + BLOCK - 1 of one call (one step of one group in compressor_metadata_multi):
    cu_ptr / start_ptr its query_start_loc and start positions, out_*_ptr / slot_ptr its rows."""
    rows_in = tl.arange(0, BLOCK)
    reqs_in = tl.arange(0, RB)
    d = tl.arange(0, DIM)
    d_live = d < rope_dim
    row = (r0 + rows_in).to(tl.int64)
    live = row < num_rows
    request = tl.zeros([BLOCK], tl.int64)
    first = tl.zeros([BLOCK], tl.int64)
    start_of = tl.zeros([BLOCK], tl.int64)
    found = tl.zeros([BLOCK], tl.int32)
    carry = tl.zeros([], tl.int64)
    for q0 in range(0, num_reqs, RB):
        q = q0 + reqs_in
        q_live = q < num_reqs
        at = tl.minimum(q, num_reqs - 1).to(tl.int64)
        start = tl.load(start_ptr + at, mask=q_live, other=-1).to(tl.int64)
        # cu[r + 1] - cu[r] in int64 (the int32 difference wraps for [-2^31, 16]).
        length = (tl.load(cu_ptr + at + 1, mask=q_live, other=0).to(tl.int64)
                  - tl.load(cu_ptr + at, mask=q_live, other=0).to(tl.int64))
        take = q_live & (start >= 0) & (length > 0)
        count = tl.where(take, (start + length) // ratio - start // ratio, 0)
        end = carry + tl.cumsum(count, 0)
        begin = end - count
        match = (begin[None, :] <= row[:, None]) & (row[:, None] < end[None, :])
        request += tl.sum(tl.where(match, q[None, :].to(tl.int64), 0), 1)
        first += tl.sum(tl.where(match, begin[None, :], 0), 1)
        start_of += tl.sum(tl.where(match, start[None, :], 0), 1)
        found += tl.sum(match.to(tl.int32), 1)
        carry += tl.sum(count, 0)
    position = start_of // ratio + row - first
    block_index = position // block_size
    rope_row = position * ratio
    ok = live & (found > 0) & (block_index < table_width) & (rope_row < rope_rows)
    table_at = request * table_stride + tl.maximum(tl.minimum(block_index, table_width - 1), 0)
    block_id = tl.load(table_ptr + table_at, mask=ok, other=-1).to(tl.int64)
    offset = position % block_size
    ok = ok & (block_id >= 0)
    if FORMAT == 1:
        ok = ok & (block_id * block_size + offset <= 2147483647)
    rope_at = tl.maximum(tl.minimum(rope_row, rope_rows - 1), 0)[:, None] * rope_stride + d[None, :]
    gather = ok[:, None] & d_live[None, :]
    cos = tl.load(cos_ptr + rope_at, mask=gather, other=1.0)
    sin = tl.load(sin_ptr + rope_at, mask=gather, other=0.0)
    out_at = tl.minimum(row, num_rows - 1)[:, None] * rope_dim + d[None, :]
    keep = live[:, None] & d_live[None, :]
    tl.store(out_cos_ptr + out_at, tl.where(gather, cos, 1.0).to(out_cos_ptr.dtype.element_ty), mask=keep)
    tl.store(out_sin_ptr + out_at, tl.where(gather, sin, 0.0).to(out_sin_ptr.dtype.element_ty), mask=keep)
    slot_row = tl.minimum(row, num_rows - 1)
    if FORMAT == 1:
        tl.store(slot_ptr + slot_row, tl.where(ok, block_id * block_size + offset, -1).to(tl.int32), mask=live)
    else:
        tl.store(slot_ptr + 2 * slot_row, tl.where(ok, block_id, -1).to(tl.int32), mask=live)
        tl.store(slot_ptr + 2 * slot_row + 1, tl.where(ok, offset, block_size - 1).to(tl.int32), mask=live)


@triton.jit
def _compressor_metadata_kernel(
    cos_ptr, sin_ptr, cu_ptr, start_ptr, table_ptr, out_cos_ptr, out_sin_ptr, slot_ptr,
    table_stride, table_width, block_size, ratio, num_reqs, rope_rows, rope_stride, num_rows, rope_dim,
    FORMAT: tl.constexpr, BLOCK: tl.constexpr, RB: tl.constexpr, DIM: tl.constexpr,
):
    for r0 in range(tl.program_id(0) * BLOCK, num_rows, tl.num_programs(0) * BLOCK):
        compressor_tile(cos_ptr, sin_ptr, cu_ptr, start_ptr, table_ptr, out_cos_ptr, out_sin_ptr, slot_ptr, r0,
                        table_stride, table_width, block_size, ratio, num_reqs, rope_rows, rope_stride, num_rows,
                        rope_dim, FORMAT, BLOCK, RB, DIM)


def compressor_metadata(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    rope_cos = a.rope_cos
    rope_sin = a.rope_sin
    num_rows = a.compress_cos.shape[0]
    if num_rows == 0:
        return
    rope_cos, rope_sin = rope_cos.contiguous(), rope_sin.contiguous()
    grid = (num_programs(a.compress_cos.device, triton.cdiv(num_rows, BLOCK)),)
    _compressor_metadata_kernel[grid](
        rope_cos, rope_sin, a.cu_seqlens, a.start_pos, a.kv_block_table, a.compress_cos, a.compress_sin, a.slot_mapping,
        a.kv_block_table.stride(0), a.kv_block_table.shape[1], a.kv_block_size, a.compress_ratio, a.num_reqs_actual,
        rope_cos.shape[0], rope_cos.shape[1], num_rows, rope_cos.shape[1],
        FORMAT=a.slot_mapping_format, BLOCK=BLOCK, RB=RB, DIM=triton.next_power_of_2(max(rope_cos.shape[1], 1)),
    )
