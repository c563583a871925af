#pragma once
// What the shared-KV sparse-attention schedule (kernels/sas_metadata.h) costs a batch's M tiles:
// the TileCoster of each mask mode and tile shape, and the dispatch to the call's.
#include <cstdint>

#include "kernels/sas_shape.h"

namespace specops::kernels::sas {

struct TileCost {
  int64_t cost = 0;
  int64_t last_block_cost = 0;
  bool sees_kv = false;
  int64_t blocks = 0;  // S2 blocks (window and compressed)
};

// A batch's tiles: the sum of their costs, the most costly one, and the last-block cost of the
// last tile (which sees KV: its last token sees its own position in every mask mode).
struct BatchCost {
  int64_t cost = 0;
  int64_t max_tile = 0;
  int64_t last_block_cost = 0;
  int64_t blocks = 0;
};

// The cost of the M tiles of one batch with s2 > 0, for one mask mode, M tile shape and S2 tile
// (templates: this runs for every tile of every batch). A block of r rows and t KV tokens costs
// 6 ceil(r / 16) + 10 ceil(t / 64); a tile's blocks cover its window's KV range, then its
// compressed KV.
template <int64_t kMaskMode, bool kOneTokenTiles, int kS2TileShift>
struct TileCoster {
  // A copy: the passes store through int64 pointers (the cost table), which the compiler could
  // not tell from the shape's fields behind a reference, so it reloaded them after every store.
  SASShape s;
  // A full window's part of a tile's cost and blocks, and the last-block cost of a tile that sees
  // no compressed KV: the same for every decode token of the call (cost_of is linear in the
  // window's and the compressed KV's blocks), so decode batches cost only their compressed KV.
  int64_t window_cost = 0;
  int64_t window_blocks = 0;
  int64_t window_last_block_cost = 0;

  explicit TileCoster(const SASShape& shape) : s(shape) {
    if (kMaskMode == kMaskBand && kOneTokenTiles && s.win_right == 0 && s.win_left < kInt32Max) {
      const TileCost window = cost_of(s.tile_rows_cost, s.win_left + 1, 0);
      window_cost = window.cost;
      window_blocks = window.blocks;
      window_last_block_cost = window.last_block_cost;
    }
  }

  // Compressed KV tokens of a tile that sees up to position hi.
  int64_t compressed_of(int64_t hi) const {
    const int64_t compressed = (hi + 1) >> s.cmp_ratio_shift;
    return compressed < s.cmp_cap ? compressed : s.cmp_cap;
  }

  // A tile of `rows_cost_of_tile` that sees `window` KV tokens and `compressed` compressed ones.
  // The S2 tile is a multiple of 64, so the 10 ceil(t / 64) of a range's blocks add up to
  // 10 ceil(range / 64).
  SPECOPS_SAS_INLINE static TileCost cost_of(int64_t rows_cost_of_tile, int64_t window, int64_t compressed) {
    TileCost result;
    const int64_t blocks = ceil_shift(window, kS2TileShift) + ceil_shift(compressed, kS2TileShift);
    result.cost = rows_cost_of_tile * blocks + 10 * (ceil_shift(window, 6) + ceil_shift(compressed, 6));
    result.last_block_cost = last_block_cost_of(rows_cost_of_tile, compressed > 0 ? compressed : window);
    result.sees_kv = true;
    result.blocks = blocks;
    return result;
  }

  // The cost of the last block of a range of `range` > 0 KV tokens.
  SPECOPS_SAS_INLINE static int64_t last_block_cost_of(int64_t rows_cost_of_tile, int64_t range) {
    const int64_t last_block = ((range - 1) & ((int64_t{1} << kS2TileShift) - 1)) + 1;
    return rows_cost_of_tile + 10 * ceil_shift(last_block, 6);
  }

  // What `compressed` compressed KV tokens add to a full-window decode tile's cost.
  SPECOPS_SAS_INLINE int64_t decode_compressed_cost(int64_t compressed) const {
    return s.tile_rows_cost * ceil_shift(compressed, kS2TileShift) + 10 * ceil_shift(compressed, 6);
  }

