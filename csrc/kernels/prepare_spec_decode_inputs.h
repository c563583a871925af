#pragma once
// The metadata of one async spec-decode step in one call: the count correction, positions and
// seq_lens, and the slot mapping of every KV-cache group. Equal to correct_num_computed_tokens,
// then prepare_positions_and_seq_lens, then compute_slot_mapping per group, and built from
// their bodies and the placement math of kernels/slot_math.h.
//
// A rejected call writes nothing: the corrected counts are gathered into scratch and every
// group's positions validated from them (read-only) before the first store; one branch-free
// pass finds the range of every request's positions, which decides for each group without
// per-row counts (the usual case) with no loop of its own. Then one pass over
// the requests stores everything: a request's corrected count, its positions, its seq_len and
// its slots in every group, while its count and block-table rows are hot. The op made the
// positions itself, so it knows a request's positions are consecutive: each group's slots come
// in runs (walk_consecutive_slots), one placement and one block-id load per run, and a group
// under CP without interleave, whose runs are single tokens, is placed token by token without
// a branch. Runs are stored two int64 (four int32) at a time (store_run). Each group's loop is compiled per layout and per divisor kind (shifts when its sizes
// are powers of two), chosen once per group.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/correct_num_computed_tokens.h"
#include "kernels/prepare_positions_and_seq_lens.h"
#include "kernels/slot_math.h"

namespace specops::kernels {

// A group's token loop: its layout and whether its sizes allow shifts, fixed per call.
enum class SlotGroupKind : uint8_t {
  kDisabled,  // slot mapping off: PAD for every token, the table never read
  kSingleRankShifts,
  kSingleRank,
  kContextParallelShifts,
  kContextParallel,
  kInterleavedShifts,
  kInterleaved,
};

// One KV-cache group: its table, its output (exactly one of out64 / out32 is set) and its
// slot-mapping sizes (cp_world_size 1 for a group that is not CP-sharded).
struct SlotMappingGroup {
  const int32_t* block_table = nullptr;
  int64_t* out64 = nullptr;
  int32_t* out32 = nullptr;
  SlotMappingShape shape;
  SlotMappingDivisors divisors;
  SlotMappingShifts shifts;  // meaningful for the *Shifts kinds
  SlotGroupKind kind = SlotGroupKind::kDisabled;
  uint64_t table_covered = 0;  // covered_positions of a whole row (rows without a count)
  // Set by the host op once its checks proved every position of the batch below table_covered
  // (no per-row counts): the store pass then places each request without a bounds test.
  bool all_covered = false;

  SlotMappingGroup(const int32_t* table, int64_t* out_int64, int32_t* out_int32, const SlotMappingShape& s,
                   bool slot_mapping_enabled = true)
      : block_table(table), out64(out_int64), out32(out_int32), shape(s), divisors(s), shifts(s),
        kind(kind_of(s, slot_mapping_enabled)), table_covered(covered_positions(s, s.block_table_cols)) {}

  bool enabled() const { return kind != SlotGroupKind::kDisabled; }

  // Positions below this lie in virtual blocks whose every column `row` may use.
  uint64_t covered(int64_t row) const {
    return shape.num_blocks == nullptr ? table_covered : covered_positions(shape, usable_columns(shape, row));
  }

