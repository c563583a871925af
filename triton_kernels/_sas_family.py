"""Triton parts of the sas family that are not sas_metadata's own: the lightning indexer's tile
cost (csrc/kernels/lightning_indexer_metadata.h) and the S2 blocks of a core's tiles (the
kv-quant layout's s2_max_num). triton_kernels/sas_metadata.py runs them in its one kernel."""

from __future__ import annotations

import triton
import triton.language as tl

# The tile rules of triton_kernels/sas_metadata.py's kernel (its COST constexpr).
COST_SAS = 0
COST_INDEXER_A3 = 1  # t * ((1536 + k) // 2), (2560 + k) above 1024 keys
COST_INDEXER_950 = 2  # the sas block cost


@triton.jit
def _indexer_block_cost(rows, keys, group, COST: tl.constexpr):
    if COST == 1:
        return rows // group * ((tl.where(keys <= 1024, 1536, 2560) + keys) // 2)
    return 6 * ((rows + 15) // 16) + 10 * ((keys + 63) // 64)


@triton.jit
def indexer_tile_cost(m, s1, s2, tiles, leftover, group, m_tile, s2_tile, mask_mode, cmp_ratio, COST: tl.constexpr):
    """Cost, last-block cost, whether M tile m sees keys and its blocks: the keys [0, hi], hi the
    last token's position when causal (clipped into [0, s2 - 1]), else s2 - 1, compressed by
    cmp_ratio and cut into S2 tiles."""
    first_row = m.to(tl.int64) * m_tile
    end_row = tl.minimum(first_row + m_tile, s1 * group)
    last_token = (end_row - 1) // group
    hi = tl.where(mask_mode == 3, last_token + s2 - s1, s2 - 1)
    hi = tl.minimum(tl.maximum(hi, 0), s2 - 1)
    keys = tl.where(s2 > 0, (hi + 1) // cmp_ratio, 0)
    sees = keys > 0
    blocks = (keys + s2_tile - 1) // s2_tile
    tail = keys % s2_tile
    rows = tl.where((m == tiles - 1) & (leftover != 0), leftover, m_tile)
    full_cost = _indexer_block_cost(rows, s2_tile + keys * 0, group, COST)
    tail_cost = tl.where(tail > 0, _indexer_block_cost(rows, tail, group, COST), 0)
    cost = tl.where(sees, full_cost * (blocks - tl.where(tail > 0, 1, 0)) + tail_cost, 0)
    last_block_cost = tl.where(sees, tl.where(tail > 0, tail_cost, full_cost), 0)
    return cost, last_block_cost, sees, blocks
