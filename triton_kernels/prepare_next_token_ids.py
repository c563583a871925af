"""Triton kernel for prepare_next_token_ids: next token, valid count, rejected count, token index.

Request tiles on a persistent grid, each a [BLOCK_R, BLOCK_S] tile of the sampled tokens
(BLOCK_S: S rounded up to a power of two; S is a request's K + 1, small): the count and the
highest valid column are row reductions, the next token a gather of that column. The backup is
the given tensor or a gather from token_ids. Tiles run to the largest padded end, each store
masked by its own buffer's end; every masked lane reads and writes offset 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK_R = 64


@triton.jit
def _prepare_next_token_ids_kernel(
    sampled_ptr, sampled_stride, sampled_cols, vocab_size, discard_ptr, backup_ptr, token_ids_ptr, token_stride,
    token_cols, num_tokens_ptr, cu_ptr, qsl_ptr, next_ptr, count_ptr, rejected_ptr, index_ptr,
    num_reqs, next_end, count_end, rejected_end, index_end,
    HAS_DISCARD: tl.constexpr, HAS_BACKUP: tl.constexpr, PADDED_PATH: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_S: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    end = tl.maximum(tl.maximum(next_end, count_end), tl.maximum(rejected_end, index_end))
    columns = tl.arange(0, BLOCK_S)
    for tile in range(pid, tl.cdiv(end, BLOCK_R), num_progs):
        r = tile * BLOCK_R + tl.arange(0, BLOCK_R)
        real = r < num_reqs
        safe_r = tl.where(real, r, 0)
        in_row = real[:, None] & (columns[None, :] < sampled_cols)
        offsets = safe_r[:, None] * sampled_stride + tl.where(in_row, columns[None, :], 0)
        tokens = tl.load(sampled_ptr + tl.where(in_row, offsets, 0), mask=in_row, other=-1).to(tl.int64)
        valid = in_row & (tokens >= 0) & (tokens < vocab_size)
        count = tl.sum(valid.to(tl.int32), axis=1)
        last_valid = tl.max(tl.where(valid, columns[None, :], -1), axis=1)
        if HAS_DISCARD:
            discard = tl.load(discard_ptr + safe_r, mask=real, other=0) != 0
            count = tl.where(discard, 0, count)
        has_token = count > 0
        chosen = tl.load(sampled_ptr + tl.where(has_token, safe_r * sampled_stride + last_valid, 0), mask=has_token,
                         other=0).to(tl.int32)
        if HAS_BACKUP:
            backup = tl.load(backup_ptr + safe_r, mask=real, other=0)
        else:
            n = tl.load(num_tokens_ptr + safe_r, mask=real, other=0)
            in_table = real & (n >= 1) & (n <= token_cols)
            backup = tl.load(token_ids_ptr + tl.where(in_table, safe_r * token_stride + n - 1, 0), mask=in_table,
                             other=-1)
        next_token = tl.where(real, tl.where(has_token, chosen, backup), 0)
        count = tl.where(real, count, 0)
        tl.store(next_ptr + tl.where(r < next_end, r, 0), next_token, mask=r < next_end)
        tl.store(count_ptr + tl.where(r < count_end, r, 0), count, mask=r < count_end)
        if PADDED_PATH:
            cu = tl.load(cu_ptr + safe_r, mask=real, other=0).to(tl.int64)
            cu_before = tl.load(cu_ptr + tl.where(real & (r > 0), safe_r - 1, 0), mask=real & (r > 0),
                                other=0).to(tl.int64)
            drafts = cu - cu_before
            rejected = tl.where(drafts > 0, drafts + 1 - count, 0)
            q0 = tl.load(qsl_ptr + safe_r, mask=real, other=0).to(tl.int64)
            q1 = tl.load(qsl_ptr + safe_r + 1, mask=real, other=0).to(tl.int64)
            index = tl.maximum(q1 - 1 - rejected, q0)
            tl.store(rejected_ptr + tl.where(r < rejected_end, r, 0), tl.where(real, rejected, 0).to(tl.int32),
                     mask=r < rejected_end)
            tl.store(index_ptr + tl.where(r < index_end, r, 0), tl.where(real, index, 0).to(tl.int32),
                     mask=r < index_end)


def prepare_next_token_ids(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    def end(out: torch.Tensor | None) -> int:
        return 0 if out is None else (out.numel() if a.num_reqs_padded < 0 else a.num_reqs_padded)

    ends = [end(out) for out in (a.next_token_ids, a.valid_sampled_token_count, a.num_rejected_tokens,
                                 a.token_indices_to_sample)]
    num_tasks = triton.cdiv(max(ends), BLOCK_R)
    if num_tasks == 0:
        return
    stand_in = a.next_token_ids  # for the pointers a call leaves out (never read)
    has_backup = a.backup_next_token_ids is not None
    padded_path = a.cu_num_draft_tokens is not None
    grid = (num_programs(a.next_token_ids.device, num_tasks),)
    _prepare_next_token_ids_kernel[grid](
        a.sampled_token_ids, a.sampled_token_ids.stride(0), a.sampled_token_ids.size(1), a.vocab_size,
        a.discard_request_mask if a.discard_request_mask is not None else stand_in,
        a.backup_next_token_ids if has_backup else stand_in,
        a.token_ids if not has_backup else stand_in, a.token_ids.stride(0) if not has_backup else 0,
        a.token_ids.size(1) if not has_backup else 0, a.num_tokens_no_spec if not has_backup else stand_in,
        a.cu_num_draft_tokens if padded_path else stand_in, a.query_start_loc if padded_path else stand_in,
        a.next_token_ids, a.valid_sampled_token_count,
        a.num_rejected_tokens if padded_path else stand_in, a.token_indices_to_sample if padded_path else stand_in,
        a.sampled_token_ids.size(0), *ends,
        HAS_DISCARD=a.discard_request_mask is not None, HAS_BACKUP=has_backup, PADDED_PATH=padded_path,
        BLOCK_R=BLOCK_R, BLOCK_S=triton.next_power_of_2(max(a.sampled_token_ids.size(1), 1)),
    )