 private:
  static SlotGroupKind kind_of(const SlotMappingShape& s, bool enabled) {
    if (!enabled) return SlotGroupKind::kDisabled;
    const bool shifts = slot_sizes_are_powers_of_two(s);
    if (s.cp_world_size == 1) return shifts ? SlotGroupKind::kSingleRankShifts : SlotGroupKind::kSingleRank;
    if (s.cp_interleave == 1) return shifts ? SlotGroupKind::kContextParallelShifts : SlotGroupKind::kContextParallel;
    return shifts ? SlotGroupKind::kInterleavedShifts : SlotGroupKind::kInterleaved;
  }
};

// out[k] = base + step * k for k < length (step 1: a run of positions or slots; 0: a run of
// PAD), in the output's width (int32 outputs take the low 32 bits, as a cast of each would).
// The fused op writes every position and every group's slots this way, so it stores two int64
// (or four int32) values a step with the compiler's portable vector types (SSE2 on x86-64, NEON
// on AArch64), unaligned, and finishes the run element by element.
template <typename OutT>
inline void store_run(OutT* out, int64_t length, int64_t base, int64_t step) {
  static_assert(sizeof(OutT) == 8 || sizeof(OutT) == 4, "int64 or int32 outputs");
#if defined(__GNUC__)
  using Lane = std::conditional_t<sizeof(OutT) == 8, uint64_t, uint32_t>;  // unsigned: wrapping
  constexpr int64_t kLanes = 16 / sizeof(OutT);
  typedef Lane Vector __attribute__((vector_size(16)));
  Vector value;
  for (int64_t lane = 0; lane < kLanes; ++lane) value[lane] = static_cast<Lane>(base + step * lane);
  const Lane increment_lane = static_cast<Lane>(step * kLanes);
  const Vector increment = Vector{} + increment_lane;
  int64_t k = 0;
  for (; k + kLanes <= length; k += kLanes) {
    __builtin_memcpy(out + k, &value, sizeof(value));
    value += increment;
  }
  base += step * k;
  for (; k < length; ++k, base += step) out[k] = static_cast<OutT>(base);
#else
  for (int64_t k = 0; k < length; ++k) out[k] = static_cast<OutT>(base + step * k);
#endif
}

// Values store_run_padded writes at a time: two vectors, four int64 or eight int32.
template <typename OutT>
constexpr int64_t kRunChunk = 32 / sizeof(OutT);

// Whether out[0, room) takes store_run_padded's chunks for a run of `length` values.
template <typename OutT>
SPECOPS_HOT_INLINE bool run_chunks_fit(int64_t length, int64_t room) {
  return room - length >= kRunChunk<OutT> - 1;
}

// out[k] = base + step * k for k < length (>= 1), like store_run, in whole chunks
// (run_chunks_fit): it also writes out[length, length rounded up to the chunk), which the
// caller owns and rewrites later (the next request's run, the padding). A decode's query is one
// chunk: two vector stores where a loop of stores and its tail would cost several times more.
template <typename OutT>
SPECOPS_HOT_INLINE void store_run_padded(OutT* out, int64_t length, int64_t base, int64_t step) {
  static_assert(sizeof(OutT) == 8 || sizeof(OutT) == 4, "int64 or int32 outputs");
#if defined(__GNUC__)
  using Lane = std::conditional_t<sizeof(OutT) == 8, uint64_t, uint32_t>;  // unsigned: wrapping
  constexpr int64_t kLanes = 16 / sizeof(OutT);
  typedef Lane Vector __attribute__((vector_size(16)));
  Vector value;
  for (int64_t lane = 0; lane < kLanes; ++lane) value[lane] = static_cast<Lane>(base + step * lane);
  const Vector increment = Vector{} + static_cast<Lane>(step * kLanes);
  int64_t k = 0;
  do {
    __builtin_memcpy(out + k, &value, sizeof(value));
    value += increment;
    __builtin_memcpy(out + k + kLanes, &value, sizeof(value));
    value += increment;
    k += 2 * kLanes;
  } while (k < length);
#else
  for (int64_t k = 0; k < kRunChunk<OutT> * ((length + kRunChunk<OutT> - 1) / kRunChunk<OutT>); ++k) {
    out[k] = static_cast<OutT>(base + step * k);
  }
#endif
}

// The count row r will hold after the correction: gathered for rows < num_corrected, untouched
// (so read from the buffer) above.
struct CorrectedCounts {
  const int32_t* gathered;
  int64_t num_corrected;
  const int32_t* buffer;

  int32_t operator()(int64_t r) const { return r < num_corrected ? gathered[r] : buffer[r]; }
};

// The lowest first position and the highest last position of the requests with tokens (their
// corrected counts in counts[0, num_reqs)), in one branch-free pass shared by every group: a
// group without per-row counts whose table covers [lowest, highest] in every row accepts the
// batch without a loop of its own.
struct RequestPositionRange {
  int64_t lowest = 0;
  int64_t highest = -1;  // below lowest: no request has tokens

