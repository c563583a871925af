#pragma once
// The schedule of Ascend's shared-KV sparse-attention kernel: the 1024 words its AI-CPU metadata
// kernel writes (docs/sas_metadata.md), computed on the host.
//
// After a check of every batch's lengths, two passes over the batches. The first fills the cost
// table: running sums of the batches' costs (and what each needs to fit, with half its last
// block), the most costly M tile and the total. The second is the kernel's greedy pass: core i
// gets the limit max(unassigned / (cores - i), most costly M tile) and takes whole batches, then
// whole M tiles, while they fit the limit with half of their last block to spare. A whole batch
// costs one comparison; only the M tiles of the batch a core stops in are costed again, a run
// of equal ones (TileCoster::equal_tiles) with one division.
//
// Plain C++ over raw pointers: no torch, no allocation (the caller lends the per-batch table),
// so the body compiles for an AI CPU as well as for the host.
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/fast_divmod.h"

// For the per-batch and per-tile helpers of the two passes: without it the extension's LTO
// build kept some of them out of line (a dozen instantiations each), a call per batch.
#if defined(__GNUC__)
#define SPECOPS_SAS_INLINE inline __attribute__((always_inline))
#else
#define SPECOPS_SAS_INLINE inline
#endif

namespace specops::kernels::sas {

constexpr int64_t kNumWords = 1024;
constexpr int64_t kEntryWords = 8;
constexpr int64_t kMaxCubeCores = 36;    // AIC_CORE_NUM: FA entries at words 8c
constexpr int64_t kMaxVectorCores = 72;  // AIV_CORE_NUM: FD entries at words 288 + 8v
constexpr int64_t kInt32Min = -2147483647 - 1;
constexpr int64_t kInt32Max = 2147483647;
constexpr int64_t kMaxWindow = int64_t{1} << 62;  // past it the kernel's window sums can overflow
constexpr int64_t kMaxTotalCost = int64_t{1} << 56;  // MAX_TOTAL_COST of sas_layout.py

// FA entry fields (the consumer header's FA_*_INDEX).
constexpr int kFaCoreEnable = 0;
constexpr int kFaBn2Start = 1;
constexpr int kFaMStart = 2;
constexpr int kFaS2Start = 3;
constexpr int kFaBn2End = 4;
constexpr int kFaMEnd = 5;
constexpr int kFaS2End = 6;
constexpr int kFaFirstFdDataWorkspaceIdx = 7;

// ori_mask_mode
constexpr int64_t kMaskNone = 0;
constexpr int64_t kMaskCausal = 3;
constexpr int64_t kMaskBand = 4;

// Where a batch's length comes from: an int argument, tensor[b], tensor[b + 1] - tensor[b], or
// (prefix sums without the leading 0, the indexer's) tensor[b] - tensor[b - 1] with tensor[-1] = 0.
struct LengthSource {
  enum Kind { kConstant, kPerBatch, kCumulative, kPrefixSums };
  Kind kind = kConstant;
  int64_t constant = 0;
  const int32_t* values32 = nullptr;  // one of the two, for the tensor kinds
  const int64_t* values64 = nullptr;

