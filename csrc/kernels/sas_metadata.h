#pragma once
// Work schedule of the shared-KV sparse-attention kernel. docs/sas_metadata.md.
//
// Work items are (bn2, m) query tiles with their KV range cut into KV_TILE chunks; an item
// costs chunks + FIXED_COST. Cube cores take consecutive runs of chunks in item order,
// greedily filled up to a cost cap: the cap ceil(total_base / cores) when that fits the cores,
// else one more, which always fits. No contiguous schedule has a smaller maximum (see
// docs/sas_metadata.md), so the cap is the balance the kernel sees.
//
// The body is plain C++ over raw pointers with fixed-size state and no allocation, so it can be
// compiled for an AI CPU as well as for the host.
#include <cstdint>

#include "kernels/fast_divmod.h"

namespace specops::kernels::sas {

constexpr int32_t kLayoutVersion = 0x5A5;
constexpr int64_t kNumWords = 1024;
constexpr int64_t kHeaderWords = 16;
constexpr int64_t kEntryWords = 8;
constexpr int64_t kMTile = 128;
constexpr int64_t kFixedCost = 1;
constexpr int64_t kMaxCubeCores = 36;
constexpr int64_t kMaxVectorCores = 72;
constexpr int64_t kInt32Max = 2147483647;

// A piece needs one chunk plus the fixed cost, so no core can hold anything below this cap.
constexpr int64_t kMinCap = 1 + kFixedCost;

inline int64_t kv_tile_for(int64_t head_dim) {
  const int64_t tile = 32768 / head_dim;
  return tile > 64 ? tile : 64;
}

struct SASShape {
  int64_t num_reqs = 0;
  int64_t num_heads_kv = 1;
  int64_t group = 1;  // query heads per KV head
  int64_t kv_tile = 64;
  int64_t window_left = -1;  // -1: unbounded
  int64_t window_right = 0;  // -1: unbounded
  int64_t num_cube_cores = 24;
  int64_t num_vector_cores = 48;
  // Every tile of every scan divides by the group and the KV tile; both fit uint32 and every
  // dividend is below 2^31 (rows and KV lengths are int32).
  FastDivmod group_divisor;
  FastDivmod kv_tile_divisor;
};

// The shape of a call whose arguments passed the checks of docs/sas_metadata.md (heads divide, num_heads_q
// and head_dim in [1, 2^31), windows >= -1, core counts in range).
inline SASShape make_sas_shape(int64_t num_reqs, int64_t num_heads_q, int64_t num_heads_kv, int64_t head_dim,
                               int64_t window_left, int64_t window_right, int64_t num_cube_cores,
                               int64_t num_vector_cores) {
  SASShape s;
  s.num_reqs = num_reqs;
  s.num_heads_kv = num_heads_kv;
  s.group = num_heads_q / num_heads_kv;
  s.kv_tile = kv_tile_for(head_dim);
  // Windows wider than any int32 sequence see what int32 max sees; clamped, the position
  // arithmetic stays inside int64.
  s.window_left = window_left < kInt32Max ? window_left : kInt32Max;
  s.window_right = window_right < kInt32Max ? window_right : kInt32Max;
  s.num_cube_cores = num_cube_cores;
  s.num_vector_cores = num_vector_cores;
  s.group_divisor = FastDivmod(static_cast<uint32_t>(s.group));
  s.kv_tile_divisor = FastDivmod(static_cast<uint32_t>(s.kv_tile));
  return s;
}

enum class SASError : int32_t { kNone = 0, kNegativeQueryLen, kNegativeKvLen, kTooManyRows, kCostOverflow };

struct SASStatus {
  SASError error = SASError::kNone;
  int64_t request = -1;  // the offending request, where there is one
  int64_t value = 0;     // the offending value
};

// One request's query rows: token-major, rows = q_len * group, cut into m-tiles of kMTile rows.
struct RequestRows {
  int64_t q_len;
  int64_t kv_len;
  int64_t rows;
  int64_t tiles;
};

inline RequestRows request_rows(const int32_t* cu_seqlens_q, const int32_t* seqused_kv, int64_t b,
                                const SASShape& s) {
  RequestRows r;
  r.q_len = static_cast<int64_t>(cu_seqlens_q[b + 1]) - cu_seqlens_q[b];
  r.kv_len = seqused_kv[b];
  r.rows = r.q_len * s.group;
  r.tiles = r.rows > 0 ? (r.rows + kMTile - 1) / kMTile : 0;
  return r;
}

struct TileRange {
  int64_t lo;
  int64_t hi;  // lo >= hi: nothing visible, the tile is not scheduled
  int64_t rows;
};

// The union of the KV ranges of the tokens in m-tile m. Window edges move forward with the
// position and a token at p >= 0 sees p, so the union runs from the first token's lower edge to
// the last token's upper edge. A first token before position 0 that sees nothing has lower edge
// 0, as does the first token that sees something: the union is still right.
inline TileRange tile_range(const RequestRows& r, int64_t m, const SASShape& s) {
  const int64_t row_begin = m * kMTile;
  const int64_t row_end = row_begin + kMTile < r.rows ? row_begin + kMTile : r.rows;
  const int64_t first_position = r.kv_len - r.q_len + s.group_divisor.div(static_cast<uint32_t>(row_begin));
  const int64_t last_position = r.kv_len - r.q_len + s.group_divisor.div(static_cast<uint32_t>(row_end - 1));
  TileRange t;
  t.lo = 0;
  if (s.window_left >= 0 && first_position - s.window_left > 0) t.lo = first_position - s.window_left;
  t.hi = r.kv_len;
  if (s.window_right >= 0 && last_position + s.window_right + 1 < r.kv_len) t.hi = last_position + s.window_right + 1;
  t.rows = row_end - row_begin;
  return t;
}

inline int64_t chunks_of(const TileRange& t, const SASShape& s) {
  return t.hi > t.lo ? s.kv_tile_divisor.div(static_cast<uint32_t>(t.hi - t.lo - 1)) + 1 : 0;
}

// Checks the values and sums the unsplit cost of every scheduled item (chunks + FIXED_COST).
// Stops at the first problem, and as soon as the sum passes int32 (it is int64 so it cannot
// wrap before that check).
inline SASStatus base_cost(const int32_t* cu_seqlens_q, const int32_t* seqused_kv, const SASShape& s,
                           int64_t* total) {
  *total = 0;
  for (int64_t b = 0; b < s.num_reqs; ++b) {
    const RequestRows r = request_rows(cu_seqlens_q, seqused_kv, b, s);
    if (r.q_len < 0) return SASStatus{SASError::kNegativeQueryLen, b, r.q_len};
    if (r.kv_len < 0) return SASStatus{SASError::kNegativeKvLen, b, r.kv_len};
    if (r.rows > kInt32Max) return SASStatus{SASError::kTooManyRows, b, r.rows};
    int64_t request_cost = 0;
    for (int64_t m = 0; m < r.tiles; ++m) {
      const int64_t chunks = chunks_of(tile_range(r, m, s), s);
      if (chunks > 0) request_cost += chunks + kFixedCost;
    }
    *total += request_cost * s.num_heads_kv;
    if (*total > kInt32Max) return SASStatus{SASError::kCostOverflow, -1, *total};
  }
  return SASStatus{};
}

struct SplitItem {
  int64_t bn2;
  int64_t m;
  int64_t ws_start;
  int64_t ws_num;
  int64_t rows;
};

// The schedule before it is laid out in words. Split items sit on boundaries between cores, so
// there are fewer of them than cores.
struct SASPlan {
  int32_t fa[kMaxCubeCores][kEntryWords];
  SplitItem splits[kMaxCubeCores];
  int64_t num_splits;
  int64_t num_slots;
  int64_t total_cost;
};

// Greedy fill of cores up to `cap`: each core takes whole items while they fit, then the part
// of the next item that fits, and the next core continues it.
class GreedyScheduler {
 public:
  GreedyScheduler(const SASShape& s, int64_t cap, int64_t base, SASPlan* plan)
      : s_(s), cap_(cap), unplaced_(base), plan_(plan) {
    plan_->num_splits = 0;
    plan_->num_slots = 0;
    plan_->total_cost = 0;
  }