  // Whether every position lies in [0, covered) (covered <= 2^31).
  bool inside(uint64_t covered) const { return highest < lowest || (lowest >= 0 && static_cast<uint64_t>(highest) < covered); }
};

inline RequestPositionRange request_position_range(const int32_t* query_start_loc, const int32_t* counts,
                                                   int64_t num_reqs) {
  int64_t lowest = INT64_MAX, highest = INT64_MIN;
  int64_t begin = num_reqs > 0 ? query_start_loc[0] : 0;
  for (int64_t r = 0; r < num_reqs; ++r) {
    const int64_t end = query_start_loc[r + 1];
    const int64_t first = counts[r];
    const bool with_tokens = end != begin;
    lowest = std::min(lowest, with_tokens ? first : INT64_MAX);
    highest = std::max(highest, with_tokens ? first + (end - begin) - 1 : INT64_MIN);
    begin = end;
  }
  RequestPositionRange range;
  if (highest >= lowest) {
    range.lowest = lowest;
    range.highest = highest;
  }
  return range;
}

// First request (batch order) one of whose positions count .. count + query_len - 1 is negative,
// past int32, or stored on this rank beyond the group's table or its row's allocated blocks; -1
// if none. Reads only. Positions grow inside a request and so do their columns, so a request
// whose positions lie inside the virtual blocks that its row covers in full is accepted without
// looking at its tokens.
template <typename IdxT>
int64_t find_request_beyond_block_table(const int32_t* query_start_loc, const CorrectedCounts& counts,
                                        const IdxT* idx_mapping, const SlotMappingGroup& g) {
  const SlotMappingShape& s = g.shape;
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t query_len = query_start_loc[r + 1] - query_start_loc[r];
    if (row < 0 || query_len == 0) continue;
    const int64_t first = counts(r);
    const int64_t last = first + query_len - 1;
    if (first < 0 || last > INT32_MAX) return r;
    if (static_cast<uint64_t>(last) < g.covered(row)) continue;
    const int64_t columns = usable_columns(s, row);
    for (int64_t position = first; position <= last; ++position) {
      const TokenPlacement p = place_token<CpLayout::kInterleaved>(static_cast<uint32_t>(position), g.divisors);
      if (p.local && p.column >= columns) return r;
    }
  }
  return -1;
}

// The slots of one request's consecutive positions first .. first + count - 1 (count >= 1) in
// one group, equal to compute_slot_mapping's, written to out[0, count); returns the largest. A
// row < 0 or past the table gives PAD; positions past the row's covered blocks (never reached
// after the host checks) are placed one at a time with bounds checks. `s` and `d` are the
// group's, passed apart so a caller's loop can hold copies of them in registers.
template <CpLayout kLayout, typename D, typename OutT>
inline int64_t request_slots(int64_t first, int64_t count, int64_t row, const int32_t* block_table,
                             uint64_t table_covered, const SlotMappingShape& s, const D& d, OutT* out) {
  if (row < 0 || row >= s.block_table_rows) {
    store_slot_run(out, count, kPadSlotId, 0);
    return kPadSlotId;
  }
  const int32_t* block_row = block_table + row * s.block_table_stride;
  const uint64_t covered = s.num_blocks == nullptr ? table_covered : covered_positions(s, usable_columns(s, row));
  int64_t largest = kPadSlotId;
  if (first >= 0 && static_cast<uint64_t>(first) < covered &&
      covered - static_cast<uint64_t>(first) >= static_cast<uint64_t>(count)) {
    if constexpr (kLayout == CpLayout::kSingleRank) {
      // The usual decode: every position in one kernel block, so one id load and one run.
      const uint32_t position = static_cast<uint32_t>(first);
      const uint32_t in_block = d.block.mod(position);
      if (static_cast<int64_t>(in_block) + count <= static_cast<int64_t>(d.block.divisor())) {
        const int64_t block_id = block_row[d.block.div(position)];
        const bool stored = block_id >= 0;
        const int64_t base = stored ? block_id * s.block_size + in_block : kPadSlotId;
        store_run(out, count, base, static_cast<int64_t>(stored));
        return stored ? base + count - 1 : kPadSlotId;
      }
    }
    if constexpr (kLayout == CpLayout::kContextParallel) {
      for (int64_t k = 0; k < count; ++k) {
        const int64_t slot = slot_of_covered_position<kLayout>(static_cast<uint32_t>(first + k), block_row, s, d);
        largest = std::max(largest, slot);
        out[k] = static_cast<OutT>(slot);
      }
    } else {
      walk_consecutive_slots<kLayout>(static_cast<uint32_t>(first), count, block_row, s, d,
                                      [&](int64_t begin, int64_t length, int64_t base, int64_t step) {
                                        largest = std::max(largest, base + step * (length - 1));
                                        store_run(out + begin, length, base, step);
                                      });
    }
    return largest;
  }
  const int64_t columns = usable_columns(s, row);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t slot = slot_of_position<kLayout>(first + k, block_row, columns, s, d);
    largest = std::max(largest, slot);
    out[k] = static_cast<OutT>(slot);
  }
  return largest;
}