  int64_t value(int64_t i) const { return values32 != nullptr ? values32[i] : values64[i]; }
};

// The variant descriptor: what the members of the family that share this schedule (sas_metadata,
// kv_quant_sas_metadata, lightning_indexer_metadata) set differently. The cost of a tile is the
// other half (TileCoster, or the indexer's coster in lightning_indexer_metadata.h).
struct Variant {
  int64_t m_tile_rows = 0;  // query rows per M tile; 0: one token's G rows
  int s2_tile_shift = 9;    // log2 of the S2 tile
  int64_t entry_words = 8;  // words per FA entry: 8, or 9 with s2_max_num at word 8
  bool paired = false;      // each planned core writes entries 2i and 2i+1, word 8 = most blocks of a core
};

// A call that passed the checks of csrc/cpu/sas_metadata.cpp, resolved.
struct SASShape {
  int64_t num_batches = 0;
  int64_t group = 1;         // query heads per KV head (num_heads_kv is 1)
  bool one_token_tiles = true;  // M tile = one token's G rows (not Ascend950, or G = 64)
  int m_tile_shift = 6;         // log2 of the M tile's rows when it is not one token's
  int s2_tile_shift = 9;
  int64_t entry_words = kEntryWords;
  bool paired = false;
  int64_t mask_mode = kMaskBand;
  int64_t win_left = 0;
  int64_t win_right = 0;
  // Compressed KV of a tile seeing up to KV position hi: min((hi + 1) >> shift, cap). Without
  // compressed KV the shift is 63, which gives 0 for every position.
  int cmp_ratio_shift = 63;
  int64_t cmp_cap = INT64_MAX;  // cmp_topk for SCFA
  int64_t tile_rows_cost = 0;   // 6 ceil(rows / 16) of a full M tile
  int64_t num_cube_cores = 24;
  LengthSource query;
  LengthSource kv;
  FastDivmod group_divisor;  // rows -> tokens, when an M tile is not one token's heads
};

// M tiles are one token's G query rows and S2 tiles 512 KV tokens, or on Ascend950 64 rows and
// 128 tokens.
constexpr int kS2TileShift = 9;
constexpr int kAscend950MTileShift = 6;
constexpr int kAscend950S2TileShift = 7;

inline int log2_of_power_of_two(int64_t value) {
  int shift = 0;
  while ((int64_t{1} << shift) < value) ++shift;
  return shift;
}

// 6 * ceil(rows / 16): what a block's query rows cost.
inline int64_t rows_cost(int64_t rows) { return 6 * ((rows + 15) >> 4); }

// sas_metadata's tiles: one token's heads x 512, or on Ascend950 64 rows x 128.
inline Variant sas_variant(bool ascend950) {
  Variant v;
  if (ascend950) {
    v.m_tile_rows = int64_t{1} << kAscend950MTileShift;
    v.s2_tile_shift = kAscend950S2TileShift;
  }
  return v;
}

inline SASShape make_shape(int64_t num_batches, int64_t num_heads_q, int64_t mask_mode, int64_t win_left,
                           int64_t win_right, bool has_cmp_kv, int64_t cmp_ratio, int64_t cmp_topk,
                           int64_t num_cube_cores, const Variant& variant, LengthSource query, LengthSource kv) {
  SASShape s;
  s.num_batches = num_batches;
  s.group = num_heads_q;
  const int64_t m_tile = variant.m_tile_rows > 0 ? variant.m_tile_rows : num_heads_q;
  s.one_token_tiles = m_tile == num_heads_q;
  s.m_tile_shift = log2_of_power_of_two(m_tile);
  s.s2_tile_shift = variant.s2_tile_shift;
  s.entry_words = variant.entry_words;
  s.paired = variant.paired;
  s.mask_mode = mask_mode;
  s.win_left = win_left;
  s.win_right = win_right;
  if (has_cmp_kv) {
    s.cmp_ratio_shift = log2_of_power_of_two(cmp_ratio);
    if (cmp_topk > 0) s.cmp_cap = cmp_topk;
  }
  s.tile_rows_cost = rows_cost(m_tile);
  s.num_cube_cores = num_cube_cores;
  s.query = query;
  s.kv = kv;
  s.group_divisor = FastDivmod(static_cast<uint32_t>(num_heads_q));
  return s;
}

inline SASShape make_sas_shape(int64_t num_batches, int64_t num_heads_q, int64_t mask_mode, int64_t win_left,
                               int64_t win_right, bool has_cmp_kv, int64_t cmp_ratio, int64_t cmp_topk,
                               int64_t num_cube_cores, bool ascend950, LengthSource query, LengthSource kv) {
  return make_shape(num_batches, num_heads_q, mask_mode, win_left, win_right, has_cmp_kv, cmp_ratio, cmp_topk,
                    num_cube_cores, sas_variant(ascend950), query, kv);
}

enum class SASError : int32_t {
  kNone = 0,
  kOutsideInt32,     // a tensor value the kernel could not have read as int32
  kNegativeLength,   // a query or KV length below 0
  kTooManyRows,      // a batch with more than 2^31 - 1 query rows
  kTooManyTiles,     // more than 2^31 - 1 M tiles in all
  kCostOverflow,     // a total cost past 2^56
};

struct SASStatus {
  SASError error = SASError::kNone;
  bool query_side = true;  // which length: the query's (S1) or the KV's (S2)
  int64_t batch = -1;
  int64_t value = 0;
};

// One batch's lengths and M tiles.
struct Batch {
  int64_t s1 = 0;
  int64_t s2 = 0;
  int64_t tiles = 0;
  int64_t leftover_rows = 0;  // rows of the last M tile when the M tile does not divide them, else 0
};

// The per-batch table, lent by the caller (4 * batch_table_rows values): the lengths as check_lengths
// read them, then what pass 1 fills for the greedy pass. For the greedy pass's whole-batch scan
// to cost one comparison a batch, pass 1 stores running sums, not each batch's own values:
// cost[b] is the cost of batches 0 .. b (so batch b costs cost[b] - cost[b - 1]), fit[b] is
// cost[b] minus half of batch b's last-block cost (the greedy pass takes batch b whole when
// fit[b] is within the core's limit plus what the cores before took; a batch without cost has
// INT64_MIN: it always goes), and blocks[b] the S2 blocks of batches 0 .. b.
//
// When both lengths are constants (max_seqlen_q, max_seqlen_kv) every batch is batch 0: the
// table then has one row, whatever num_batches is (`uniform`), so a large batch_size costs no
// memory, and no time either where there is no work. That row holds batch 0's own values (its
// cost, half of its last-block cost in fit, its blocks), from which every sum is a product.
struct BatchTable {
  int64_t* s1;
  int64_t* s2;
  int64_t* cost;
  int64_t* fit;
  int64_t* blocks = nullptr;  // for a paired layout's s2_max_num
  bool uniform = false;