  SPECOPS_SAS_INLINE TileCost operator()(const Batch& batch, int64_t m) const {
    int64_t first_token = m;
    int64_t last_token = m;
    int64_t rows_cost_of_tile = s.tile_rows_cost;
    if (!kOneTokenTiles) {
      const int64_t first_row = m << s.m_tile_shift;
      const int64_t rows = batch.s1 * s.group;
      const int64_t end_row = first_row + (int64_t{1} << s.m_tile_shift) < rows ? first_row + (int64_t{1} << s.m_tile_shift)
                                                                                 : rows;
      first_token = s.group_divisor.div(static_cast<uint32_t>(first_row));
      last_token = s.group_divisor.div(static_cast<uint32_t>(end_row - 1));
      if (m == batch.tiles - 1 && batch.leftover_rows != 0) rows_cost_of_tile = rows_cost(batch.leftover_rows);
    }
    // Token t sits at KV position s2 - s1 + t.
    const int64_t offset = batch.s2 - batch.s1;
    int64_t lo = 0;
    int64_t hi = batch.s2 - 1;
    if (kMaskMode == kMaskCausal) {
      hi = last_token + offset;
      if (hi < 0) return TileCost{};
    } else if (kMaskMode == kMaskBand) {
      // The windows are >= 0, so hi >= lo.
      lo = first_token + offset - s.win_left;
      hi = last_token + offset + s.win_right;
      if (lo >= batch.s2 || hi < 0) return TileCost{};
      if (lo < 0) lo = 0;
      if (hi > batch.s2 - 1) hi = batch.s2 - 1;
    }
    return cost_of(rows_cost_of_tile, hi - lo + 1, compressed_of(hi));
  }

  // How many tiles from tile m on (m < tiles) cost exactly what tile m costs, as batch_cost's
  // runs find them: for one-token tiles the rest of the batch without a mask, the rest of the
  // compressed run in the full-window middle of a band; 1 elsewhere. The greedy pass takes such
  // a run's tiles with one division instead of costing them one by one.
  int64_t equal_tiles(const Batch& batch, int64_t m) const {
    if constexpr (kOneTokenTiles && kMaskMode == kMaskNone) return batch.tiles - m;
    if constexpr (kOneTokenTiles && kMaskMode == kMaskBand) {
      const int64_t offset = batch.s2 - batch.s1;
      const int64_t first_full = s.win_left - offset > 0 ? s.win_left - offset : 0;
      const int64_t end_full = batch.s2 - s.win_right - offset < batch.tiles ? batch.s2 - s.win_right - offset
                                                                              : batch.tiles;
      if (m < first_full || m >= end_full) return 1;
      int64_t run_end = end_full;
      const int64_t compressed = compressed_of(m + offset + s.win_right);
      if (compressed < s.cmp_cap && s.cmp_ratio_shift < 63) {
        const int64_t next = ((compressed + 1) << s.cmp_ratio_shift) - offset - s.win_right - 1;
        if (next < run_end) run_end = next;
      }
      return run_end - m;
    }
    return 1;
  }

  // Adds `count` tiles of one cost.
  static void add(BatchCost* sum, const TileCost& tile, int64_t count) {
    sum->cost += tile.cost * count;
    sum->blocks += tile.blocks * count;
    if (tile.cost > sum->max_tile) sum->max_tile = tile.cost;
  }