// One group's slots for requests [r_begin, r_end), whose corrected counts are counts[r]: the
// token loop of one kind, compiled for it (no dispatch per request).
template <CpLayout kLayout, typename D, typename IdxT, typename OutT>
void group_slots_of_requests(const SlotMappingGroup& g, const D& divisors, const int32_t* query_start_loc,
                             const int32_t* counts, const IdxT* idx_mapping, int64_t r_begin, int64_t r_end,
                             OutT* out) {
  // Copies the stores through `out` cannot alias, so the sizes, the table and its bound stay in
  // registers (read through `g`, each would be reloaded after every int64 store).
  const SlotMappingShape s = g.shape;
  const D d = divisors;
  const int32_t* const block_table = g.block_table;
  const uint64_t table_covered = g.table_covered;
  int64_t begin = query_start_loc[r_begin];
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t end = query_start_loc[r + 1];
    const int64_t count = end - begin;
    if (count != 0) {
      const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
      request_slots<kLayout>(counts[r], count, row, block_table, table_covered, s, d, out + begin);
    }
    begin = end;
  }
}

// The same through the group's kind, chosen once per call of this (a block of requests).
template <typename IdxT, typename OutT>
void group_slots_of_requests(const SlotMappingGroup& g, const int32_t* query_start_loc, const int32_t* counts,
                             const IdxT* idx_mapping, int64_t r_begin, int64_t r_end, OutT* out) {
  const auto run = [&](auto layout, const auto& d) {
    group_slots_of_requests<decltype(layout)::value>(g, d, query_start_loc, counts, idx_mapping, r_begin, r_end, out);
  };
  using L = CpLayout;
  switch (g.kind) {
    case SlotGroupKind::kDisabled:
      for (int64_t r = r_begin; r < r_end; ++r) {
        const int64_t begin = query_start_loc[r];
        store_slot_run(out + begin, query_start_loc[r + 1] - begin, kPadSlotId, 0);
      }
      return;
    case SlotGroupKind::kSingleRankShifts:
      return run(std::integral_constant<L, L::kSingleRank>{}, g.shifts);
    case SlotGroupKind::kSingleRank:
      return run(std::integral_constant<L, L::kSingleRank>{}, g.divisors);
    case SlotGroupKind::kContextParallelShifts:
      return run(std::integral_constant<L, L::kContextParallel>{}, g.shifts);
    case SlotGroupKind::kContextParallel:
      return run(std::integral_constant<L, L::kContextParallel>{}, g.divisors);
    case SlotGroupKind::kInterleavedShifts:
      return run(std::integral_constant<L, L::kInterleaved>{}, g.shifts);
    case SlotGroupKind::kInterleaved:
      return run(std::integral_constant<L, L::kInterleaved>{}, g.divisors);
  }
}

// For a group with an int32 output: the first token whose slot (from the corrected counts,
// gathered for every request into `counts`) the output cannot hold, or -1; `wide` holds
// num_tokens int64. Reads only, on every output.
template <typename IdxT>
int64_t find_group_slot_past_int32(const int32_t* query_start_loc, const int32_t* counts, const IdxT* idx_mapping,
                                   const SlotMappingGroup& group, int64_t* wide) {
  const int64_t num_reqs = group.shape.num_reqs;
  group_slots_of_requests(group, query_start_loc, counts, idx_mapping, 0, num_reqs, wide);
  return find_slot_past_int32(wide, query_start_loc[num_reqs]);
}

#if defined(__GNUC__)
#define SPECOPS_COLD __attribute__((noinline, cold))
#else
#define SPECOPS_COLD
#endif

// One covered request's slots in the general way (positions crossing a kernel block, a run
// without room for its chunks): out of line, so the request loop below keeps its values in
// registers (inlined, this path made the loop spill seven of them around every request).
template <CpLayout kLayout, typename D, typename OutT>
SPECOPS_COLD void covered_request_slots(uint32_t first, int64_t count, const int32_t* block_row,
                                        const SlotMappingShape& s, const D& d, OutT* out, int64_t room) {
  if constexpr (kLayout == CpLayout::kContextParallel) {
    for (int64_t k = 0; k < count; ++k) {
      out[k] = static_cast<OutT>(slot_of_covered_position<kLayout>(first + static_cast<uint32_t>(k), block_row, s, d));
    }
  } else {
    store_consecutive_slots<kLayout, false>(first, count, block_row, s.block_size, d, out, room);
  }
}