  int64_t row(int64_t b) const { return uniform ? 0 : b; }

  // The cost of batches 0 .. b - 1, and their blocks (b <= num_batches; the uniform table's
  // products are below the cost bound, which pass 1 checked for all of them).
  int64_t cost_before(int64_t b) const {
    if (uniform) return b * cost[0];
    return b == 0 ? 0 : cost[b - 1];
  }
  int64_t blocks_before(int64_t b) const {
    if (blocks == nullptr) return 0;
    if (uniform) return b * blocks[0];
    return b == 0 ? 0 : blocks[b - 1];
  }
  // Half of batch b's last-block cost, for a batch with a cost.
  int64_t half_last_block_cost(int64_t b) const { return uniform ? fit[0] : cost[b] - fit[b]; }
};

// Rows of the table a call needs.
inline int64_t batch_table_rows(const SASShape& s) {
  const bool uniform = s.query.kind == LengthSource::kConstant && s.kv.kind == LengthSource::kConstant;
  return uniform && s.num_batches > 0 ? 1 : s.num_batches;
}

// The values a call's table needs lent: 4 a row, 5 when paired.
inline int64_t batch_table_size(const SASShape& s) { return (s.paired ? 5 : 4) * batch_table_rows(s); }

inline BatchTable make_batch_table(const SASShape& s, int64_t* scratch) {
  const int64_t rows = batch_table_rows(s);
  BatchTable table{scratch, scratch + rows, scratch + 2 * rows, scratch + 3 * rows};
  if (s.paired) table.blocks = scratch + 4 * rows;
  table.uniform = rows < s.num_batches;
  return table;
}

// For lengths that passed check_lengths (s1 * G fits int32).
inline Batch batch_of(const SASShape& s, int64_t s1, int64_t s2) {
  Batch batch;
  batch.s1 = s1;
  batch.s2 = s2;
  if (s.one_token_tiles) {
    batch.tiles = s1;
  } else {
    const int64_t rows = s1 * s.group;
    batch.tiles = (rows + (int64_t{1} << s.m_tile_shift) - 1) >> s.m_tile_shift;
    batch.leftover_rows = rows & ((int64_t{1} << s.m_tile_shift) - 1);
  }
  return batch;
}

inline int64_t ceil_shift(int64_t a, int shift) { return (a + (int64_t{1} << shift) - 1) >> shift; }

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

struct CostSummary {
  bool any_work = false;  // some batch has query rows and KV
  int64_t total = 0;
  int64_t max_tile = 0;
};

// Reads one length per batch from `source` into `lengths`, as int64. A tensor source's values
// must fit int32 (the kernel reads int32 tensors): returns the first batch that reads one that
// does not, or -1. One loop per source kind and dtype, so the loop has no branch on them.
template <typename T>
inline int64_t read_tensor_lengths(const T* values, bool cumulative, int64_t num_batches, int64_t* lengths) {
  for (int64_t b = 0; b < num_batches; ++b) {
    const int64_t first = values[b];
    const int64_t after = cumulative ? static_cast<int64_t>(values[b + 1]) : 0;
    if (sizeof(T) > 4 && (first < kInt32Min || first > kInt32Max || after < kInt32Min || after > kInt32Max)) {
      return b;
    }
    lengths[b] = cumulative ? after - first : first;
  }
  return -1;
}

// Prefix sums without the leading 0: read as per-batch values, then differenced in place.
template <typename T>
inline int64_t read_prefix_sums(const T* values, int64_t num_batches, int64_t* lengths) {
  const int64_t outside = read_tensor_lengths(values, false, num_batches, lengths);
  if (outside >= 0) return outside;
  for (int64_t b = num_batches - 1; b > 0; --b) lengths[b] -= lengths[b - 1];
  return -1;
}

inline int64_t read_lengths(const LengthSource& source, int64_t num_batches, int64_t* lengths) {
  if (source.kind == LengthSource::kConstant) {
    for (int64_t b = 0; b < num_batches; ++b) lengths[b] = source.constant;
    return -1;
  }
  if (source.kind == LengthSource::kPrefixSums) {
    return source.values32 != nullptr ? read_prefix_sums(source.values32, num_batches, lengths)
                                      : read_prefix_sums(source.values64, num_batches, lengths);
  }
  const bool cumulative = source.kind == LengthSource::kCumulative;
  if (source.values32 != nullptr) return read_tensor_lengths(source.values32, cumulative, num_batches, lengths);
  return read_tensor_lengths(source.values64, cumulative, num_batches, lengths);
}

// Reads and checks every batch's lengths into the table before anything is costed, so that a
// batch far too large is refused without costing the batches before it.
inline SASStatus check_lengths(const SASShape& s, BatchTable table) {
  const int64_t rows = table.uniform ? 1 : s.num_batches;
  const int64_t query_outside = read_lengths(s.query, rows, table.s1);
  if (query_outside >= 0) return SASStatus{SASError::kOutsideInt32, true, query_outside, 0};
  const int64_t kv_outside = read_lengths(s.kv, rows, table.s2);
  if (kv_outside >= 0) return SASStatus{SASError::kOutsideInt32, false, kv_outside, 0};
  // One pass without a branch per batch for the usual call (the lengths are int32 values, so
  // none of its sums and products overflows); only a call it refuses is walked again, batch by
  // batch, for the first refusal in the kernel's order.
  int64_t signs = 0;
  int64_t most_rows = 0;
  int64_t tiles = 0;
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t s1 = table.s1[b];
    const int64_t s2 = table.s2[b];
    signs |= s1 | s2;
    most_rows = s1 > most_rows ? s1 : most_rows;
    tiles += batch_of(s, s1, s2).tiles;
  }
  const bool refused = signs < 0 || most_rows * s.group > kInt32Max || tiles > kInt32Max;
  tiles = 0;
  for (int64_t b = 0; refused && b < rows; ++b) {
    const int64_t s1 = table.s1[b];
    const int64_t s2 = table.s2[b];
    if (s1 < 0) return SASStatus{SASError::kNegativeLength, true, b, s1};
    if (s2 < 0) return SASStatus{SASError::kNegativeLength, false, b, s2};
    if (s1 * s.group > kInt32Max) return SASStatus{SASError::kTooManyRows, true, b, s1 * s.group};
    tiles += batch_of(s, s1, s2).tiles;
    if (tiles > kInt32Max) return SASStatus{SASError::kTooManyTiles, true, b, tiles};
  }
  if (!refused) tiles = rows == 1 ? batch_of(s, table.s1[0], table.s2[0]).tiles : 0;
  if (table.uniform && tiles > 0 && s.num_batches > kInt32Max / tiles) {
    // The batch at which the running sum of equal batches passes 2^31 - 1, as the loop finds it.
    const int64_t b = kInt32Max / tiles;
    return SASStatus{SASError::kTooManyTiles, true, b, (b + 1) * tiles};
  }
  return SASStatus{};
}