  // False once the cores ran out: this cap is too small.
  bool fits() const { return !overflow_; }

  void add(int64_t bn2, int64_t m, const TileRange& t) {
    const int64_t chunks = chunks_of(t, s_);
    if (chunks == 0) return;
    // Pieces cost at least the unsplit cost of their items: once that exceeds the room left,
    // this cap cannot fit, and the scan can stop long before the cores run out.
    if (unplaced_ > (s_.num_cube_cores - 1 - core_) * cap_ + (cap_ - load_)) {
      overflow_ = true;
      return;
    }
    unplaced_ -= chunks + kFixedCost;
    if (load_ + chunks + kFixedCost <= cap_) {  // the common case: the whole item fits this core
      int32_t* entry = plan_->fa[core_];
      if (load_ == 0) start_entry(entry, bn2, m, t.lo);
      end_entry(entry, bn2, m, t.hi);
      load_ += chunks + kFixedCost;
      plan_->total_cost += chunks + kFixedCost;
      return;
    }
    for (int64_t done = 0; done < chunks && !overflow_;) {
      if (load_ + kMinCap > cap_) {
        ++core_;
        load_ = 0;
      }
      if (core_ >= s_.num_cube_cores) {
        overflow_ = true;
        return;
      }
      const int64_t room = cap_ - load_ - kFixedCost;
      const int64_t take = chunks - done < room ? chunks - done : room;
      const bool split = done > 0 || take < chunks;
      if (done == 0 && split) {
        plan_->splits[plan_->num_splits++] = SplitItem{bn2, m, plan_->num_slots, 0, t.rows};
      }
      int32_t* entry = plan_->fa[core_];
      if (load_ == 0) start_entry(entry, bn2, m, t.lo + done * s_.kv_tile);
      const int64_t piece_end = t.lo + (done + take) * s_.kv_tile;
      end_entry(entry, bn2, m, piece_end < t.hi ? piece_end : t.hi);
      if (split) {
        if (entry[7] < 0) entry[7] = static_cast<int32_t>(plan_->num_slots);
        ++plan_->num_slots;
        ++plan_->splits[plan_->num_splits - 1].ws_num;
      }
      load_ += take + kFixedCost;
      plan_->total_cost += take + kFixedCost;
      done += take;
    }
  }

