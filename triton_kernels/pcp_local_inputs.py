"""Triton kernel for pcp_local_inputs: this PCP rank's input ids, positions and seq_lens.

One launch. Tasks are the token tiles of the longer of input_ids / positions, then the request
tiles of seq_lens; the persistent grid deals them out round-robin. Every load is at an in-bounds
offset whatever the values: contiguous reads are clamped to the tensor's last entry and selected
with tl.where, gathers are clamped to entry 0 of a tensor the launcher guarantees is not empty
(an empty global tensor is replaced by a one-entry dummy whose count says 0), and an index
outside a global tensor, or a local offset outside [0, N), reads 0.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops.triton_kernels._launch import num_programs

BLOCK_TOKENS = 1024
BLOCK_REQS = 256


@triton.jit
def _gathered(values_ptr, num_values, gather_ptr, last_gather, offset, num_local):
    """values[gather[offset]] where offset < num_local and the index is inside values, else 0."""
    in_local = (offset >= 0) & (offset < num_local)
    safe_offset = tl.minimum(tl.maximum(offset, 0), last_gather)
    index = tl.load(gather_ptr + safe_offset)
    valid = in_local & (index >= 0) & (index < num_values)
    value = tl.load(values_ptr + tl.where(valid, index, 0))
    return tl.where(valid, value, 0)


@triton.jit
def _pcp_local_inputs_kernel(
    global_ids_ptr, global_positions_ptr, gather_ptr, lqsl_ptr, ids_ptr, positions_ptr, seq_lens_ptr,
    num_global_ids, num_global_positions, last_gather, num_local_tokens, num_reqs, num_ids_out, num_positions_out,
    num_reqs_padded,
    BLOCK_TOKENS: tl.constexpr, BLOCK_REQS: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    num_token_tiles = tl.cdiv(tl.maximum(num_ids_out, num_positions_out), BLOCK_TOKENS)
    num_tasks = num_token_tiles + tl.cdiv(num_reqs_padded, BLOCK_REQS)
    for task in range(pid, num_tasks, num_progs):
        if task < num_token_tiles:
            offset = task * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
            ids = _gathered(global_ids_ptr, num_global_ids, gather_ptr, last_gather, offset, num_local_tokens)
            tl.store(ids_ptr + offset, ids.to(ids_ptr.dtype.element_ty), mask=offset < num_ids_out)
            pos = _gathered(global_positions_ptr, num_global_positions, gather_ptr, last_gather, offset,
                            num_local_tokens)
            tl.store(positions_ptr + offset, pos.to(positions_ptr.dtype.element_ty), mask=offset < num_positions_out)
        else:
            req = (task - num_token_tiles) * BLOCK_REQS + tl.arange(0, BLOCK_REQS)
            real = req < num_reqs
            # lqsl has num_reqs + 1 >= 1 entries: clamped reads stay inside it.
            start = tl.load(lqsl_ptr + tl.minimum(req, num_reqs))
            end = tl.load(lqsl_ptr + tl.minimum(req + 1, num_reqs))
            last = _gathered(global_positions_ptr, num_global_positions, gather_ptr, last_gather, end - 1,
                             num_local_tokens).to(tl.int64)
            seq_len = tl.where(real & (end > start), last + 1, 0)
            tl.store(seq_lens_ptr + req, seq_len.to(tl.int32), mask=req < num_reqs_padded)


def _not_empty(t: torch.Tensor) -> torch.Tensor:
    """A gather source the kernel may read at entry 0: t itself, or a one-entry zero."""
    return t if t.numel() > 0 else torch.zeros(1, dtype=t.dtype, device=t.device)


def pcp_local_inputs(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_tokens_out = max(a.input_ids.numel(), a.positions.numel())
    num_tasks = triton.cdiv(num_tokens_out, BLOCK_TOKENS) + triton.cdiv(a.num_reqs_padded, BLOCK_REQS)
    if num_tasks == 0:
        return
    grid = (num_programs(a.input_ids.device, num_tasks),)
    _pcp_local_inputs_kernel[grid](
        _not_empty(a.global_input_ids), _not_empty(a.global_positions), _not_empty(a.local_gather_idx),
        a.local_query_start_loc, a.input_ids, a.positions, a.seq_lens,
        a.global_input_ids.numel(), a.global_positions.numel(), max(a.local_gather_idx.numel() - 1, 0),
        # With an empty gather index there are no local tokens (N <= L = 0): the dummy is never used.
        a.num_local_tokens if a.local_gather_idx.numel() > 0 else 0,
        a.local_query_start_loc.numel() - 1, a.input_ids.numel(), a.positions.numel(), a.num_reqs_padded,
        BLOCK_TOKENS=BLOCK_TOKENS, BLOCK_REQS=BLOCK_REQS,
    )