// Pass 1, for lengths that passed check_lengths: fills the table and sums the costs. Stops when
// the total passes kMaxTotalCost.
template <typename Coster>
inline SASStatus fill_costs_with(const SASShape& s, const Coster& coster, BatchTable table,
                                 CostSummary* summary) {
  // A local copy (TileCoster holds its shape by value), so that the shape's fields stay in
  // registers across the table's int64 stores, which could otherwise write them.
  const Coster tile_cost = coster;
  *summary = CostSummary{};
  int64_t total = 0;
  int64_t total_blocks = 0;
  int64_t max_tile = 0;
  const int64_t rows = table.uniform ? 1 : s.num_batches;
  int64_t* const blocks = table.blocks;
  for (int64_t b = 0; b < rows; ++b) {
    const Batch batch = batch_of(tile_cost.s, table.s1[b], table.s2[b]);
    BatchCost sum;
    if (batch.tiles > 0 && batch.s2 > 0) {
      sum = tile_cost.batch_cost(batch);
      total += sum.cost;
      // Costs are >= 0, so a batch past the bound takes the total past it too (and a batch stops
      // summing right past it: no overflow).
      if (total > kMaxTotalCost) {
        return SASStatus{SASError::kCostOverflow, true, b, total};
      }
      if (sum.max_tile > max_tile) max_tile = sum.max_tile;
    }
    table.cost[b] = total;
    // A batch without cost gets the sign bit (a fit below any bound: it always goes), set
    // without a branch: cost - 1 is negative exactly for cost 0 (costs are >= 0).
    const uint64_t without_cost = static_cast<uint64_t>(sum.cost - 1) & (uint64_t{1} << 63);
    table.fit[b] = static_cast<int64_t>(static_cast<uint64_t>(total - (sum.last_block_cost >> 1)) | without_cost);
    if (blocks != nullptr) {
      total_blocks += sum.blocks;
      blocks[b] = total_blocks;
    }
  }
  // The uniform table's one row: its sums are batch 0's own values, its fit half of its
  // last-block cost.
  if (table.uniform && rows == 1) table.fit[0] = total > 0 ? total - table.fit[0] : 0;
  // A batch with query rows and KV costs something in every variant (its last tile sees KV).
  summary->any_work = total > 0;
  if (table.uniform && total > 0) {
    // num_batches equal batches, summed without overflow: the batch at which the running sum
    // would pass the bound, as the loop finds it.
    if (s.num_batches > kMaxTotalCost / total) {
      const int64_t b = kMaxTotalCost / total;
      return SASStatus{SASError::kCostOverflow, true, b, (b + 1) * total};
    }
    total *= s.num_batches;
  }
  summary->total = total;
  summary->max_tile = max_tile;
  return SASStatus{};
}