// One group's slots for requests [r_begin, r_end) of a group whose every position is below
// table_covered (SlotMappingGroup::all_covered): no bounds test per request. The usual request,
// whose positions (this rank's, under CP) lie in one kernel block, costs one block-id load: on
// a single rank its slots are one run, stored in whole chunks (store_run_padded); under CP
// without interleave this rank's tokens alternate with the others', each its slot or PAD.
// kMapped: requests read rows through idx_mapping. Requests whose row is unmapped (< 0) or past
// the table get PAD after the loop.
template <CpLayout kLayout, bool kMapped, typename D, typename IdxT, typename OutT>
void covered_group_slots_of_requests(const SlotMappingGroup& g, const D& divisors, const int32_t* query_start_loc,
                                     const int32_t* counts, const IdxT* idx_mapping, int64_t r_begin, int64_t r_end,
                                     OutT* out) {
  const SlotMappingShape s = g.shape;
  const D d = divisors;
  const int32_t* const block_table = g.block_table;
  const uint64_t rows = static_cast<uint64_t>(s.block_table_rows);
  const int64_t stride = s.block_table_stride;
  const int64_t block_size = s.block_size;
  const int64_t room = s.num_tokens_padded;
  bool any_unmapped = false;
  int64_t begin = query_start_loc[r_begin];
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t end = query_start_loc[r + 1];
    const int64_t count = end - begin;
    const int64_t row = kMapped ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t token = begin;
    begin = end;
    if (count == 0) continue;
    if (static_cast<uint64_t>(row) >= rows) {
      any_unmapped = true;
      continue;
    }
    const int32_t* block_row = block_table + row * stride;
    const uint32_t first = static_cast<uint32_t>(counts[r]);  // in [0, table_covered): checked
    OutT* request_out = out + token;
    if constexpr (kLayout == CpLayout::kSingleRank) {
      const uint32_t in_block = d.block.mod(first);
      if (static_cast<int64_t>(in_block) + count <= block_size && run_chunks_fit<OutT>(count, room - token)) {
        const int64_t block_id = block_row[d.block.div(first)];
        const bool stored = block_id >= 0;
        store_run_padded(request_out, count, stored ? block_id * block_size + in_block : kPadSlotId,
                         static_cast<int64_t>(stored));
        continue;
      }
    } else if constexpr (kLayout == CpLayout::kContextParallel) {
      // Token k's local position is (first + k) / W; all of them in one kernel block: one id.
      const uint32_t last = first + static_cast<uint32_t>(count - 1);
      const uint32_t local_first = d.world.div(first);
      const uint32_t column = d.block.div(local_first);
      if (d.block.div(d.world.div(last)) == column) {
        const int64_t block_id = block_row[column];
        // slot = block_id * block_size + local % block_size = origin + local in this block.
        const int64_t origin = block_id >= 0 ? (block_id - column) * block_size : kPadSlotId;
        const uint32_t world = d.world.divisor();
        for (int64_t k = 0; k < count; ++k) {
          const uint32_t position = first + static_cast<uint32_t>(k);
          const uint32_t local = d.world.div(position);
          const bool mine = (position - local * world == d.rank) & (block_id >= 0);
          request_out[k] = static_cast<OutT>(mine ? origin + local : kPadSlotId);
        }
        continue;
      }
    }
    covered_request_slots<kLayout>(first, count, block_row, s, d, request_out, room - token);
  }
  for (int64_t r = r_begin; any_unmapped && r < r_end; ++r) {
    const int64_t row = kMapped ? static_cast<int64_t>(idx_mapping[r]) : r;
    if (static_cast<uint64_t>(row) >= rows) {
      std::fill(out + query_start_loc[r], out + query_start_loc[r + 1], static_cast<OutT>(kPadSlotId));
    }
  }
}

