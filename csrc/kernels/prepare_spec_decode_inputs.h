#pragma once
// The metadata of one async spec-decode step in one call: the count correction, positions and
// seq_lens, and the slot mapping of every KV-cache group. Equal to correct_num_computed_tokens,
// then prepare_positions_and_seq_lens, then compute_slot_mapping per group, and built from
// their bodies and the placement math of kernels/slot_math.h.
//
// A rejected call writes nothing: the corrected counts are gathered into scratch and every
// group's positions validated from them (read-only) before the first store; one branch-free
// pass finds the range of every request's positions, which decides for each group without
// per-row counts (the usual case) with no loop of its own, and marks it covered. Then one pass
// over the requests stores everything, a block of them at a time: the first group's loop
// stores each request's positions and seq_len too, while its count is in a register, and each
// covered group places a request without a bounds test (kernels/spec_decode_slots.h): a decode
// request whose positions lie in one kernel block costs one block-id load and one run stored in
// whole vector chunks, whose values past the request the next request or the padding rewrites.
// Groups not proven covered take the bounds-tested loop (request_slots). Each group's loop is
// compiled per layout and per divisor kind (shifts when its sizes are powers of two), chosen
// once per group and block.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/correct_num_computed_tokens.h"
#include "kernels/prepare_positions_and_seq_lens.h"
#include "kernels/slot_math.h"
#include "kernels/spec_decode_slots.h"

namespace specops::kernels {

// The count row r will hold after the correction: gathered for rows < num_corrected, untouched
// (so read from the buffer) above.
struct CorrectedCounts {
  const int32_t* gathered;
  int64_t num_corrected;
  const int32_t* buffer;

  int32_t operator()(int64_t r) const { return r < num_corrected ? gathered[r] : buffer[r]; }
};

// Whether any request with tokens starts at a negative position, and the end (highest last
// position + 1) of them (their corrected counts in counts[0, num_reqs)), in one branch-free pass
// shared by every group: a group without per-row counts whose table covers [0, end) in every row
// accepts the batch without a loop of its own.
struct RequestPositionRange {
  bool any_negative = false;
  uint32_t end = 0;  // 0: no request has tokens

