"""Reference for lightning_indexer_metadata: the indexer's tile costs in torch, then the sas
family's greedy pass and layout (reference/sas_metadata.py).

A tile is 256 query rows (4 tokens of the 64 indexer heads). It sees the keys [0, hi]: hi is its
last token's position when causal (clipped into [0, s2 - 1]: a tile before the first key still
sees key 0), else s2 - 1; compressed by cmp_ratio, those keys are cut into blocks of 2048 (128 on
Ascend950). A block of t tokens and k keys costs t * ((1536 + k) // 2), or t * ((2560 + k) // 2)
above 1024 keys, on A2/A3, and 6 ceil(rows / 16) + 10 ceil(k / 64) on Ascend950.
"""

from __future__ import annotations

import torch

from specops.reference.sas_metadata import (
    InvalidValues,
    batch_lengths,
    ceil_div,
    checked_tiles,
    layout_words,
    summarize_tiles,
)
from specops.sas_family_layout import LAYOUT_KEY_TND, LAYOUT_QUERY_TND, LI_HEADS, SPARSE_MODE_CAUSAL, li_variant
from specops.sas_layout import INT32_MAX, NUM_WORDS, SOURCE_CONSTANT, SOURCE_CUMULATIVE, SOURCE_PER_BATCH, LengthSource
from specops.sas_layout import is_given


def prefix_sum_lengths(tensor: torch.Tensor, name: str, batches: int) -> torch.Tensor:
    """Lengths from prefix sums without the leading 0."""
    values = batch_lengths(LengthSource(SOURCE_PER_BATCH, name, tensor), batches)
    return values - torch.cat([values.new_zeros(1), values[:-1]]) if batches else values


def indexer_lengths(actual_seq_lengths_query, actual_seq_lengths_key, batch_size, max_seqlen_q, max_seqlen_k,
                    layout_query, layout_key, cmp_ratio) -> tuple[int, torch.Tensor, torch.Tensor]:
    """(B, query lengths, uncompressed key lengths) as the kernel reads them."""
    has_query, has_key = is_given(actual_seq_lengths_query), is_given(actual_seq_lengths_key)
    query_batches = actual_seq_lengths_query.numel() if has_query else batch_size
    key_batches = actual_seq_lengths_key.numel() if has_key else batch_size
    batches = min(query_batches, key_batches)
    if not has_query:
        s1 = batch_lengths(LengthSource(SOURCE_CONSTANT, "max_seqlen_q", constant=max_seqlen_q), batches)
    elif layout_query != LAYOUT_QUERY_TND:
        s1 = batch_lengths(LengthSource(SOURCE_PER_BATCH, "actual_seq_lengths_query", actual_seq_lengths_query),
                           batches)
    elif query_batches > key_batches:
        s1 = batch_lengths(LengthSource(SOURCE_CUMULATIVE, "actual_seq_lengths_query", actual_seq_lengths_query),
                           batches)
    else:
        s1 = prefix_sum_lengths(actual_seq_lengths_query, "actual_seq_lengths_query", batches)
    if not has_key:
        s2 = torch.full((batches,), max_seqlen_k * cmp_ratio, dtype=torch.int64)
    elif layout_key == LAYOUT_KEY_TND:
        s2 = prefix_sum_lengths(actual_seq_lengths_key, "actual_seq_lengths_key", batches)
    else:
        s2 = batch_lengths(LengthSource(SOURCE_PER_BATCH, "actual_seq_lengths_key", actual_seq_lengths_key), batches)
    return batches, s1, s2


def indexer_block_cost(rows: torch.Tensor, keys: torch.Tensor, ascend950: bool) -> torch.Tensor:
    if ascend950:
        return 6 * ceil_div(rows, 16) + 10 * ceil_div(keys, 64)
    return rows // LI_HEADS * ((torch.where(keys <= 1024, 1536, 2560) + keys) // 2)


def indexer_schedule_words(s1: torch.Tensor, s2: torch.Tensor, batches: int, causal: bool, cmp_ratio: int,
                           num_cube_cores: int, ascend950: bool) -> list[int]:
    variant = li_variant(ascend950, num_cube_cores)
    m_tile, s2_tile = variant.m_tile_rows, variant.s2_tile
    tiles = checked_tiles(s1, s2, LI_HEADS, m_tile)
    if int(tiles.sum()) == 0:
        return layout_words(None, tiles.tolist(), batches, variant)
    query_rows = s1 * LI_HEADS
    batch = torch.repeat_interleave(torch.arange(batches), tiles)
    first_tile = torch.cumsum(tiles, 0) - tiles
    m = torch.arange(batch.numel()) - first_tile[batch]
    tile_s1, tile_s2 = s1[batch], s2[batch]
    first_row = m * m_tile
    end_row = torch.minimum(first_row + m_tile, query_rows[batch])
    last_token = (end_row - 1) // LI_HEADS
    hi = last_token + tile_s2 - tile_s1 if causal else tile_s2 - 1
    hi = torch.minimum(hi.clamp(min=0), tile_s2 - 1)
    keys = torch.where(tile_s2 > 0, (hi + 1) // cmp_ratio, 0)
    empty = keys == 0
    blocks = ceil_div(keys, s2_tile)
    tail = keys % s2_tile
    rows = end_row - first_row
    full_cost = indexer_block_cost(rows, torch.full_like(keys, s2_tile), ascend950)
    tail_cost = torch.where(tail > 0, indexer_block_cost(rows, tail, ascend950), 0)
    cost = torch.where(empty, 0, full_cost * (blocks - (tail > 0).long()) + tail_cost)
    last_block_cost = torch.where(empty, 0, torch.where(tail > 0, tail_cost, full_cost))
    table = summarize_tiles(s1, batch, first_tile, cost, last_block_cost, empty, blocks)
    return layout_words(table, tiles.tolist(), batches, variant)


def lightning_indexer_metadata(a) -> None:
    # head_dim, the quant modes and sparse_count do not change the schedule.
    """a: the op's argument record (ops/_op.py), its schema's arguments by name."""
    try:
        batches, s1, s2 = indexer_lengths(a.actual_seq_lengths_query, a.actual_seq_lengths_key, a.batch_size, a.max_seqlen_q,
                                          a.max_seqlen_k, a.layout_query, a.layout_key, a.cmp_ratio)
        if (s2 > INT32_MAX).any():
            raise InvalidValues("a key length past int32")
        words = indexer_schedule_words(s1, s2, batches, a.sparse_mode == SPARSE_MODE_CAUSAL, a.cmp_ratio, a.num_cube_cores,
                                       a.ascend950)
    except InvalidValues:
        words = [0] * NUM_WORDS
    a.out.copy_(torch.tensor(words, dtype=torch.int32))
