"""Triton kernel for advance_draft_steps: every draft pass of a chain-drafting step in one launch.

Two task loops on one persistent grid: tiles of draft pass 1's token stream (its positions, RoPE
rows and every group's slots copied from the target step and formatted), then tiles of requests,
each computing pass 1's per-request rows and then passes 2..K in registers, the rule applied pass
after pass (advance_draft_step's), writing each pass's position, seq_len, query starts, CP-split
rows, RoPE rows and every group's slot and pair. The groups are flattened pointer and size
arguments for up to MAX_GROUPS groups per launch (no tuple arguments: triton-ascend 3.2 has
none); a step with more launches the extra ones first with WRITE_STEP False (their slots only).
Every masked lane reads and writes an in-bounds offset (its whole offset is 0, the pass's row
included; an empty tensor goes as a placeholder element); RoPE rows are read unmasked at clamped
offsets and selected after (the 2-D masked gather triton-ascend's adapter rejects).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from specops._step_layout import group_layouts
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels._slot_math import narrowed_slot, slots_of_tokens, usable_columns

# 32 lanes a tile (tokens of pass 1, requests of passes 2..K): at 64, the valid call's
# specialization (2 groups, clamp rule, idx_mapping, block counts) spilled on sm_90 under ptxas's
# default register allocation (tests/tooling/test_kernel_compile.py).
BLOCK = 32
MAX_GROUPS = 4


@triton.jit
def _store_slot(slot_ptr, pair_ptr, k, t, slot_stride, pair_stride, storage, slot, live):
    """Token t's slot of pass k (narrowed as the buffer holds it) and its (block, offset) pair,
    floor division (PAD's pair is (-1, storage - 1)). A masked lane's whole offset is 0, pass k's
    row included: the buffers may have no element (then a placeholder one)."""
    kept = narrowed_slot(slot, slot_ptr)
    tl.store(slot_ptr + tl.where(live, k * slot_stride + t, 0), kept, mask=live)
    wide = kept.to(tl.int64)
    block = wide // storage
    block = tl.where((wide % storage != 0) & (wide < 0), block - 1, block)
    offset = wide - block * storage
    pair_at = k * pair_stride + 2 * t
    tl.store(pair_ptr + tl.where(live, pair_at, 0), block.to(pair_ptr.dtype.element_ty), mask=live)
    tl.store(pair_ptr + tl.where(live, pair_at + 1, 0), offset.to(pair_ptr.dtype.element_ty), mask=live)


@triton.jit
def _first_slots(o, p, x, ss, ps, sb, t, num_tokens, num_input_tokens):
    """Pass 1: the target step's slot of each real token, PAD up to num_input_tokens."""
    real = t < num_tokens
    slot = tl.load(x + tl.where(real, t, 0), mask=real, other=-1).to(tl.int64)
    _store_slot(o, p, 0, t, ss, ps, sb, tl.where(real, slot, -1), t < num_input_tokens)


@triton.jit
def _later_slots(tb, o, p, n, rows, cols, stride, bs, kvb, w, rank, il, on, ss, ps, sb, k, r, row, position, mapped,
                 num_reqs, num_reqs_padded, HAS_NUM_BLOCKS: tl.constexpr):
    """Pass k >= 2: each request's slot of its new position in the group, PAD up to num_reqs_padded."""
    real = r < num_reqs
    mapped = real & (mapped != 0) & (on != 0)
    columns = usable_columns(n, row, mapped, rows, cols, HAS_NUM_BLOCKS)
    slot = slots_of_tokens(tb, row, position, mapped, rows, columns, stride, bs, kvb, w, rank, il)
    _store_slot(o, p, k, r, ss, ps, sb, tl.where(mapped, slot, -1), r < num_reqs_padded)


@triton.jit
def _rope_rows(rope_ptr, rows_ptr, local_ptr, rows_at, local_at, t, position, in_stream, real, local_start, per_rank,
               rope_rows, rot_dim, DIM: tl.constexpr):
    """Stream rows t of a pass (its rows start at rows_at and local_at): rope[position] (zeros
    past the cache), and the split rank's local rows t - local_start, zero for the padding tokens."""
    d = tl.arange(0, DIM)
    d_live = d < rot_dim
    column = tl.minimum(d, rot_dim - 1)
    valid = in_stream & (position >= 0) & (position < rope_rows)
    values = tl.load(rope_ptr + tl.where(valid, position, 0)[:, None] * rot_dim + column[None, :])
    values = tl.where(valid[:, None], values, 0.0)
    live = in_stream[:, None] & d_live[None, :]
    at = tl.where(live, rows_at + t[:, None] * rot_dim + d[None, :], 0)
    tl.store(rows_ptr + at, values.to(rows_ptr.dtype.element_ty), mask=live)
    local = t - local_start
    in_local = in_stream & (local >= 0) & (local < per_rank)
    local_live = in_local[:, None] & d_live[None, :]
    at = tl.where(local_live, local_at + local[:, None] * rot_dim + d[None, :], 0)
    tl.store(local_ptr + at, tl.where(real[:, None], values, 0.0).to(local_ptr.dtype.element_ty), mask=local_live)


@triton.jit
def _request_rows(qsl_ptr, local_qsl_ptr, local_seq_ptr, start_ptr, qsl_at, local_qsl_at, local_seq_at, start_at, r,
                  begin, end, seq, local_start, local_end, first, num_reqs, reqs_end):
    """One pass's per-request rows (the pass's row of each table starts at its `_at`): query starts
    (begin = the pass's start of request min(r, R)), the split rank's local starts and seq_lens
    (causal), start positions; zero past R."""
    in_starts = r <= reqs_end
    tl.store(qsl_ptr + tl.where(in_starts, qsl_at + r, 0), begin.to(tl.int32), mask=in_starts)
    clamped_begin = tl.minimum(tl.maximum(begin, local_start), local_end)
    clamped_end = tl.minimum(tl.maximum(end, local_start), local_end)
    tl.store(local_qsl_ptr + tl.where(in_starts, local_qsl_at + r, 0), (clamped_begin - first).to(tl.int32),
             mask=in_starts)
    in_rows = r < reqs_end
    real = r < num_reqs
    beyond = end - clamped_end  # the request's tokens on later ranks
    local_seq = tl.where(real & (clamped_end > clamped_begin) & (seq > 0), tl.maximum(seq - beyond, 0), 0)
    tl.store(local_seq_ptr + tl.where(in_rows, local_seq_at + r, 0), local_seq.to(tl.int32), mask=in_rows)
    tl.store(start_ptr + tl.where(in_rows, start_at + r, 0), tl.where(real, seq - (end - begin), 0).to(tl.int32),
             mask=in_rows)


@triton.jit
def _advance_draft_steps_kernel(
    qsl_ptr, positions_ptr, seq_lens_ptr, token_indices_ptr, rejected_ptr, idx_ptr, rope_ptr,
    out_pos_ptr, out_seq_ptr, out_qsl_ptr, cos_sin_ptr, local_ptr, local_qsl_ptr, local_seq_ptr, start_ptr,
    num_steps, num_reqs, num_tokens, num_input_tokens, num_reqs_padded, num_positions, max_model_len, split_rank,
    reqs_end, rope_rows, rot_dim,
    pos_stride, seq_stride, qsl_stride, lqsl_stride, lseq_stride, start_stride, cs_stride, local_stride,
    first_per_rank, first_pad, later_per_rank, later_pad, first_end, later_end,
    t0, o0, p0, x0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, ss0, ps0, sb0,
    t1, o1, p1, x1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, ss1, ps1, sb1,
    t2, o2, p2, x2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, ss2, ps2, sb2,
    t3, o3, p3, x3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, ss3, ps3, sb3,
    max_model_len_ptr,
    NUM_GROUPS: tl.constexpr, CLAMP: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr,
    WRITE_STEP: tl.constexpr, MAX_LEN_ON_DEVICE: tl.constexpr, BLOCK: tl.constexpr, DIM: tl.constexpr,
):
    pid = tl.program_id(0)
    if MAX_LEN_ON_DEVICE:
        # Read here, never on the host; below 1 (the host op rejects it) taken as 1.
        max_model_len = tl.maximum(tl.load(max_model_len_ptr).to(tl.int64), 1)
    num_progs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    # Draft pass 1's token stream: the target step's positions, RoPE rows and slots.
    for tile in range(pid, tl.cdiv(first_end, BLOCK), num_progs):
        t = tile * BLOCK + lanes
        if WRITE_STEP:
            in_stream = t < first_pad
            real = t < num_tokens
            position = tl.load(positions_ptr + tl.where(real, t, 0), mask=real, other=0).to(tl.int64)
            position = tl.where(real, position, 0)
            tl.store(out_pos_ptr + tl.where(in_stream, t, 0), position, mask=in_stream)
            _rope_rows(rope_ptr, cos_sin_ptr, local_ptr, 0, 0, t, position, in_stream, real,
                       split_rank * first_per_rank, first_per_rank, rope_rows, rot_dim, DIM)
        if NUM_GROUPS > 0:
            _first_slots(o0, p0, x0, ss0, ps0, sb0, t, num_tokens, num_input_tokens)
        if NUM_GROUPS > 1:
            _first_slots(o1, p1, x1, ss1, ps1, sb1, t, num_tokens, num_input_tokens)
        if NUM_GROUPS > 2:
            _first_slots(o2, p2, x2, ss2, ps2, sb2, t, num_tokens, num_input_tokens)
        if NUM_GROUPS > 3:
            _first_slots(o3, p3, x3, ss3, ps3, sb3, t, num_tokens, num_input_tokens)
    # Requests: pass 1's per-request rows, then passes 2..K from the gathered position.
    for tile in range(pid, tl.cdiv(later_end, BLOCK), num_progs):
        r = tile * BLOCK + lanes
        real = r < num_reqs
        safe_r = tl.where(real, r, 0)
        seq = tl.load(seq_lens_ptr + safe_r, mask=real, other=0).to(tl.int64)
        if WRITE_STEP:
            in_rows = r < reqs_end
            tl.store(out_seq_ptr + tl.where(in_rows, r, 0), tl.where(real, seq, 0).to(tl.int32), mask=in_rows)
            first_start = split_rank * first_per_rank
            first_stop = first_start + first_per_rank
            qsl0 = tl.load(qsl_ptr).to(tl.int64)
            first = tl.minimum(tl.maximum(qsl0, first_start), first_stop)
            begin = tl.load(qsl_ptr + tl.minimum(r, num_reqs)).to(tl.int64)
            end = tl.load(qsl_ptr + tl.minimum(r + 1, num_reqs)).to(tl.int64)
            _request_rows(out_qsl_ptr, local_qsl_ptr, local_seq_ptr, start_ptr, 0, 0, 0, 0, r, begin, end, seq,
                          first_start, first_stop, first, num_reqs, reqs_end)
        # Pass 2: advance_draft_step's first step (the gather, the rejected tokens).
        # Read at an int64 index and compared in its own dtype (no extension): the forms
        # --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md).
        index = tl.load(token_indices_ptr + safe_r.to(tl.int64), mask=real, other=0)
        ok = real & (index >= 0) & (index < num_positions)
        current = tl.load(positions_ptr + tl.where(ok, index, 0), mask=ok, other=-1).to(tl.int64)
        base = seq - tl.load(rejected_ptr + safe_r, mask=real, other=0).to(tl.int64)
        # p = current + 1 >= max_model_len, tested on current: at current = 2^63 - 1 the sum
        # wraps to -2^63 (advance_draft_step's rule, as the C++ draft_position).
        over = ok & (current >= max_model_len - 1)
        p = tl.where(ok & (over == 0), current + 1, 0)
        if CLAMP:
            position = tl.where(over, max_model_len - 1, p)
            seq_len = tl.minimum(base + 1, max_model_len)
            mapped = ok.to(tl.int32)
        else:
            position = p
            seq_len = tl.minimum(tl.where(over, 1, base + 1), max_model_len)
            mapped = (ok & (over == 0)).to(tl.int32)
        if HAS_IDX_MAPPING:
            row = tl.load(idx_ptr + safe_r, mask=real, other=-1).to(tl.int64)
        else:
            row = r.to(tl.int64)
        later_start = split_rank * later_per_rank
        later_stop = later_start + later_per_rank
        for k in range(1, num_steps):
            if WRITE_STEP:
                in_stream = r < later_pad
                step_position = tl.where(real, position, 0)
                tl.store(out_pos_ptr + tl.where(in_stream, k * pos_stride + r, 0), step_position, mask=in_stream)
                in_rows = r < reqs_end
                step_seq = tl.where(real, seq_len, 0)
                tl.store(out_seq_ptr + tl.where(in_rows, k * seq_stride + r, 0), step_seq.to(tl.int32), mask=in_rows)
                _request_rows(out_qsl_ptr, local_qsl_ptr, local_seq_ptr, start_ptr, k * qsl_stride, k * lqsl_stride,
                              k * lseq_stride, k * start_stride, r,
                              tl.minimum(r, num_reqs).to(tl.int64), tl.minimum(r + 1, num_reqs).to(tl.int64), step_seq,
                              later_start, later_stop, later_start, num_reqs, reqs_end)
                _rope_rows(rope_ptr, cos_sin_ptr, local_ptr, k * cs_stride, k * local_stride, r, step_position,
                           in_stream, real, later_start, later_per_rank, rope_rows, rot_dim, DIM)
            if NUM_GROUPS > 0:
                _later_slots(t0, o0, p0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, ss0, ps0, sb0, k, r,
                             row, position, mapped, num_reqs, num_reqs_padded, HAS_NUM_BLOCKS)
            if NUM_GROUPS > 1:
                _later_slots(t1, o1, p1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, ss1, ps1, sb1, k, r,
                             row, position, mapped, num_reqs, num_reqs_padded, HAS_NUM_BLOCKS)
            if NUM_GROUPS > 2:
                _later_slots(t2, o2, p2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, ss2, ps2, sb2, k, r,
                             row, position, mapped, num_reqs, num_reqs_padded, HAS_NUM_BLOCKS)
            if NUM_GROUPS > 3:
                _later_slots(t3, o3, p3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, ss3, ps3, sb3, k, r,
                             row, position, mapped, num_reqs, num_reqs_padded, HAS_NUM_BLOCKS)
            # The next pass continues from this one (a failed gather stays at position 0, unmapped).
            p = tl.where(ok, position + 1, 0)
            if CLAMP:
                position = tl.minimum(p, max_model_len - 1)
                seq_len = tl.minimum(seq_len + 1, max_model_len)
            else:
                over = p >= max_model_len
                position = tl.where(over, 0, p)
                seq_len = tl.minimum(tl.where(over, 1, seq_len + 1), max_model_len)
                mapped = (ok & (over == 0)).to(tl.int32)


def _group_arguments(table, out, pairs, target, num_blocks, layout, storage: int) -> list:
    """The 17 flattened arguments of one group (see _advance_draft_steps_kernel), no tensor empty."""
    return [nonempty(table), nonempty(out), nonempty(pairs), nonempty(target), nonempty(num_blocks), table.size(0),
            table.size(1), table.stride(0), layout.block_size, layout.blocks_per_kv_block, *layout.cp, int(layout.enabled),
            out.stride(0), pairs.stride(0), storage]


def advance_draft_steps(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_tokens, rule, storage = a.num_actual_tokens, a.past_max_model_len, a.storage_block_sizes
    # The kernel reads max_model_len_tensor when given (max_model_len is -1 then).
    max_len_at = a.max_model_len_tensor if a.max_model_len_tensor is not None else a.seq_lens
    max_model_len = 1 if a.max_model_len_tensor is not None else a.max_model_len
    num_groups = len(a.block_tables)
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    num_reqs = a.token_indices.numel()
    reqs_end = a.out_seq_lens.size(1)
    first_per_rank = -(-a.num_input_tokens // a.split_size)
    later_per_rank = -(-a.num_reqs_padded // a.split_size)
    first_pad, later_pad = first_per_rank * a.split_size, later_per_rank * a.split_size
    groups = [_group_arguments(table, out, pairs, target, a.num_blocks[g] if a.num_blocks else table, layouts[g],
                               storage[g])
              for g, (table, out, pairs, target) in enumerate(zip(a.block_tables, a.out_slots, a.out_slot_pairs,
                                                                  a.target_slot_mappings))]
    # Never read: NUM_GROUPS stops it.
    stand_in = [a.seq_lens, a.out_seq_lens, a.out_seq_lens, a.seq_lens, a.seq_lens] + [1] * 12
    chunks = [groups[i:i + MAX_GROUPS] for i in range(MAX_GROUPS, num_groups, MAX_GROUPS)] + [groups[:MAX_GROUPS]]
    rot_dim = a.rope_cos_sin_cache.size(1)
    for index, chunk in enumerate(chunks):
        write_step = index == len(chunks) - 1
        flat = [argument for group in chunk for argument in group] + stand_in * (MAX_GROUPS - len(chunk))
        first_end = max(first_pad, a.num_input_tokens) if write_step else a.num_input_tokens
        later_end = max(reqs_end + 1, later_pad, a.num_reqs_padded) if write_step else a.num_reqs_padded
        if a.num_steps < 2 and not write_step:
            later_end = 0
        tiles = triton.cdiv(first_end, BLOCK) + triton.cdiv(later_end, BLOCK)
        if tiles == 0:
            continue
        grid = (num_programs(a.out_positions.device, tiles),)
        # Masked lanes access offset 0 on the NPU route, also of a tensor with no element (a step
        # of no requests): each empty one goes as a placeholder element.
        _advance_draft_steps_kernel[grid](
            a.query_start_loc, nonempty(a.positions), nonempty(a.seq_lens), nonempty(a.token_indices),
            nonempty(a.num_rejected_tokens), nonempty(a.idx_mapping if a.idx_mapping is not None else a.seq_lens),
            a.rope_cos_sin_cache, nonempty(a.out_positions), nonempty(a.out_seq_lens), nonempty(a.out_query_start_loc),
            nonempty(a.out_cos_sin), nonempty(a.out_local_cos_sin), nonempty(a.out_local_query_start_loc),
            nonempty(a.out_local_seq_lens), nonempty(a.out_start_pos),
            a.num_steps, num_reqs, num_tokens, a.num_input_tokens, a.num_reqs_padded, a.positions.numel(), max_model_len,
            a.split_rank, reqs_end, a.rope_cos_sin_cache.size(0), rot_dim,
            a.out_positions.stride(0), a.out_seq_lens.stride(0), a.out_query_start_loc.stride(0),
            a.out_local_query_start_loc.stride(0), a.out_local_seq_lens.stride(0), a.out_start_pos.stride(0),
            a.out_cos_sin.stride(0), a.out_local_cos_sin.stride(0),
            first_per_rank, first_pad, later_per_rank, later_pad, first_end, later_end,
            *flat, nonempty(max_len_at), NUM_GROUPS=len(chunk), CLAMP=rule == 1,
            HAS_IDX_MAPPING=a.idx_mapping is not None, HAS_NUM_BLOCKS=bool(a.num_blocks), WRITE_STEP=write_step,
            MAX_LEN_ON_DEVICE=a.max_model_len_tensor is not None, BLOCK=BLOCK,
            DIM=triton.next_power_of_2(max(rot_dim, 1)),
        )
