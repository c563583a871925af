#pragma once
// The KV-cache groups of the fused prepare_spec_decode_inputs (kernels/prepare_spec_decode_inputs.h)
// and the store loop of a group whose positions its host op proved covered: one block-id load
// and one chunked run for a decode request, which is where the fused op's time per request goes.
#include <algorithm>
#include <cstdint>
#include <type_traits>

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

#if defined(__GNUC__)
// The first 16 bytes of the run base, base + step, ... (step 0 or 1) in the output's width, and
// the step between one such vector and the next: what store_run and store_run_padded write from.
template <typename OutT>
struct RunVectors {
  using Lane = std::conditional_t<sizeof(OutT) == 8, uint64_t, uint32_t>;  // unsigned: wrapping
  static constexpr int64_t kLanes = 16 / sizeof(OutT);
  typedef Lane Vector __attribute__((vector_size(16)));
  Vector first;
  Vector increment;

  // Lane k's offset k from the run's first value.
  static SPECOPS_HOT_INLINE Vector lane_index() {
    if constexpr (kLanes == 2) {
      return Vector{0, 1};
    } else {
      return Vector{0, 1, 2, 3};
    }
  }

  // A broadcast and a masked add, all in vector registers: set lane by lane, the compiler built
  // the vector in memory and reloaded it whole, a store-forwarding stall on every run.
  SPECOPS_HOT_INLINE RunVectors(int64_t base, int64_t step) {
    const Vector steps = Vector{} - static_cast<Lane>(step);  // all ones for step 1, zero for 0
    first = (Vector{} + static_cast<Lane>(base)) + (lane_index() & steps);
    increment = Vector{} + static_cast<Lane>(step * kLanes);
  }
};
#endif

// out[k] = base + step * k for k < length (step 1: a run of positions or slots; 0: a run of
// PAD), in the output's width (int32 outputs take the low 32 bits, as a cast of each would).
// The fused op writes every position and every group's slots this way, so it stores two int64
// (or four int32) values a step with the compiler's portable vector types (SSE2 on x86-64, NEON
// on AArch64), unaligned, and finishes the run element by element.
template <typename OutT>
inline void store_run(OutT* out, int64_t length, int64_t base, int64_t step) {
  static_assert(sizeof(OutT) == 8 || sizeof(OutT) == 4, "int64 or int32 outputs");
#if defined(__GNUC__)
  constexpr int64_t kLanes = RunVectors<OutT>::kLanes;
  const RunVectors<OutT> vectors(base, step);
  auto value = vectors.first;
  const auto increment = vectors.increment;
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

// The largest chunk store_run_padded writes, of any output width.
constexpr int64_t kMaxRunChunk = 8;

// The end of the requests of [r_begin, r_end) whose every run's chunks fit in outputs of `room`
// values: the requests before it end at least kMaxRunChunk values before `room` (their ends
// grow, so it is one test for a block that ends there, usually all but the batch's last). A
// whole chunk, not one value less: a request without tokens still writes one chunk of
// positions from its end.
inline int64_t requests_with_room(const int32_t* query_start_loc, int64_t r_begin, int64_t r_end, int64_t room) {
  int64_t fit_end = r_end;
  while (fit_end > r_begin && query_start_loc[fit_end] > room - kMaxRunChunk) --fit_end;
  return fit_end;
}

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
  constexpr int64_t kLanes = RunVectors<OutT>::kLanes;
  const RunVectors<OutT> vectors(base, step);
  auto value = vectors.first;
  const auto increment = vectors.increment;
  // The first chunk without a loop (a decode's whole run): a loop's bound costs as much as it.
  __builtin_memcpy(out, &value, sizeof(value));
  value += increment;
  __builtin_memcpy(out + kLanes, &value, sizeof(value));
  for (int64_t k = 2 * kLanes; k < length; k += 2 * kLanes) {
    value += increment;
    __builtin_memcpy(out + k, &value, sizeof(value));
    value += increment;
    __builtin_memcpy(out + k + kLanes, &value, sizeof(value));
  }
#else
  for (int64_t k = 0; k < kRunChunk<OutT> * ((length + kRunChunk<OutT> - 1) / kRunChunk<OutT>); ++k) {
    out[k] = static_cast<OutT>(base + step * k);
  }
#endif
}

#if defined(__GNUC__)
// Under CP without interleave, with W a power of two: a request's slots when its positions lie in
// one kernel block whose block id is stored, a vector of them at a time. Position p is this
// rank's when p % W == rank, and then its slot is origin + p / W (origin: the block's first slot
// minus its first local position); the others get PAD. Built once per group and block of
// requests, so a request costs its two broadcasts and the vectors.
template <typename OutT>
struct ContextParallelRuns {
  using Vectors = RunVectors<OutT>;
  using Vector = typename Vectors::Vector;
  using Lane = typename Vectors::Lane;
  static constexpr int64_t kLanes = Vectors::kLanes;
  Vector rank{};
  Vector rank_mask{};
  uint32_t world_shift = 0;