inline SASStatus fill_costs(const SASShape& s, BatchTable table, CostSummary* summary) {
  return with_tile_coster(s, [&](const auto& tile_cost) { return fill_costs_with(s, tile_cost, table, summary); });
}

// The FA entry of planned core `core`: one entry, or the first of its pair.
inline int32_t* fa_entry(const SASShape& s, int32_t* out, int64_t core) {
  return out + s.entry_words * (s.paired ? 2 * core : core);
}

struct Assignment {
  int64_t used = 0;        // cores used
  int64_t max_blocks = 0;  // the most S2 blocks a core got (with table.blocks)
};

// Whether a coster tells runs of equal tiles (TileCoster::equal_tiles); the indexer's does not.
template <typename Coster, typename = void>
struct CountsEqualTiles : std::false_type {};
template <typename Coster>
struct CountsEqualTiles<Coster, std::void_t<decltype(std::declval<const Coster&>().equal_tiles(
                                    std::declval<const Batch&>(), int64_t{0}))>> : std::true_type {};

// The batches the greedy pass takes whole from batch b on (b < num_batches, its first M tile
// unassigned), for a core whose load is `load` under `limit`: the first batch they leave, the
// load after them and their blocks. A batch goes while the load with it stays within the limit
// plus half of its last-block cost; a batch without cost always goes. Over the running sums of
// pass 1 that is one comparison a batch, and for equal batches one division.
struct WholeBatches {
  int64_t end;
  int64_t load;
  int64_t blocks;
};