  // Every tile of a batch with tiles > 0 and s2 > 0. Tile costs are below 2^52 and a batch's
  // sum is checked against the bound after every tile (or run of equal tiles), so no sum can
  // overflow; past the bound the result is only known to be above it.
  SPECOPS_SAS_INLINE BatchCost batch_cost(const Batch& batch) const {
    BatchCost sum;
    TileCost tile;
    int64_t m = 0;
    if (kMaskMode == kMaskBand && kOneTokenTiles) {
      // Decode batches: the tokens in the middle see a full window, [p - win_left, p +
      // win_right] inside [0, s2), and differ only in their compressed KV, which changes once
      // every cmp_ratio positions (or never: no compressed KV, or capped at cmp_topk). Those
      // cost one run at a time; the tokens near either end are costed one by one.
      const int64_t offset = batch.s2 - batch.s1;
      if (s.win_right == 0 && offset >= s.win_left) {
        // The usual decode batch: every token's window [p - win_left, p] fits (so win_left is
        // below 2^31), and token m's compressed KV is that of the first m + offset + 1
        // positions: the runs alone, without the bounds of the general case below.
        const int64_t first_compressed = compressed_of(offset);
        const int64_t last_compressed = compressed_of(batch.s2 - 1);
        if (first_compressed == last_compressed) {
          // One run (a few tokens that cross no multiple of cmp_ratio, or no compressed KV, or
          // capped at cmp_topk): every token costs what the last does, a product.
          const int64_t cost = window_cost + decode_compressed_cost(last_compressed);
          sum.cost = batch.tiles * cost;
          sum.max_tile = cost;
          sum.last_block_cost = last_compressed > 0 ? last_block_cost_of(s.tile_rows_cost, last_compressed)
                                                    : window_last_block_cost;
          sum.blocks = batch.tiles * (window_blocks + ceil_shift(last_compressed, kS2TileShift));
          return sum;
        }
        const int64_t window = s.win_left + 1;
        const int64_t seen = offset + 1;  // positions token 0 sees, its own included
        while (m < batch.tiles) {
          const int64_t compressed = compressed_of(seen + m - 1);
          int64_t run_end = batch.tiles;
          if (compressed < s.cmp_cap && s.cmp_ratio_shift < 63) {
            const int64_t next = ((compressed + 1) << s.cmp_ratio_shift) - seen;
            if (next < run_end) run_end = next;
          }
          tile = cost_of(s.tile_rows_cost, window, compressed);
          add(&sum, tile, run_end - m);
          if (sum.cost > kMaxTotalCost) return sum;
          m = run_end;
        }
        sum.last_block_cost = tile.last_block_cost;
        return sum;
      }
      const int64_t first_full = s.win_left - offset > 0 ? s.win_left - offset : 0;
      const int64_t end_full = batch.s2 - s.win_right - offset < batch.tiles ? batch.s2 - s.win_right - offset
                                                                              : batch.tiles;
      for (; m < first_full && m < batch.tiles; ++m) {
        tile = (*this)(batch, m);
        add(&sum, tile, 1);
        if (sum.cost > kMaxTotalCost) return sum;
      }
      while (m < end_full) {
        // A full window fits inside [0, s2) here, so both windows are below 2^32 and their sum
        // cannot overflow (outside this loop they may be up to 2^62 each).
        const int64_t window = s.win_left + s.win_right + 1;
        // Position + win_right + 1 is below 2^31 here, so the shifts stay in range.
        const int64_t compressed = compressed_of(m + offset + s.win_right);
        int64_t run_end = end_full;
        if (compressed < s.cmp_cap && s.cmp_ratio_shift < 63) {
          const int64_t next = ((compressed + 1) << s.cmp_ratio_shift) - offset - s.win_right - 1;
          if (next < run_end) run_end = next;
        }
        tile = cost_of(s.tile_rows_cost, window, compressed);
        add(&sum, tile, run_end - m);
        if (sum.cost > kMaxTotalCost) return sum;
        m = run_end;
      }
    }
    for (; m < batch.tiles; ++m) {
      tile = (*this)(batch, m);
      add(&sum, tile, 1);
      if (sum.cost > kMaxTotalCost) return sum;
    }
    sum.last_block_cost = tile.last_block_cost;
    return sum;
  }
};

// Calls fn with the TileCoster of the call's mask mode and tile shapes.
template <bool kOneTokenTiles, int kS2TileShift, typename Fn>
inline auto with_mask_mode(const SASShape& s, Fn&& fn) {
  if (s.mask_mode == kMaskNone) return fn(TileCoster<kMaskNone, kOneTokenTiles, kS2TileShift>(s));
  if (s.mask_mode == kMaskCausal) return fn(TileCoster<kMaskCausal, kOneTokenTiles, kS2TileShift>(s));
  return fn(TileCoster<kMaskBand, kOneTokenTiles, kS2TileShift>(s));
}

template <typename Fn>
inline auto with_tile_coster(const SASShape& s, Fn&& fn) {
  if (s.s2_tile_shift == kAscend950S2TileShift) {
    return s.one_token_tiles ? with_mask_mode<true, kAscend950S2TileShift>(s, fn)
                             : with_mask_mode<false, kAscend950S2TileShift>(s, fn);
  }
  return s.one_token_tiles ? with_mask_mode<true, kS2TileShift>(s, fn) : with_mask_mode<false, kS2TileShift>(s, fn);
}

}  // namespace specops::kernels::sas
