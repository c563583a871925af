"""Triton kernel for tree_slot_mappings: every draft-tree token's slot in every KV-cache group.

Token tiles of the flat tree layout on a persistent grid: token t = r * D + i is at position
verified_seq_len[r] + i, and each group's slot is advance_draft_step's (`_group_slots`, the groups
its flattened arguments, up to MAX_GROUPS per launch; a call with more launches again for each
MAX_GROUPS of them). The tiles run to the largest padded end, so the padding is PAD from the same
stores (a lane past the tokens is unmapped). Every masked lane reads and writes offset 0 of its
tensor (an empty one is passed as a placeholder element).
"""

from __future__ import annotations

import triton
import triton.language as tl

from specops._step_layout import group_layouts
from specops.triton_kernels._launch import nonempty, num_programs
from specops.triton_kernels.advance_draft_step import _group_slots, draft_group_arguments, launch_chunks

BLOCK = 128


@triton.jit
def _tree_slot_mappings_kernel(
    verified_seq_len_ptr, idx_mapping_ptr, num_tokens, draft_token_num, end,
    t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
    t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
    t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
    t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
    NUM_GROUPS: tl.constexpr, HAS_IDX_MAPPING: tl.constexpr, HAS_NUM_BLOCKS: tl.constexpr, BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    num_progs = tl.num_programs(0)
    for tile in range(pid, tl.cdiv(end, BLOCK), num_progs):
        t = tile * BLOCK + tl.arange(0, BLOCK)
        real = t < num_tokens
        safe_t = tl.where(real, t, 0)
        r = safe_t // draft_token_num
        i = safe_t - r * draft_token_num
        base = tl.load(verified_seq_len_ptr + r, mask=real, other=-1).to(tl.int64)
        # A base past 2^31 - 1 is past every table: no position (the sum is never formed).
        ok = real & (base >= 0) & (base <= 2147483647)
        position = tl.where(ok, base + i, -1)
        if HAS_IDX_MAPPING:
            # int64 index: a form --triton-to-unstructure maps without reading freed memory (docs/device_readiness.md)
            row = tl.load(idx_mapping_ptr + r.to(tl.int64), mask=real, other=-1).to(tl.int64)
        else:
            # int32, not sign-extended: an extension here made --triton-to-unstructure read its freed
            # offset map (docs/device_readiness.md, "What the NPU route needs of a kernel").
            row = r
        # Lanes past the tokens store PAD up to each group's slot_end (_store_group_slots masks the rest).
        _group_slots(t0, s0, n0, rows0, cols0, stride0, bs0, kvb0, w0, rank0, il0, on0, se0,
                     t1, s1, n1, rows1, cols1, stride1, bs1, kvb1, w1, rank1, il1, on1, se1,
                     t2, s2, n2, rows2, cols2, stride2, bs2, kvb2, w2, rank2, il2, on2, se2,
                     t3, s3, n3, rows3, cols3, stride3, bs3, kvb3, w3, rank3, il3, on3, se3,
                     t, row, position, ok, NUM_GROUPS, HAS_NUM_BLOCKS)


def tree_slot_mappings(a) -> None:
    """a: the op's argument record (ops/_op.py), checked."""
    num_tokens = a.verified_seq_len.numel() * a.draft_token_num
    layouts = group_layouts(a.block_sizes, a.blocks_per_kv_block, a.cp_sharded, a.slot_mapping_enabled,
                            a.cp_world_size, a.cp_rank, a.cp_interleave)
    groups = draft_group_arguments(a.block_tables, a.slot_mappings, a.num_blocks, layouts, num_tokens,
                                   a.num_tokens_padded)
    for chunk, num_groups, _, flat in launch_chunks(groups, lambda: []):
        if not chunk:
            return  # no group: nothing to write
        end = max(group[-1] for group in chunk)
        if end == 0:
            continue
        grid = (num_programs(a.verified_seq_len.device, triton.cdiv(end, BLOCK)),)
        _tree_slot_mappings_kernel[grid](
            nonempty(a.verified_seq_len),
            nonempty(a.idx_mapping if a.idx_mapping is not None else a.verified_seq_len),
            num_tokens, a.draft_token_num, end, *flat,
            NUM_GROUPS=num_groups, HAS_IDX_MAPPING=a.idx_mapping is not None, HAS_NUM_BLOCKS=bool(a.num_blocks),
            BLOCK=BLOCK,
        )