inline WholeBatches take_whole_batches(const BatchTable& table, int64_t num_batches, int64_t b, int64_t load,
                                       int64_t limit) {
  int64_t end = b;
  if (table.uniform) {
    const int64_t cost = table.cost[0];
    if (cost == 0) {
      end = num_batches;
    } else {
      // load + k * cost <= limit + half, k = 1, 2, ...: the load never passes the limit plus half
      // of a last block, so the bound is >= -cost and the quotient in range.
      const int64_t room = limit + table.fit[0] - load;
      const int64_t fitting = room >= cost ? room / cost : 0;
      end = b + (fitting < num_batches - b ? fitting : num_batches - b);
    }
  } else {
    // Batch e goes when load + (cost of b .. e) <= limit + half of its last block, that is when
    // fit[e] <= limit - load + (cost of batches before b).
    const int64_t bound = limit - load + table.cost_before(b);
    const int64_t* fit = table.fit;
    while (end < num_batches && fit[end] <= bound) ++end;
  }
  return WholeBatches{end, load + table.cost_before(end) - table.cost_before(b),
                      table.blocks_before(end) - table.blocks_before(b)};
}

// Pass 2: the (batch, M tile) cursor after each core, written as FA entries.
template <typename Coster>
inline Assignment assign_cores_with(const SASShape& s, const Coster& coster, BatchTable table,
                                    const CostSummary& summary, int32_t* out) {
  const Coster tile_cost = coster;  // as in fill_costs_with
  const int64_t cores = s.num_cube_cores;
  const int64_t num_batches = s.num_batches;
  const bool count_blocks = table.blocks != nullptr;
  int64_t unassigned = summary.total;
  int64_t b = 0;
  int64_t m = 0;
  // Of batch b, from M tile m on: its cost and blocks.
  int64_t remaining = table.cost_before(1);
  int64_t remaining_blocks = table.blocks_before(1);
  Assignment result;
  for (int64_t core = 0; core < cores && b < num_batches && unassigned > 0; ++core) {
    const int64_t average = unassigned / (cores - core);
    const int64_t limit = average > summary.max_tile ? average : summary.max_tile;
    int64_t load = 0;
    int64_t blocks = 0;
    int32_t* entry = fa_entry(s, out, core);
    entry[kFaCoreEnable] = 1;
    entry[kFaBn2Start] = static_cast<int32_t>(b);
    entry[kFaMStart] = static_cast<int32_t>(m);
    // Whole batches: the one the cursor is in (from M tile m on), then those after it; a batch
    // without cost always goes.
    if (remaining == 0 || load + remaining <= limit + table.half_last_block_cost(table.row(b))) {
      load += remaining;
      blocks += remaining_blocks;
      m = 0;
      if (++b < num_batches) {
        const WholeBatches whole = take_whole_batches(table, num_batches, b, load, limit);
        b = whole.end;
        load = whole.load;
        blocks += whole.blocks;
      }
      if (b < num_batches) {
        remaining = table.cost_before(b + 1) - table.cost_before(b);
        remaining_blocks = table.blocks_before(b + 1) - table.blocks_before(b);
      }
    }
    if (b < num_batches) {
      // Whole M tiles. After a tile the cursor skips the tiles that see no KV. The batch's
      // last tile sees KV and fails the very test the whole batch failed, so the cursor stays
      // inside the batch.
      const Batch batch = batch_of(s, table.s1[table.row(b)], table.s2[table.row(b)]);
      TileCost tile = tile_cost(batch, m);
      while (m < batch.tiles && load + tile.cost <= limit + tile.last_block_cost / 2) {
        // Tile m fits; of the tiles that cost the same after it, those that fit too (the k-th
        // while load + k * cost stays within the limit plus half its last block) go with it.
        int64_t taken = 1;
        if constexpr (CountsEqualTiles<Coster>::value) {
          const int64_t equal = tile_cost.equal_tiles(batch, m);
          if (equal > 1 && tile.cost > 0) {
            const int64_t fitting = (limit + tile.last_block_cost / 2 - load) / tile.cost;
            taken = fitting < equal ? fitting : equal;
          }
        }
        load += taken * tile.cost;
        remaining -= taken * tile.cost;
        blocks += taken * tile.blocks;
        remaining_blocks -= count_blocks ? taken * tile.blocks : 0;
        m += taken - 1;
        do {
          tile = tile_cost(batch, ++m);
        } while (!tile.sees_kv && m < batch.tiles - 1);
      }
    }
    entry[kFaBn2End] = static_cast<int32_t>(b);
    entry[kFaMEnd] = static_cast<int32_t>(m);
    unassigned -= load;
    if (blocks > result.max_blocks) result.max_blocks = blocks;
    result.used = core + 1;
  }
  return result;
}

