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

#include "kernels/sas_shape.h"
#include "kernels/sas_tile_cost.h"

namespace specops::kernels::sas {

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
