"""tree_compaction_pairs: after a tree verify, every KV-cache group's (source, destination) slot
pairs that move the accepted path's KV to its final positions, and the next step's seq_lens and
accepted counts, in one op call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from specops.arguments import check_tensor, checked_tensor_list, group_settings
from specops.ops._op import SpecOp
from specops.reference.tree_compaction_pairs import tree_compaction_pairs as _reference

__all__ = ["CompactionPairs", "tree_compaction_pairs"]


class CompactionPairs(NamedTuple):
    src_slots: torch.Tensor  # [num_groups, bs * num_spec_steps]
    dst_slots: torch.Tensor
    next_seq_lens: torch.Tensor | None
    num_accepted_tokens: torch.Tensor | None


_OP = SpecOp("tree_compaction_pairs", _reference)


def tree_compaction_pairs(
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    verified_seq_len: torch.Tensor,
    block_tables: Sequence[torch.Tensor],
    block_sizes: Sequence[int] | int,
    draft_token_num: int,
    *,
    idx_mapping: torch.Tensor | None = None,
    src_slots: torch.Tensor | None = None,
    dst_slots: torch.Tensor | None = None,
    slot_dtype: torch.dtype = torch.int64,
    next_seq_lens: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    blocks_per_kv_block: Sequence[int] | int = 1,
    cp_sharded: Sequence[bool] | bool = True,
    slot_mapping_enabled: Sequence[bool] | bool = True,
    cp_world_size: int = 1,
    cp_rank: int = 0,
    cp_interleave: int = 1,
    num_blocks: Sequence[torch.Tensor] | None = None,
) -> CompactionPairs:
    """The KV moves of every accepted tree path, for every KV-cache group (up to four per
    launch; docs/tree_kv.md).

    accept_index [bs, S] and accept_token_num [bs] (int32 or int64) as SGLang's
    verify_tree_greedy writes them: accept_index[r, j] = r * D + i_j, the tree index i_j of the
    j-th accepted node (j = 0 the root), for j <= accept_token_num[r]; D = draft_token_num.
    Node j's KV is at its tree-order position verified_seq_len[r] + i_j and belongs at
    verified_seq_len[r] + j: src_slots[g, r * S + j] and dst_slots[g, r * S + j] are those two
    positions' slots in group g (row idx_mapping[r] or r), both PAD where they are the same slot
    or the node is not accepted. Under CP a slot is PAD where this rank does not store its
    position: an entry with a source and no destination is KV this rank holds for another rank,
    one with a destination and no source a slot whose KV another rank holds. Entries keep j's
    order: moved in place, a request's pairs go in increasing j (a pair's destination can be an
    earlier pair's source; docs/tree_kv.md, "Applying the pairs").

    next_seq_lens [bs] (int32 or int64), when given, receives verified_seq_len + accept_token_num
    + 1 (the next step's seq_lens; its root is at that position), num_accepted_tokens [bs]
    accept_token_num + 1 (the tokens the step appended: the root and the accepted drafts).
    src_slots / dst_slots are allocated [len(block_tables), bs * S] of slot_dtype when absent.
    The host op rejects an accept count outside [0, S - 1], an accepted index outside its
    request's tree and a position past its row's table; the device kernels clamp the count and
    write PAD for the rest.
    """
    block_tables = checked_tensor_list(block_tables, "block_tables")
    num_groups = len(block_tables)
    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled = group_settings(
        block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled, num_groups)
    if src_slots is None or dst_slots is None:
        # What the outputs are allocated beside, and from, checked in the op's words first.
        check_tensor(accept_index, "accept_index", [torch.int32, torch.int64], 2)
        if slot_dtype not in (torch.int64, torch.int32):
            raise ValueError(f"slot_dtype must be torch.int64 or torch.int32, got {slot_dtype}")
        shape = (num_groups, accept_index.numel())
        if src_slots is None:
            src_slots = torch.empty(shape, dtype=slot_dtype, device=accept_index.device)
        if dst_slots is None:
            dst_slots = torch.empty(shape, dtype=slot_dtype, device=accept_index.device)
    num_blocks = [] if num_blocks is None else list(num_blocks)
    _OP.select()(accept_index, accept_token_num, verified_seq_len, block_tables, idx_mapping, src_slots, dst_slots,
        num_blocks, draft_token_num, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block,
        cp_sharded, slot_mapping_enabled, next_seq_lens, num_accepted_tokens)
    return CompactionPairs(src_slots, dst_slots, next_seq_lens, num_accepted_tokens)
