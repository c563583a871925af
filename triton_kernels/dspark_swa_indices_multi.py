"""Triton kernel for dspark_swa_indices_multi: every DSpark group's indices in one launch.

Tasks are (tile of BLOCK_ROWS rows of this rank's slice) x (chunk of BLOCK_W entries), up to
the widest group's chunk count. A task finds its rows' requests once (the binary search over
query_start_loc and the seq_len loads are the groups' common part), then writes that chunk of
every group, unrolled over the groups (Triton tuples). The per-group math is
dspark_swa_indices' own (`store_visible_slots`); a chunk past a narrower group's width writes
nothing there.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._cp import cp_token_split
from specops.triton_kernels._launch import num_programs, search_steps
from specops.triton_kernels.dspark_swa_indices import BLOCK_ROWS, BLOCK_W, rows_of_task, store_visible_slots

# At 4 warps the specialization with a window of 1 (a compile-time constant) reaches ptxas's 255
# registers and spills 36 bytes on sm_90; at 8 warps every specialization fits (about 170).
NUM_WARPS = 8


@triton.jit
def _dspark_swa_indices_multi_kernel(
    block_tables, query_start_loc_ptr, seq_lens_ptr, outs, out_lens,
    num_reqs, rows_begin, num_rows, widths, windows, block_sizes,
    table_rows, table_cols, table_strides, out_strides,
    num_chunks, num_search_steps,
    NUM_GROUPS: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_W: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_tasks = tl.cdiv(num_rows, BLOCK_ROWS) * num_chunks
    for task in range(pid, num_tasks, num_progs):
        chunk, row, is_row, is_real, request, query_len, seq_len = rows_of_task(
            task, num_chunks, query_start_loc_ptr, seq_lens_ptr, num_reqs, rows_begin, num_rows, num_search_steps,
            BLOCK_ROWS)
        for g in tl.static_range(NUM_GROUPS):
            store_visible_slots(block_tables[g], outs[g], out_lens[g], row, is_row, is_real, request, query_len,
                                seq_len, chunk, widths[g], windows[g], block_sizes[g], table_rows[g], table_cols[g],
                                table_strides[g], out_strides[g], BLOCK_W)


def dspark_swa_indices_multi(
    block_tables: list[torch.Tensor],
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    windows: list[int],
    num_speculative_tokens: int,
    block_sizes: list[int],
    num_tokens: int,
    widths: list[int],
    cp_size: int,
    cp_rank: int,
    out: list[torch.Tensor],
    out_lens: list[torch.Tensor],
) -> None:
    split = cp_token_split(num_tokens, cp_size, cp_rank)
    num_rows = split.tokens_per_rank
    if num_rows == 0 or not block_tables:
        return
    num_reqs = query_start_loc.numel() - 1
    num_chunks = max(triton.cdiv(width, BLOCK_W) for width in widths)
    grid = (num_programs(query_start_loc.device, triton.cdiv(num_rows, BLOCK_ROWS) * num_chunks),)
    _dspark_swa_indices_multi_kernel[grid](
        tuple(block_tables), query_start_loc, seq_lens, tuple(out), tuple(out_lens),
        num_reqs, split.local_start, num_rows, tuple(widths), tuple(windows), tuple(block_sizes),
        tuple(t.size(0) for t in block_tables), tuple(t.size(1) for t in block_tables),
        tuple(t.stride(0) for t in block_tables), tuple(t.stride(0) for t in out),
        num_chunks, search_steps(num_reqs),
        NUM_GROUPS=len(block_tables), BLOCK_ROWS=BLOCK_ROWS, BLOCK_W=BLOCK_W, num_warps=NUM_WARPS,
    )
