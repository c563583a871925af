"""move_kv_cache_entries: the accepted tree path's KV entries moved to their final slots, in every
KV cache (every layer, K and V, every KV-cache group) in one op call (one launch on a device)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specops.arguments import checked_tensor_list, ints_per_group
from specops.ops._op import SpecOp
from specops.reference.move_kv_cache_entries import move_kv_cache_entries as _reference

__all__ = ["move_kv_cache_entries"]

_OP = SpecOp("move_kv_cache_entries", _reference)


def move_kv_cache_entries(
    src_slots: torch.Tensor,
    dst_slots: torch.Tensor,
    kv_caches: Sequence[torch.Tensor],
    cache_groups: int | Sequence[int] = 0,
) -> list[torch.Tensor]:
    """Copies the entry at slot src_slots[g, p] to slot dst_slots[g, p] in every cache of group g.

    src_slots, dst_slots: int32 or int64 [num_groups, num_pairs] (the same dtype and shape), row g
    the pairs of KV-cache group g (compaction's pairs, PAD = -1 where there is none). kv_caches:
    the caches to move in, each [num_blocks, block_size, *entry] with the entry contiguous and a
    block's slots one entry apart (vLLM's kv[0] and kv[1] of [2, num_blocks, block_size, heads,
    dim], vllm-ascend's k_cache and v_cache); any dtype, no two sharing memory; slot s is block
    s // block_size, offset s % block_size. cache_groups: each cache's group (its row of the
    pairs), one per cache, or one int for all. The pairs of a row are applied in row order, a pair
    seeing the writes of those before it; a pair with a slot outside [0, num_blocks * block_size)
    of a cache (PAD among them) is skipped there, nothing read or written. Returns kv_caches as a
    list.
    """
    kv_caches = checked_tensor_list(kv_caches, "kv_caches")
    cache_groups = ints_per_group(cache_groups, len(kv_caches), "cache_groups")
    _OP.select()(src_slots, dst_slots, kv_caches, cache_groups)
    return kv_caches
