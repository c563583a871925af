#pragma once
// The schedule of Ascend's lightning indexer (vllm-ascend `npu_vllm_quant_lightning_indexer`):
// the words its AI-CPU metadata kernel writes (docs/dsa_metadata_family.md), on the host.
//
// The sas schedule's passes and layout (sas_metadata.h: the length checks, the cost table, the
// greedy pass, the 8-word entries) with the indexer's tiles and costs: M tiles of 256 query rows
// (4 tokens of the 64 indexer heads), the causal key range of a tile compressed by cmp_ratio and
// cut into blocks of 2048 keys (128 on Ascend950). A block of t tokens and k keys costs
// t * ((1536 + k) / 2), or t * ((2560 + k) / 2) above 1024 keys, on A2/A3, and the sas block cost
// on Ascend950.
#include <cstdint>

#include "kernels/sas_metadata.h"

namespace specops::kernels::lightning_indexer {

namespace sas = specops::kernels::sas;

constexpr int64_t kMTileRows = 256;
constexpr int kS2TileShift = 11;           // 2048 keys (A2/A3)
constexpr int kAscend950S2TileShift = 7;   // 128 keys
constexpr int64_t kHeads = 64;             // the only num_heads_q the kernel accepts

// sparse_mode
constexpr int64_t kModeAll = 0;
constexpr int64_t kModeCausal = 3;

inline sas::Variant variant(bool ascend950) {
  sas::Variant v;
  v.m_tile_rows = kMTileRows;
  v.s2_tile_shift = ascend950 ? kAscend950S2TileShift : kS2TileShift;
  return v;
}

// The indexer's tile costs, in the interface the sas passes take (TileCoster of sas_metadata.h).
struct TileCoster {
  const sas::SASShape& s;
  bool causal;
  bool ascend950;
  int64_t cmp_ratio;

  int64_t block_cost(int64_t rows, int64_t keys) const {
    if (ascend950) return sas::rows_cost(rows) + 10 * sas::ceil_shift(keys, 6);
    const int64_t tokens = rows / s.group;
    return tokens * (((keys <= 1024 ? 1536 : 2560) + keys) / 2);
  }

  sas::TileCost operator()(const sas::Batch& batch, int64_t m) const {
    sas::TileCost result;
    if (m >= batch.tiles || batch.s2 <= 0) return result;
    const int64_t first_row = m * kMTileRows;
    const int64_t rows_end = batch.s1 * s.group;
    const int64_t end_row = first_row + kMTileRows < rows_end ? first_row + kMTileRows : rows_end;
    const int64_t last_token = (end_row - 1) / s.group;
    // The keys of [0, hi], hi clipped into [0, s2 - 1] (a tile before the first key still sees
    // key 0), after compression.
    int64_t hi = causal ? last_token + batch.s2 - batch.s1 : batch.s2 - 1;
    if (hi < 0) hi = 0;
    if (hi > batch.s2 - 1) hi = batch.s2 - 1;
    const int64_t keys = (hi + 1) / cmp_ratio;
    if (keys == 0) return result;
    const int shift = s.s2_tile_shift;
    const int64_t blocks = sas::ceil_shift(keys, shift);
    const int64_t tail = keys & ((int64_t{1} << shift) - 1);
    const int64_t rows = end_row - first_row;
    const int64_t full_cost = block_cost(rows, int64_t{1} << shift);
    const int64_t tail_cost = tail != 0 ? block_cost(rows, tail) : 0;
    result.cost = full_cost * (blocks - (tail != 0 ? 1 : 0)) + tail_cost;
    result.last_block_cost = tail != 0 ? tail_cost : full_cost;
    result.sees_kv = true;
    result.blocks = blocks;
    return result;
  }

  // Every tile of a batch; stops past the cost bound, as the sas coster.
  sas::BatchCost batch_cost(const sas::Batch& batch) const {
    sas::BatchCost sum;
    for (int64_t m = 0; m < batch.tiles; ++m) {
      const sas::TileCost tile = (*this)(batch, m);
      sum.cost += tile.cost;
      sum.blocks += tile.blocks;
      if (tile.cost > sum.max_tile) sum.max_tile = tile.cost;
      if (tile.sees_kv) sum.last_block_cost = tile.last_block_cost;
      if (sum.cost > sas::kMaxTotalCost) return sum;
    }
    return sum;
  }
};

// The whole op for a caller that cannot raise: invalid values get 1024 zeros.
inline sas::SASStatus lightning_indexer_metadata(const sas::SASShape& s, const TileCoster& coster,
                                                 sas::BatchTable table, int32_t* out) {
  sas::CostSummary summary;
  sas::SASStatus status = sas::check_lengths(s, table);
  if (status.error == sas::SASError::kNone) status = sas::fill_costs_with(s, coster, table, &summary);
  if (status.error != sas::SASError::kNone) {
    for (int64_t w = 0; w < sas::kNumWords; ++w) out[w] = 0;
    return status;
  }
  sas::write_schedule_with(s, coster, table, summary, out);
  return status;
}

}  // namespace specops::kernels::lightning_indexer