// One group's slots for requests [r_begin, r_end): the covered loop of the group's kind when its
// positions were proven covered, else the bounds-tested one.
template <typename IdxT, typename OutT>
void store_group_slots(const SlotMappingGroup& g, const int32_t* query_start_loc, const int32_t* counts,
                       const IdxT* idx_mapping, int64_t r_begin, int64_t r_end, OutT* out) {
  const auto run = [&](auto layout, const auto& d) {
    constexpr CpLayout kLayout = decltype(layout)::value;
    if (idx_mapping == nullptr) {
      covered_group_slots_of_requests<kLayout, false>(g, d, query_start_loc, counts, idx_mapping, r_begin, r_end, out);
    } else {
      covered_group_slots_of_requests<kLayout, true>(g, d, query_start_loc, counts, idx_mapping, r_begin, r_end, out);
    }
  };
  using L = CpLayout;
  if (g.all_covered) {
    switch (g.kind) {
      case SlotGroupKind::kDisabled:
        break;
      case SlotGroupKind::kSingleRankShifts:
        return run(std::integral_constant<L, L::kSingleRank>{}, g.shifts);
      case SlotGroupKind::kSingleRank:
        return run(std::integral_constant<L, L::kSingleRank>{}, g.divisors);
      case SlotGroupKind::kContextParallelShifts:
        return run(std::integral_constant<L, L::kContextParallel>{}, g.shifts);
      case SlotGroupKind::kContextParallel:
        return run(std::integral_constant<L, L::kContextParallel>{}, g.divisors);
      case SlotGroupKind::kInterleavedShifts:
        return run(std::integral_constant<L, L::kInterleaved>{}, g.shifts);
      case SlotGroupKind::kInterleaved:
        return run(std::integral_constant<L, L::kInterleaved>{}, g.divisors);
    }
  }
  group_slots_of_requests(g, query_start_loc, counts, idx_mapping, r_begin, r_end, out);
}

// Requests stored together: their positions and seq_lens, then every group's slots while those
// are still in L1; one dispatch per group and block instead of one per request.
constexpr int64_t kRequestsPerBlock = 64;

// Every store of the fused op, after the caller gathered the corrected counts into
// new_computed / new_accepted and validated them: the correction, then one pass over the
// requests, a block of them at a time. request_counts: every request's corrected count.
template <typename PosT, typename IdxT>
void store_spec_decode_inputs(const int32_t* new_computed, const int32_t* new_accepted, int64_t num_corrected,
                              const int32_t* request_counts, int32_t* num_computed_tokens, int32_t* num_accepted_tokens,
                              const int32_t* query_start_loc, PosT* positions, int32_t* seq_lens,
                              const PositionsShape& positions_shape, const IdxT* idx_mapping,
                              const SlotMappingGroup* groups, int64_t num_groups) {
  const int64_t num_reqs = positions_shape.num_reqs;
  const int64_t positions_room = positions_shape.num_tokens_padded;
  std::copy(new_computed, new_computed + num_corrected, num_computed_tokens);
  std::copy(new_accepted, new_accepted + num_corrected, num_accepted_tokens);
  for (int64_t block = 0; block < num_reqs; block += kRequestsPerBlock) {
    const int64_t block_end = std::min(block + kRequestsPerBlock, num_reqs);
    int64_t begin = query_start_loc[block];
    for (int64_t r = block; r < block_end; ++r) {
      const int32_t count = request_counts[r];
      const int64_t end = query_start_loc[r + 1];
      const int64_t query_len = end - begin;
      if (query_len > 0 && run_chunks_fit<PosT>(query_len, positions_room - begin)) {
        store_run_padded(positions + begin, query_len, count, 1);  // count, count + 1, ...
      } else {
        store_run(positions + begin, query_len, count, 1);
      }
      seq_lens[r] = static_cast<int32_t>(static_cast<uint32_t>(count) + static_cast<uint32_t>(query_len));
      begin = end;
    }
    for (int64_t g = 0; g < num_groups; ++g) {
      const SlotMappingGroup& group = groups[g];
      if (group.out64 != nullptr) {
        store_group_slots(group, query_start_loc, request_counts, idx_mapping, block, block_end, group.out64);
      } else {
        store_group_slots(group, query_start_loc, request_counts, idx_mapping, block, block_end,
                          group.out32);  // checked to fit
      }
    }
  }
  const int64_t num_tokens = query_start_loc[num_reqs];
  std::fill(positions + num_tokens, positions + positions_shape.num_tokens_padded, PosT{0});
  std::fill(seq_lens + num_reqs, seq_lens + positions_shape.num_reqs_padded, int32_t{0});
  for (int64_t g = 0; g < num_groups; ++g) {
    const SlotMappingGroup& group = groups[g];
    const int64_t padded = group.shape.num_tokens_padded;
    if (group.out64 != nullptr) {
      std::fill(group.out64 + num_tokens, group.out64 + padded, kPadSlotId);
    } else {
      std::fill(group.out32 + num_tokens, group.out32 + padded, static_cast<int32_t>(kPadSlotId));
    }
  }
}

}  // namespace specops::kernels