  template <typename D>
  explicit ContextParallelRuns(const D& d) {
    if constexpr (std::is_same_v<D, SlotMappingShifts>) {
      rank += static_cast<Lane>(d.rank);
      rank_mask += static_cast<Lane>(d.world.divisor() - 1);
      world_shift = d.world_shift;
    }
  }

  // Writes out[0, count rounded up to a chunk of two vectors) (run_chunks_fit).
  SPECOPS_HOT_INLINE void store(OutT* out, int64_t count, uint32_t first, int64_t origin) const {
    static_assert(kPadSlotId == -1, "PAD is all ones");
    constexpr int kTopBit = 8 * sizeof(Lane) - 1;
    const Vector origins = Vector{} + static_cast<Lane>(origin);
    Vector positions = (Vector{} + static_cast<Lane>(first)) + Vectors::lane_index();
    for (int64_t k = 0; k < count; k += 2 * kLanes) {
      for (int64_t half = 0; half < 2 * kLanes; half += kLanes) {
        // 0 on this rank's positions, below W elsewhere: offset - 1 has its top bit set exactly
        // at this rank's, so `other` is all ones elsewhere and zero here, and ORed with it the
        // slot becomes PAD (all ones). Shifts and subtractions: SSE2 has no 64-bit compare.
        const Vector offset = (positions & rank_mask) ^ rank;
        const Vector other = ((offset - 1) >> kTopBit) - 1;
        const Vector slots = (origins + (positions >> world_shift)) | other;
        __builtin_memcpy(out + k + half, &slots, sizeof(slots));
        positions += static_cast<Lane>(kLanes);
      }
    }
  }
};
#endif

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
// the table get PAD after the loop. per_request(fits, r, first_token, query_len, count) runs for
// every request first (the fused op stores its positions and seq_len there, while they are in
// registers; the other groups pass one that does nothing). kFits: the caller found that every
// request's chunks fit (requests_with_room), so no request tests its room.
template <CpLayout kLayout, bool kMapped, bool kFits, typename D, typename IdxT, typename OutT, typename PerRequest>
void covered_group_slots_of_requests(const SlotMappingGroup& g, const D& divisors, const int32_t* query_start_loc,
                                     const int32_t* counts, const IdxT* idx_mapping, int64_t r_begin, int64_t r_end,
                                     OutT* out, PerRequest per_request) {
  const SlotMappingShape s = g.shape;
  const D d = divisors;
  const int32_t* const block_table = g.block_table;
  const uint64_t rows = static_cast<uint64_t>(s.block_table_rows);
  const int64_t stride = s.block_table_stride;
  const int64_t block_size = s.block_size;
  const int64_t room = s.num_tokens_padded;
#if defined(__GNUC__)
  [[maybe_unused]] const ContextParallelRuns<OutT> cp_runs(d);
#endif
  bool any_unmapped = false;
  int64_t begin = query_start_loc[r_begin];
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t end = query_start_loc[r + 1];
    const int64_t count = end - begin;
    const int64_t row = kMapped ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t token = begin;
    const int32_t request_count = counts[r];
    begin = end;
    per_request(std::bool_constant<kFits>{}, r, token, count, request_count);
    if (count == 0) continue;
    if (static_cast<uint64_t>(row) >= rows) {
      any_unmapped = true;
      continue;
    }
    const int32_t* block_row = block_table + row * stride;
    const uint32_t first = static_cast<uint32_t>(request_count);  // in [0, table_covered): checked
    OutT* request_out = out + token;
    if constexpr (kLayout == CpLayout::kSingleRank) {
      const uint32_t in_block = d.block.mod(first);
      const bool fits = kFits || run_chunks_fit<OutT>(count, room - token);
      if (static_cast<int64_t>(in_block) + count <= 2 * block_size && fits) {
        const uint32_t column = d.block.div(first);
        const int64_t block_id = block_row[column];
        // Two calls with constant steps: the usual stored run needs no step arithmetic.
        if (block_id >= 0) {
          store_run_padded(request_out, count, block_id * block_size + in_block, 1);
        } else {
          store_run_padded(request_out, count, kPadSlotId, 0);
        }
        const int64_t split = block_size - static_cast<int64_t>(in_block);
        if (split < count) {
          // The run goes on in the next kernel block (a column inside the row: every position is
          // covered) and rewrites the first run's values from there on.
          const int64_t next_id = block_row[column + 1];
          if (next_id >= 0) {
            store_run_padded(request_out + split, count - split, next_id * block_size, 1);
          } else {
            store_run_padded(request_out + split, count - split, kPadSlotId, 0);
          }
        }
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
#if defined(__GNUC__)
        if constexpr (std::is_same_v<D, SlotMappingShifts>) {
          if (kFits || run_chunks_fit<OutT>(count, room - token)) {
            if (block_id >= 0) {
              cp_runs.store(request_out, count, first, origin);
            } else {
              store_run_padded(request_out, count, kPadSlotId, 0);
            }
            continue;
          }
        }
#endif
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

}  // namespace specops::kernels
