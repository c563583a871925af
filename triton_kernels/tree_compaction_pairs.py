"""Triton kernel for tree_compaction_pairs: every group's KV moves of the accepted tree paths.

Entry tiles of accept_index's flat envelope (entry e = r * S + j) on a persistent grid: the
node's tree index i, its tree-order position verified_seq_len[r] + i and final position
verified_seq_len[r] + j, then in each group both slots (`slots_of_tokens`, compute_slot_mapping's
math) and the pair, PAD where they are the same slot. The groups are flattened arguments for up to
MAX_GROUPS per launch (no tuple arguments: triton-ascend 3.2 has none), each with its row of
src_slots / dst_slots; a call with more groups launches the extra ones first, then the first
MAX_GROUPS with the per-request outputs (WRITE_REQUESTS). Every masked lane reads and writes
offset 0 of its tensor (an empty one is passed as a placeholder element).
"""

from __future__ import annotations

import triton
import triton.language as tl

from specops._step_layout import group_layouts
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels._slot_math import narrowed_slot, slots_of_tokens, usable_columns
from specops.triton_kernels.advance_draft_step import launch_chunks

BLOCK = 128


@triton.jit
def _group_pairs(
    table_ptr, num_blocks_ptr, table_rows, table_cols, table_stride, block_size, blocks_per_kv_block, cp_world_size,
    cp_rank, cp_interleave, enabled, g, src_ptr, src_stride, dst_ptr, dst_stride, e, real, row, source, destination,
    accepted, HAS_NUM_BLOCKS: tl.constexpr,
):
    mapped = tl.where(enabled != 0, accepted, False)
    columns = usable_columns(num_blocks_ptr, row, mapped, table_rows, table_cols, HAS_NUM_BLOCKS)
    src = slots_of_tokens(table_ptr, row, source, mapped, table_rows, columns, table_stride, block_size,
                          blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave)
    dst = slots_of_tokens(table_ptr, row, destination, mapped, table_rows, columns, table_stride, block_size,
                          blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave)
    moved = src != dst  # the same slot, or neither position stored on this rank: nothing moves
    src = tl.where(moved, src, -1)
    dst = tl.where(moved, dst, -1)
    at = tl.where(real, e, 0)
    tl.store(src_ptr + g * src_stride + at, narrowed_slot(src, src_ptr), mask=real)
    tl.store(dst_ptr + g * dst_stride + at, narrowed_slot(dst, dst_ptr), mask=real)


@triton.jit
def _pairs_of_groups(
    t0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, g0,
    t1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, g1,
    t2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, g2,
    t3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, g3,
    src_ptr, src_stride, dst_ptr, dst_stride, e, real, row, source, destination, accepted,
    NUM_GROUPS: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr,
):
    _group_pairs(t0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, g0, src_ptr, src_stride, dst_ptr,
                 dst_stride, e, real, row, source, destination, accepted, HAS_NUM_BLOCKS)
    if NUM_GROUPS > 1:
        _group_pairs(t1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, g1, src_ptr, src_stride, dst_ptr,
                     dst_stride, e, real, row, source, destination, accepted, HAS_NUM_BLOCKS)
    if NUM_GROUPS > 2:
        _group_pairs(t2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, g2, src_ptr, src_stride, dst_ptr,
                     dst_stride, e, real, row, source, destination, accepted, HAS_NUM_BLOCKS)
    if NUM_GROUPS > 3:
        _group_pairs(t3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, g3, src_ptr, src_stride, dst_ptr,
                     dst_stride, e, real, row, source, destination, accepted, HAS_NUM_BLOCKS)


