#pragma once
// The shared-KV sparse-attention schedule's call shape (kernels/sas_metadata.h): the consumer
// layout's constants, what a variant of the family sets, a checked call resolved, and the
// per-batch table the two passes share. Plain C++ over raw pointers, like the passes.
#include <cstdint>

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

}  // namespace specops::kernels::sas
