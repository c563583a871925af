"""tree_slot_mappings: every draft-tree token's KV slot in every KV-cache group, in one op call
(SGLang's tree layout: a request's draft tokens in tree order after its verified prefix)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.arguments import (
    check_allocated_elements,
    check_tensor,
    checked_size,
    checked_tensor_list,
    group_settings,
    padded_argument,
)
from specops.ops._op import SpecOp
from specops.reference.tree_slot_mappings import tree_slot_mappings as _reference

__all__ = ["tree_slot_mappings"]

_OP = SpecOp("tree_slot_mappings", _reference)


def tree_slot_mappings(
    verified_seq_len: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    draft_token_num: int,
    *,
    idx_mapping: torch.Tensor | None = None,
    slot_mappings: Sequence[torch.Tensor] | None = None,
    slot_dtype: torch.dtype = torch.int64,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    num_blocks: Sequence[torch.Tensor] | None = None,
    num_tokens_padded: int | None = None,
) -> list[torch.Tensor]:
    """The KV slot of every token of a batch of draft trees, in every KV-cache group, one launch
    for all groups (up to four; docs/tree_kv.md).

    R = verified_seq_len.numel() (int32 or int64: each request's verified prefix, as SGLang's
    build_tree_kernel_efficient takes it); D = draft_token_num. Token t = r * D + i of the flat
    tree layout (i = 0 the root) is stored at position verified_seq_len[r] + i of request r's
    block-table row (idx_mapping[r] when given, else r; a negative row: PAD), so
    slot_mappings[g][t] is that position's slot in group g, as compute_slot_mapping's under the
    CP layout (PAD where this rank does not store the position; a group with cp_sharded False is
    one rank's, with slot_mapping_enabled False all PAD). block_sizes, blocks_per_kv_block,
    cp_sharded, slot_mapping_enabled, num_blocks: one per group or one for all. slot_mappings
    (persistent buffers, int32 or int64, at least R * D entries each) are PAD in
    [R * D, num_tokens_padded) (default: each buffer's end); absent, they are allocated
    [num_tokens_padded or R * D] of slot_dtype. Returns the slot mappings, in the order of
    block_tables. The host op rejects a negative verified_seq_len, a row past a table and a
    position past its row's table or allocated blocks; the device kernels write PAD there.
    """
    block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled = group_settings(
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    if slot_mappings is None:
        # What the outputs are allocated beside, and from, checked in the op's words first.
        check_tensor(verified_seq_len, "verified_seq_len", [torch.int64, torch.int32], 1)
        draft_token_num = checked_size(draft_token_num, "draft_token_num", 1)
        if num_tokens_padded is not None:
            size = checked_size(num_tokens_padded, "num_tokens_padded", 0)
        else:
            check_allocated_elements(verified_seq_len.numel(), draft_token_num, "draft_token_num",
                                     "verified_seq_len.numel() x draft_token_num slots per group")
            size = verified_seq_len.numel() * draft_token_num
        if slot_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"slot_dtype must be torch.int64 or torch.int32, got {slot_dtype}")
        slot_mappings = [torch.empty(size, dtype=slot_dtype, device=verified_seq_len.device)
                         for _ in range(num_groups)]
    else:
        slot_mappings = checked_tensor_list(slot_mappings, "slot_mappings")
    num_blocks = [] if num_blocks is None else list(num_blocks)
    num_tokens_padded = padded_argument(num_tokens_padded, "num_tokens_padded")
    _OP.select()(verified_seq_len, block_tables, idx_mapping, slot_mappings, num_blocks, draft_token_num,
        num_tokens_padded, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded,
        slot_mapping_enabled)
    return slot_mappings