  // Whether every position lies in [0, covered) (covered <= 2^31).
  bool inside(uint64_t covered) const { return !any_negative && end <= covered; }
};

// query_start_loc is checked (0 first, non-decreasing), so each query_len is in [0, 2^31) and for
// a first position in [0, 2^31) first + query_len does not wrap in 32 unsigned bits; a negative
// first position sets any_negative, whatever its sum. No value carries from one request to the
// next but the two reductions, and a request without tokens is masked out rather than skipped,
// so the compiler vectorizes the loop (it keeps a loop with selects or std::max scalar).
inline RequestPositionRange request_position_range(const int32_t* query_start_loc, const int32_t* counts,
                                                   int64_t num_reqs) {
  uint32_t end = 0;
  int32_t negative = 0;  // the OR of the first positions: its sign bit
  for (int64_t r = 0; r < num_reqs; ++r) {
    const uint32_t query_len = static_cast<uint32_t>(query_start_loc[r + 1]) - static_cast<uint32_t>(query_start_loc[r]);
    const int32_t first = counts[r];
    const uint32_t with_tokens = -static_cast<uint32_t>(query_len != 0);  // all ones or zero
    const uint32_t request_end = (static_cast<uint32_t>(first) + query_len) & with_tokens;
    end = end > request_end ? end : request_end;
    negative |= first & static_cast<int32_t>(with_tokens);
  }
  RequestPositionRange range;
  range.any_negative = negative < 0;
  range.end = end;
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

// Calls run(layout, divisors) with the group's layout as a constant and its divisors of the kind
// its sizes allow (shifts or reciprocals), and returns true; false for a disabled group.
template <typename Run>
bool with_group_kind(const SlotMappingGroup& g, Run&& run) {
  using L = CpLayout;
  switch (g.kind) {
    case SlotGroupKind::kDisabled:
      return false;
    case SlotGroupKind::kSingleRankShifts:
      run(std::integral_constant<L, L::kSingleRank>{}, g.shifts);
      return true;
    case SlotGroupKind::kSingleRank:
      run(std::integral_constant<L, L::kSingleRank>{}, g.divisors);
      return true;
    case SlotGroupKind::kContextParallelShifts:
      run(std::integral_constant<L, L::kContextParallel>{}, g.shifts);
      return true;
    case SlotGroupKind::kContextParallel:
      run(std::integral_constant<L, L::kContextParallel>{}, g.divisors);
      return true;
    case SlotGroupKind::kInterleavedShifts:
      run(std::integral_constant<L, L::kInterleaved>{}, g.shifts);
      return true;
    case SlotGroupKind::kInterleaved:
      run(std::integral_constant<L, L::kInterleaved>{}, g.divisors);
      return true;
  }
  return false;
}

// The same through the group's kind, chosen once per call of this (a block of requests).
template <typename IdxT, typename OutT>
void group_slots_of_requests(const SlotMappingGroup& g, const int32_t* query_start_loc, const int32_t* counts,
                             const IdxT* idx_mapping, int64_t r_begin, int64_t r_end, OutT* out) {
  const auto run = [&](auto layout, const auto& d) {
    group_slots_of_requests<decltype(layout)::value>(g, d, query_start_loc, counts, idx_mapping, r_begin, r_end, out);
  };
  if (with_group_kind(g, run)) return;
  for (int64_t r = r_begin; r < r_end; ++r) {  // disabled: PAD
    const int64_t begin = query_start_loc[r];
    store_slot_run(out + begin, query_start_loc[r + 1] - begin, kPadSlotId, 0);
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

// One group's slots for requests [r_begin, r_end): the covered loop of the group's kind when its
// positions were proven covered, else the bounds-tested one; per_request as in
// covered_group_slots_of_requests, run for every request either way.
template <typename IdxT, typename OutT, typename PerRequest>
void store_group_slots(const SlotMappingGroup& g, const int32_t* query_start_loc, const int32_t* counts,
                       const IdxT* idx_mapping, int64_t r_begin, int64_t r_end, OutT* out, PerRequest per_request) {
  const auto run = [&](auto layout, const auto& d) {
    constexpr CpLayout kLayout = decltype(layout)::value;
    // The requests whose chunks fit without a test, then the rest (the batch's last few).
    const int64_t fit_end = requests_with_room(query_start_loc, r_begin, r_end, g.shape.num_tokens_padded);
    if (idx_mapping == nullptr) {
      covered_group_slots_of_requests<kLayout, false, true>(g, d, query_start_loc, counts, idx_mapping, r_begin,
                                                            fit_end, out, per_request);
      covered_group_slots_of_requests<kLayout, false, false>(g, d, query_start_loc, counts, idx_mapping, fit_end,
                                                             r_end, out, per_request);
    } else {
      covered_group_slots_of_requests<kLayout, true, true>(g, d, query_start_loc, counts, idx_mapping, r_begin,
                                                           fit_end, out, per_request);
      covered_group_slots_of_requests<kLayout, true, false>(g, d, query_start_loc, counts, idx_mapping, fit_end,
                                                            r_end, out, per_request);
    }
  };
  if (g.all_covered && with_group_kind(g, run)) return;
  int64_t begin = query_start_loc[r_begin];
  for (int64_t r = r_begin; r < r_end; ++r) {
    const int64_t end = query_start_loc[r + 1];
    per_request(std::false_type{}, r, begin, end - begin, counts[r]);
    begin = end;
  }
  group_slots_of_requests(g, query_start_loc, counts, idx_mapping, r_begin, r_end, out);
}

// Requests stored together: their positions and seq_lens, then every group's slots while those
// are still in L1; one dispatch per group and block instead of one per request.
constexpr int64_t kRequestsPerBlock = 64;

// Every store of the fused op, after the caller gathered the corrected counts into
// new_computed / new_accepted and validated them: the correction, then one pass over the
// requests, a block of them at a time, whose positions and seq_lens are stored in the first
// group's loop. request_counts: every request's corrected count.
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
  // By value: the loops' stores cannot reach a copy, so the pointers stay in registers. `fits`:
  // the group's loop found room for the request's chunks in outputs of the group's
  // num_tokens_padded values, which is positions' too (one size of the call); a request without
  // tokens may then write a chunk as well, which later ones and the padding rewrite.
  const auto store_positions = [positions, seq_lens, positions_room](auto fits, int64_t r, int64_t token,
                                                                     int64_t query_len, int32_t count) {
    if (decltype(fits)::value || (query_len > 0 && run_chunks_fit<PosT>(query_len, positions_room - token))) {
      store_run_padded(positions + token, query_len, count, 1);  // count, count + 1, ...
    } else {
      store_run(positions + token, query_len, count, 1);
    }
    seq_lens[r] = static_cast<int32_t>(static_cast<uint32_t>(count) + static_cast<uint32_t>(query_len));
  };
  const auto nothing = [](auto, int64_t, int64_t, int64_t, int32_t) {};
  for (int64_t block = 0; block < num_reqs; block += kRequestsPerBlock) {
    const int64_t block_end = std::min(block + kRequestsPerBlock, num_reqs);
    if (num_groups == 0) {
      int64_t begin = query_start_loc[block];
      for (int64_t r = block; r < block_end; ++r) {
        const int64_t end = query_start_loc[r + 1];
        store_positions(std::false_type{}, r, begin, end - begin, request_counts[r]);
        begin = end;
      }
    }
    for (int64_t g = 0; g < num_groups; ++g) {
      const SlotMappingGroup& group = groups[g];
      if (group.out64 != nullptr) {
        if (g == 0) {
          store_group_slots(group, query_start_loc, request_counts, idx_mapping, block, block_end, group.out64,
                            store_positions);
        } else {
          store_group_slots(group, query_start_loc, request_counts, idx_mapping, block, block_end, group.out64,
                            nothing);
        }
      } else if (g == 0) {  // int32: checked to fit
        store_group_slots(group, query_start_loc, request_counts, idx_mapping, block, block_end, group.out32,
                          store_positions);
      } else {
        store_group_slots(group, query_start_loc, request_counts, idx_mapping, block, block_end, group.out32,
                          nothing);
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