@triton.jit
def _tree_compaction_pairs_kernel(
    accept_index_ptr, accept_token_num_ptr, verified_seq_len_ptr, idx_mapping_ptr, src_ptr, dst_ptr,
    next_seq_lens_ptr, num_accepted_ptr, num_reqs, num_steps, accept_stride, draft_token_num, src_stride, dst_stride,
    t0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, g0,
    t1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, g1,
    t2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, g2,
    t3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, g3,
    NUM_GROUPS: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr,
    WRITE_REQUESTS: tl.constexpr, HAS_NEXT_SEQ_LENS: tl.constexpr, HAS_NUM_ACCEPTED: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    lanes = tl.arange(0, BLOCK)
    if NUM_GROUPS > 0:
        for tile in range(pid, tl.cdiv(num_reqs * num_steps, BLOCK), num_progs):
            e = tile * BLOCK + lanes
            real = e < num_reqs * num_steps
            safe_e = tl.where(real, e, 0)
            r = safe_e // num_steps
            j = safe_e - r * num_steps
            # The accept count clamped into [0, S - 1]: a node past it is not accepted.
            count = tl.load(accept_token_num_ptr + r, mask=real, other=0).to(tl.int64)
            count = tl.minimum(tl.maximum(count, 0), num_steps - 1)
            index = tl.load(accept_index_ptr + (r * accept_stride + j), mask=real, other=-1).to(tl.int64)
            # Compared before the subtraction (an index near -2^63 would wrap).
            first = r.to(tl.int64) * draft_token_num
            accepted = real & (j <= count) & (index >= first) & (index < first + draft_token_num)
            base = tl.load(verified_seq_len_ptr + r, mask=real, other=-1).to(tl.int64)
            # A base past 2^31 - 1 is past every table: no position (the sums are never formed).
            accepted = accepted & (base >= 0) & (base <= 2147483647)
            source = tl.where(accepted, base + (index - first), -1)
            destination = tl.where(accepted, base + j, -1)
            if HAS_IDX_MAPPING:
                # int64 index: a form --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md)
                row = tl.load(idx_mapping_ptr + r.to(tl.int64), mask=real, other=-1).to(tl.int64)
            else:
                # int32, not sign-extended: an extension here made --triton-to-unstructure read its freed
                # offset map (docs/device_readiness.md, "What the NPU route needs of a kernel").
                row = r
            _pairs_of_groups(t0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, g0,
                             t1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, g1,
                             t2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, g2,
                             t3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, g3,
                             src_ptr, src_stride, dst_ptr, dst_stride, e, real, row, source, destination, accepted,
                             NUM_GROUPS, HAS_NUM_BLOCKS)
    if WRITE_REQUESTS:
        for tile in range(pid, tl.cdiv(num_reqs, BLOCK), num_progs):
            r = tile * BLOCK + lanes
            real = r < num_reqs
            safe_r = tl.where(real, r, 0)
            count = tl.load(accept_token_num_ptr + safe_r, mask=real, other=0).to(tl.int64)
            count = tl.minimum(tl.maximum(count, 0), num_steps - 1)
            if HAS_NEXT_SEQ_LENS:
                base = tl.load(verified_seq_len_ptr + safe_r, mask=real, other=0).to(tl.int64)
                tl.store(next_seq_lens_ptr + safe_r, (base + count + 1).to(next_seq_lens_ptr.dtype.element_ty),
                         mask=real)
            if HAS_NUM_ACCEPTED:
                tl.store(num_accepted_ptr + safe_r, (count + 1).to(num_accepted_ptr.dtype.element_ty), mask=real)


def _pair_group_arguments(table, num_blocks, layout: tuple[int, ...], g: int) -> list:
    """The 12 flattened arguments of group g (see _tree_compaction_pairs_kernel). The table and the
    counts are read unmasked at clamped offsets (slots_of_tokens): never an empty tensor."""
    block_size, blocks_per_kv_block, world, rank, interleave, enabled = layout
    return [nonempty(table), nonempty(num_blocks), table.size(0), table.size(1), table.stride(0), block_size,
            blocks_per_kv_block, world, rank, interleave, enabled, g]


def tree_compaction_pairs(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_reqs, num_steps = a.accept_index.shape
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    groups = [_pair_group_arguments(table, a.num_blocks[g] if a.num_blocks else table,
                                    (layout.block_size, layout.blocks_per_kv_block, *layout.cp, int(layout.enabled)), g)
              for g, (table, layout) in enumerate(zip(a.block_tables, layouts))]

    def stand_in() -> list:  # no group at all: never read (NUM_GROUPS 0)
        return _pair_group_arguments(a.accept_index, a.accept_index, (1, 1, 1, 0, 1, 0), 0)

    for chunk, _, write_requests, flat in launch_chunks(groups, stand_in):
        tasks = max(num_reqs * num_steps if chunk else 0, num_reqs if write_requests else 0)
        if tasks == 0:
            continue
        grid = (num_programs(a.accept_index.device, triton.cdiv(tasks, BLOCK)),)
        _tree_compaction_pairs_kernel[grid](
            nonempty(a.accept_index), nonempty(a.accept_token_num), nonempty(a.verified_seq_len),
            nonempty(a.idx_mapping if a.idx_mapping is not None else a.verified_seq_len),
            nonempty(a.src_slots), nonempty(a.dst_slots),
            nonempty(a.next_seq_lens if a.next_seq_lens is not None else a.verified_seq_len),
            nonempty(a.num_accepted_tokens if a.num_accepted_tokens is not None else a.verified_seq_len),
            num_reqs, num_steps, a.accept_index.stride(0), a.draft_token_num, a.src_slots.stride(0),
            a.dst_slots.stride(0), *flat,
            NUM_GROUPS=len(chunk), HAS_IDX_MAPPING=a.idx_mapping is not None, HAS_NUM_BLOCKS=bool(a.num_blocks),
            WRITE_REQUESTS=write_requests and (a.next_seq_lens is not None or a.num_accepted_tokens is not None),
            HAS_NEXT_SEQ_LENS=a.next_seq_lens is not None, HAS_NUM_ACCEPTED=a.num_accepted_tokens is not None,
            BLOCK=BLOCK,
        )