inline Assignment assign_cores(const SASShape& s, BatchTable table, const CostSummary& summary, int32_t* out) {
  return with_tile_coster(s, [&](const auto& tile_cost) {
    return assign_cores_with(s, tile_cost, table, summary, out);
  });
}

// Writes all 1024 words for a call whose pass 1 succeeded: FA entries of the used cores, zeros
// elsewhere (the S2 fields stay 0: this kernel version never splits a KV range, so no FD entry
// is enabled either).
// The entries of a paired layout, once every planned core is assigned: the second entry of each
// pair a copy of the first, and every pair's word 8 the most blocks a core got (the consumer's
// idle cores sync that many times).
inline void finish_pairs(const SASShape& s, int64_t max_blocks, int32_t* out) {
  if (!s.paired) return;
  for (int64_t core = 0; core < s.num_cube_cores; ++core) {
    int32_t* first = fa_entry(s, out, core);
    for (int64_t w = 0; w < s.entry_words; ++w) first[s.entry_words + w] = first[w];
    first[kEntryWords] = first[s.entry_words + kEntryWords] = static_cast<int32_t>(max_blocks);
  }
}

template <typename Coster>
inline void write_schedule_with(const SASShape& s, const Coster& tile_cost, BatchTable table,
                                const CostSummary& summary, int32_t* out) {
  std::memset(out, 0, kNumWords * sizeof(int32_t));
  int64_t max_blocks = 0;
  if (!summary.any_work) {
    // Core 0 covers every batch at once.
    out[kFaCoreEnable] = 1;
    out[kFaBn2End] = static_cast<int32_t>(s.num_batches);
  } else {
    max_blocks = assign_cores_with(s, tile_cost, table, summary, out).max_blocks;
  }
  finish_pairs(s, max_blocks, out);
}

inline void write_schedule(const SASShape& s, BatchTable table, const CostSummary& summary, int32_t* out) {
  with_tile_coster(s, [&](const auto& tile_cost) { write_schedule_with(s, tile_cost, table, summary, out); });
}

// The whole op for a caller that cannot raise (an AI-CPU kernel): invalid values get 1024 zeros.
inline SASStatus sas_metadata(const SASShape& s, BatchTable table, int32_t* out) {
  CostSummary summary;
  SASStatus status = check_lengths(s, table);
  if (status.error == SASError::kNone) status = fill_costs(s, table, &summary);
  if (status.error != SASError::kNone) {
    for (int64_t w = 0; w < kNumWords; ++w) out[w] = 0;
    return status;
  }
  write_schedule(s, table, summary, out);
  return status;
}

}  // namespace specops::kernels::sas