 private:
  static void start_entry(int32_t* entry, int64_t bn2, int64_t m, int64_t kv_start) {
    entry[0] = 1;
    entry[1] = static_cast<int32_t>(bn2);
    entry[2] = static_cast<int32_t>(m);
    entry[3] = static_cast<int32_t>(kv_start);
    entry[7] = -1;
  }

  static void end_entry(int32_t* entry, int64_t bn2, int64_t m, int64_t kv_end) {
    entry[4] = static_cast<int32_t>(bn2);
    entry[5] = static_cast<int32_t>(m);
    entry[6] = static_cast<int32_t>(kv_end);
  }

  const SASShape& s_;
  int64_t cap_;
  int64_t unplaced_;  // unsplit cost of the items not yet scheduled
  SASPlan* plan_;
  int64_t core_ = 0;
  int64_t load_ = 0;
  bool overflow_ = false;
};

// Runs the greedy scheduler over every item in (bn2, m) order; false if the cores ran out.
inline bool schedule_with_cap(const int32_t* cu_seqlens_q, const int32_t* seqused_kv, const SASShape& s,
                              int64_t cap, int64_t base, SASPlan* plan) {
  GreedyScheduler scheduler(s, cap, base, plan);
  for (int64_t b = 0; b < s.num_reqs && scheduler.fits(); ++b) {
    const RequestRows r = request_rows(cu_seqlens_q, seqused_kv, b, s);
    for (int64_t n2 = 0; n2 < s.num_heads_kv; ++n2) {
      const int64_t bn2 = b * s.num_heads_kv + n2;
      for (int64_t m = 0; m < r.tiles; ++m) scheduler.add(bn2, m, tile_range(r, m, s));
    }
  }
  return scheduler.fits();
}

inline void clear_plan(SASPlan* plan) {
  for (auto& entry : plan->fa) {
    for (int32_t& word : entry) word = 0;
  }
  plan->num_splits = plan->num_slots = plan->total_cost = 0;
}

// Plans the schedule; writes nothing outside `plan`. The caller rejects the batch (host) or
// writes the all-zero buffer (device) when the status carries an error.
inline SASStatus plan_sas_schedule(const int32_t* cu_seqlens_q, const int32_t* seqused_kv, const SASShape& s,
                                   SASPlan* plan) {
  clear_plan(plan);
  int64_t base = 0;
  const SASStatus status = base_cost(cu_seqlens_q, seqused_kv, s, &base);
  if (status.error != SASError::kNone || base == 0) return status;
  // No core can cost less than lower_bound. A cap of lower_bound + 1 always fits: a core that
  // ends on a split is full, one that ends before an item is at most one short, so the cores
  // hold C * lower_bound >= base units of unsplit work.
  const int64_t lower_bound = (base + s.num_cube_cores - 1) / s.num_cube_cores;
  if (lower_bound < kMinCap || !schedule_with_cap(cu_seqlens_q, seqused_kv, s, lower_bound, base, plan)) {
    clear_plan(plan);
    schedule_with_cap(cu_seqlens_q, seqused_kv, s, lower_bound + 1, base, plan);
  }
  if (plan->total_cost > kInt32Max) return SASStatus{SASError::kCostOverflow, -1, plan->total_cost};
  return SASStatus{};
}

// Lays the plan out in the 1024 words of docs/sas_metadata.md.
inline void write_sas_schedule(const SASPlan& plan, const SASShape& s, int32_t* out) {
  for (int64_t w = 0; w < kNumWords; ++w) out[w] = 0;
  out[0] = kLayoutVersion;
  out[1] = static_cast<int32_t>(s.num_cube_cores);
  out[2] = static_cast<int32_t>(s.num_vector_cores);
  out[3] = static_cast<int32_t>(kMTile);
  out[4] = static_cast<int32_t>(s.kv_tile);
  out[5] = static_cast<int32_t>(plan.total_cost);
  out[6] = static_cast<int32_t>(plan.num_splits);
  out[7] = static_cast<int32_t>(plan.num_slots);
  for (int64_t c = 0; c < s.num_cube_cores; ++c) {
    for (int64_t f = 0; f < kEntryWords; ++f) out[kHeaderWords + kEntryWords * c + f] = plan.fa[c][f];
  }
  if (plan.num_splits == 0) return;
  // Every split item gets floor or ceil of V / S merge entries (the first V % S get the ceil),
  // never more than it has rows; its rows are dealt out as evenly as possible.
  const int64_t per_item = s.num_vector_cores / plan.num_splits;
  const int64_t with_extra = s.num_vector_cores % plan.num_splits;
  int32_t* entry = out + kHeaderWords + kEntryWords * s.num_cube_cores;
  for (int64_t k = 0; k < plan.num_splits; ++k) {
    const SplitItem& item = plan.splits[k];
    const int64_t wanted = per_item + (k < with_extra ? 1 : 0);
    const int64_t entries = wanted < item.rows ? wanted : item.rows;
    const int64_t rows_each = item.rows / entries;
    const int64_t rows_extra = item.rows % entries;
    int64_t row = 0;
    for (int64_t e = 0; e < entries; ++e, entry += kEntryWords) {
      const int64_t row_num = rows_each + (e < rows_extra ? 1 : 0);
      entry[0] = 1;
      entry[1] = static_cast<int32_t>(item.bn2);
      entry[2] = static_cast<int32_t>(item.m);
      entry[3] = static_cast<int32_t>(item.ws_start);
      entry[4] = static_cast<int32_t>(item.ws_num);
      entry[5] = static_cast<int32_t>(row);
      entry[6] = static_cast<int32_t>(row_num);
      row += row_num;
    }
  }
}

// The whole op for a caller that cannot raise (an AI-CPU kernel): an invalid batch gets the
// all-zero buffer, whose version word 0 tells a reader there is no schedule.
inline SASStatus sas_metadata(const int32_t* cu_seqlens_q, const int32_t* seqused_kv, const SASShape& s,
                              SASPlan* plan, int32_t* out) {
  const SASStatus status = plan_sas_schedule(cu_seqlens_q, seqused_kv, s, plan);
  if (status.error != SASError::kNone) {
    for (int64_t w = 0; w < kNumWords; ++w) out[w] = 0;
  } else {
    write_sas_schedule(*plan, s, out);
  }
  return status;
}

}  // namespace specops::kernels::sas
