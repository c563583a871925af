#pragma once
// KV-cache slot of every token, with context-parallel (CP) interleave (docs/slot_mapping.md); the
// per-position math is kernels/slot_math.h.
//
// The host op makes two passes: check_slot_mapping_batch reads the positions (are they below
// their rows' covered_positions bounds: without per-row counts one OR over all of them usually
// proves it), then compute_slot_mapping writes. A request whose positions are consecutive (a
// decode's query tokens, a prefill chunk) is stored in runs, one placement and one block-id load
// per run (walk_consecutive_slots) and a few vector stores per run, or, for a request of up to 8
// positions under CP interleave with power-of-two sizes, as one chunk without a branch on its
// runs (store_short_request); otherwise each token is placed alone, branch-free where the check
// proved it inside its row. Every loop is compiled per layout and per divisor kind (shifts when
// the sizes are powers of two), so none branches on the sizes.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/slot_math.h"

namespace specops::kernels {

// Whether positions[k] == positions[0] + k for every k < n (n >= 1): the OR of
// positions[k] ^ (positions[0] + k) over the request, without an exit per token (requests are a
// few tokens long and their test usually passes). `readable`: how many positions from
// positions[0] on may be read; int64 positions of a request of at most 8 tokens with 8 readable
// are tested in four vector steps, the lanes past the request masked off.
constexpr int64_t kConsecutiveWidth = 8;
alignas(64) inline constexpr int64_t kConsecutiveLanes[2 * kConsecutiveWidth] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                                                0,  0,  0,  0,  0,  0,  0,  0};

template <typename PosT>
SPECOPS_HOT_INLINE bool positions_are_consecutive(const PosT* positions, int64_t n, int64_t readable) {
  const int64_t first = static_cast<int64_t>(positions[0]);
#if defined(__GNUC__)
  if constexpr (sizeof(PosT) == sizeof(int64_t)) {
    if (n <= kConsecutiveWidth && readable >= kConsecutiveWidth) {
      const int64_t* lanes = kConsecutiveLanes + kConsecutiveWidth - n;  // lanes[k]: all ones for k < n
      // The pointer as one value (no instruction): otherwise the compiler recomputes each
      // lane's address from n.
      asm("" : "+r"(lanes));
      SlotLanes expected = SlotLanes{first, first + 1};
      SlotLanes differ = SlotLanes{0, 0};
      for (int64_t k = 0; k < kConsecutiveWidth; k += 2) {
        SlotLanes got;
        SlotLanes mask;
        __builtin_memcpy(&got, positions + k, sizeof(got));
        __builtin_memcpy(&mask, lanes + k, sizeof(mask));
        differ |= (got ^ expected) & mask;
        expected += 2;
      }
      return (differ[0] | differ[1]) == 0;
    }
  }
#endif
  (void)readable;
  uint64_t differ = 0;
  for (int64_t k = 1; k < n; ++k) differ |= static_cast<uint64_t>(static_cast<int64_t>(positions[k]) ^ (first + k));
  return differ == 0;
}

// Requests of a few consecutive positions under CP interleave with power-of-two sizes
// (store_short_request), the decode batches of speculative decoding. With I <= block_size a
// kernel block holds whole runs of I, so such a request is one run of consecutive slots or two,
// split where the first run of I ends, and at most one of them is this rank's (consecutive runs
// of I belong to consecutive ranks). A larger interleave is left to store_consecutive_slots
// (limit 0), and so is a single rank, whose requests seldom split (one in 16 at 8 tokens a
// request and 128-token blocks): there the runs loop predicts well and stores each run once.
inline int64_t short_request_limit(const SlotMappingShifts& d) {
  if (d.interleave.divisor() > d.block.divisor()) return 0;
  return std::min<int64_t>(kSlotRunChunk, d.interleave.divisor());
}

// All ones when this rank stores `position`: the rank bits above its offset in its run of I are
// this rank's, so their XOR minus one is negative. The conditions here are all-ones masks in
// 64-bit registers, not bools: spilled as bytes and reloaded wide, bools stalled each request
// on a failed store forwarding.
SPECOPS_HOT_INLINE int64_t on_this_rank(uint32_t position, const SlotMappingShifts& d) {
  return (static_cast<int64_t>((position & d.rank_bits_mask) ^ d.rank_bits) - 1) >> 63;
}

// out[k] = (base + k) | pad | (lanes[k] ^ flip) for k < kSlotRunChunk: one run's chunk with the
// lanes a mask picks (lanes: kConsecutiveLanes from some offset on) made PAD, four vector stores
// for an int64 out.
template <typename OutT>
SPECOPS_HOT_INLINE void store_masked_run_chunk(OutT* out, int64_t base, int64_t pad, const int64_t* lanes,
                                               int64_t flip) {
#if defined(__GNUC__)
  if constexpr (sizeof(OutT) == sizeof(int64_t)) {
    static_assert(kSlotRunChunk == kConsecutiveWidth, "one mask lane per stored lane");
    asm("" : "+r"(lanes));  // one pointer, not an address per lane recomputed from its offset
    const SlotLanes pad_lanes = SlotLanes{pad, pad};
    const SlotLanes flip_lanes = SlotLanes{flip, flip};
    SlotLanes slots = SlotLanes{base, base + 1};
    for (int64_t k = 0; k < kSlotRunChunk; k += 2) {
      SlotLanes mask;
      __builtin_memcpy(&mask, lanes + k, sizeof(mask));
      const SlotLanes stored = slots | pad_lanes | (mask ^ flip_lanes);
      __builtin_memcpy(out + k, &stored, sizeof(stored));
      slots += 2;
    }
    return;
  }
#endif
  for (int64_t k = 0; k < kSlotRunChunk; ++k) out[k] = static_cast<OutT>((base + k) | pad | (lanes[k] ^ flip));
}

// The slots of a request of consecutive positions first .. first + count - 1, all below
// covered_positions (1 <= count <= short_request_limit), under CP interleave, into out[0,
// count): the run this rank may store (the first if it does, else the second, or the first again
// when there is none: not stored either) is placed, and stored as one chunk counted from the
// request's first token whose other lanes are PAD, without a branch on where the split falls or
// which rank stores each run (about half of the requests split, each run on a random rank: as
// branches, the runs loop mispredicted about one request in two). Writes out[0, kSlotRunChunk),
// the values past `count` belonging to later requests or the padding, written after it.
// Returns the largest slot stored (PAD if none) when kTrackLargest.
template <bool kTrackLargest, typename OutT>
SPECOPS_HOT_INLINE int64_t store_short_request(uint32_t first, int64_t count, const int32_t* block_row,
                                               int64_t block_size, const SlotMappingShifts& d, OutT* out) {
  const uint32_t in_run_mask = d.interleave.divisor() - 1;
  const uint32_t first_run = d.interleave.divisor() - (first & in_run_mask);
  // All ones when the request splits (masked: a select here compiled to a branch).
  const int64_t splits = (static_cast<int64_t>(first_run) - count) >> 63;
  const int64_t first_here = on_this_rank(first, d);
  const uint32_t offset = first_run & static_cast<uint32_t>(splits & ~first_here);
  const uint32_t position = first + offset;
  // (position / (W * I)) * I + position % I.
  const uint32_t local_position = ((position >> d.world_shift) & ~in_run_mask) | (position & in_run_mask);
  const int64_t block_id = block_row[d.block.div(local_position)];
  const int64_t base = block_id * block_size + d.block.mod(local_position) - offset;
  const int64_t pad = ~(on_this_rank(position, d) & ~(block_id >> 63));
  // Lanes from the split on are the second run's: PAD when the first is this rank's, else those
  // before it are.
  const int64_t* before_split = kConsecutiveLanes + kConsecutiveWidth - std::min<int64_t>(first_run, kSlotRunChunk);
  store_masked_run_chunk(out, base, pad, before_split, first_here);
  if constexpr (!kTrackLargest) return kPadSlotId;
  const int64_t last = first_here != 0 ? std::min<int64_t>(first_run, count) - 1 : count - 1;
  return pad != 0 ? kPadSlotId : base + last;
}

// What the read-only pass found.
struct SlotMappingCheck {
  int64_t bad_token = -1;        // the first token to reject, or -1
  bool all_covered = true;       // every position of a mapped row below its covered_positions
  bool all_consecutive = false;  // and every mapped request's positions found consecutive
};

constexpr int64_t kMinTokensPerRequestForRuns = 3;

// Whether the write pass stores in runs: from a few tokens per request (a decode without drafts,
// one or two tokens, is placed token by token).
inline bool slot_runs_pay(const SlotMappingShape& s) { return s.num_tokens >= kMinTokensPerRequestForRuns * s.num_reqs; }

// The check pass, reads only: the first token whose lookup would leave the block table or its
// row's allocated blocks (the host wrapper rejects the batch before anything is written), and
// how the write pass may run. Without per-row counts one sweep over the positions (their OR,
// all_positions_below) accepts the usual batch; the write pass then tests each request's
// positions for runs itself. Otherwise each request is checked: one whose positions are
// consecutive is inside its row when its first and last are; only the others are tested token
// by token. Rows must be inside the table (check_rows_inside_table runs first).
template <typename D, typename PosT, typename IdxT>
SlotMappingCheck check_slot_mapping_batch(const int32_t* query_start_loc, const PosT* positions,
                                          const IdxT* idx_mapping, const SlotMappingShape& s, const D& d) {
  SlotMappingCheck found;
  const uint64_t table_covered = covered_positions(s, s.block_table_cols);
  if (s.num_blocks == nullptr && all_positions_below(positions, s.num_tokens, table_covered)) return found;
  found.all_consecutive = slot_runs_pay(s);
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t begin = query_start_loc[r], end = query_start_loc[r + 1];
    if (row < 0 || begin == end) continue;  // PAD, whatever the positions
    const int64_t columns = usable_columns(s, row);
    const uint64_t covered = s.num_blocks == nullptr ? table_covered : covered_positions(s, columns);
    const PosT* request = positions + begin;
    if (found.all_consecutive && positions_are_consecutive(request, end - begin, s.num_tokens - begin)) {
      // first < covered and first + count <= covered, without the sum wrapping (a negative first is huge).
      const uint64_t first = unsigned_position(request[0]);
      if (first < covered && covered - first >= static_cast<uint64_t>(end - begin)) continue;
    } else {
      found.all_consecutive = false;
      if (all_positions_below(request, end - begin, covered)) continue;
    }
    // Some position is past the fully covered virtual blocks: place each one (a token another
    // rank stores there is fine).
    found.all_covered = false;
    for (int64_t t = begin; t < end; ++t) {
      const int64_t position = positions[t];
      if (position < 0 || position > INT32_MAX) {
        found.bad_token = t;
        return found;
      }
      const TokenPlacement p = place_token<CpLayout::kInterleaved>(static_cast<uint32_t>(position), d);
      if (p.local && p.column >= columns) {
        found.bad_token = t;
        return found;
      }
    }
  }
  return found;
}

// How the write pass runs, from what the check pass proved: kRuns (all covered, a few tokens a
// request: each request whose positions are consecutive is stored in runs, any other token by
// token), kCovered (all covered: token by token, branch-free), kChecked (no check, or some
// position past its row's bound: each token is bounds-checked).
enum class SlotMappingPath { kRuns, kCovered, kChecked };

// Writes out[0, num_tokens_padded) and returns the largest slot written (PAD if none), which an
// int32 caller checks before it copies the slots out. Tokens not stored on this rank, tokens of
// rows < 0 and tokens whose block id is negative get PAD; so does the tail [num_tokens,
// num_tokens_padded). On the kChecked path, positions outside the table or past their row's
// allocated blocks also get PAD, so the body never reads out of bounds (nor the null block a row
// holds past its count) even if called without the host-side check. kKnownConsecutive (kRuns
// only): the check pass found every request's positions consecutive, so none is tested again.
template <CpLayout kLayout, SlotMappingPath kPath, bool kKnownConsecutive, typename D, typename PosT, typename IdxT,
          typename OutT>
int64_t compute_slot_mapping_impl(const int32_t* query_start_loc, const PosT* positions, const int32_t* block_table,
                                  const IdxT* idx_mapping, OutT* out, const SlotMappingShape& shape, const D& divisors) {
  // Copies the stores through `out` cannot alias (an int64 store may write any int64 the
  // compiler cannot see is local), so the sizes stay in registers across the token loop.
  const SlotMappingShape s = shape;
  const D d = divisors;
  // Only an int32 output needs the largest slot; an int64 one skips the per-token max.
  constexpr bool kTrackLargest = sizeof(OutT) < sizeof(int64_t);
  int64_t largest = kPadSlotId;
  bool any_unmapped = false;
  // Short requests (store_short_request): under CP interleave with power-of-two sizes.
  constexpr bool kShortRequests = kPath == SlotMappingPath::kRuns && kLayout == CpLayout::kInterleaved &&
                                  std::is_same_v<D, SlotMappingShifts>;
  int64_t short_limit = 0;
  if constexpr (kShortRequests) short_limit = short_request_limit(d);
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t token_begin = query_start_loc[r];
    const int64_t token_end = query_start_loc[r + 1];
    if (row < 0 || row >= s.block_table_rows) {
      // Filled after the loop: a call in here would push the loop's values out of registers.
      any_unmapped = true;
      continue;
    }
    const int32_t* block_row = block_table + row * s.block_table_stride;
    if constexpr (kPath == SlotMappingPath::kRuns) {
      const int64_t count = token_end - token_begin;
      if (count == 0) continue;
      if constexpr (kShortRequests) {
        // A request of one chunk whose positions' chunk is readable (then out holds its chunk).
        if (count <= short_limit && s.num_tokens - token_begin >= kConsecutiveWidth &&
            (kKnownConsecutive || positions_are_consecutive(positions + token_begin, count, kConsecutiveWidth))) {
          const int64_t request_largest = store_short_request<kTrackLargest>(
              static_cast<uint32_t>(positions[token_begin]), count, block_row, s.block_size, d, out + token_begin);
          if constexpr (kTrackLargest) largest = std::max(largest, request_largest);
          continue;
        }
      }
      if (kKnownConsecutive || positions_are_consecutive(positions + token_begin, count, s.num_tokens - token_begin)) {
        // A run may be stored in whole chunks while they end inside out: what a chunk writes past
        // its run belongs to a later run, request or the padding, each written after it.
        const int64_t request_largest = store_consecutive_slots<kLayout, kTrackLargest>(
            static_cast<uint32_t>(positions[token_begin]), count, block_row, s.block_size, d, out + token_begin,
            s.num_tokens_padded - token_begin);
        if constexpr (kTrackLargest) largest = std::max(largest, request_largest);
        continue;
      }
    }
    constexpr bool kAllCovered = kPath != SlotMappingPath::kChecked;
    const int64_t columns = kAllCovered ? 0 : usable_columns(s, row);
    const uint64_t covered = kAllCovered ? 0 : covered_positions(s, columns);
    for (int64_t t = token_begin; t < token_end; ++t) {
      const int64_t position = positions[t];
      int64_t slot;
      if (kAllCovered || static_cast<uint64_t>(position) < covered) {
        slot = slot_of_covered_position<kLayout>(static_cast<uint32_t>(position), block_row, s, d);
      } else {
        slot = slot_of_position<kLayout>(position, block_row, columns, s, d);
      }
      if constexpr (kTrackLargest) largest = std::max(largest, slot);
      out[t] = static_cast<OutT>(slot);
    }
  }
  for (int64_t r = 0; any_unmapped && r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    if (row < 0 || row >= s.block_table_rows) {
      std::fill(out + query_start_loc[r], out + query_start_loc[r + 1], static_cast<OutT>(kPadSlotId));
    }
  }
  std::fill(out + s.num_tokens, out + s.num_tokens_padded, static_cast<OutT>(kPadSlotId));
  return largest;
}

// checked: what check_slot_mapping_batch found for this batch, or nullptr (every token is then
// bounds-checked). Under CP without interleave every run is one token, so that layout places
// tokens one by one.
template <typename PosT, typename IdxT, typename OutT, typename D>
int64_t compute_slot_mapping(const int32_t* query_start_loc, const PosT* positions, const int32_t* block_table,
                             const IdxT* idx_mapping, OutT* out, const SlotMappingShape& s, const D& d,
                             const SlotMappingCheck* checked = nullptr) {
  return with_cp_layout(s, [&](auto layout) {
    constexpr CpLayout kLayout = decltype(layout)::value;
    const auto run = [&](auto path, auto known_consecutive) {
      return compute_slot_mapping_impl<kLayout, decltype(path)::value, decltype(known_consecutive)::value>(
          query_start_loc, positions, block_table, idx_mapping, out, s, d);
    };
    using Path = SlotMappingPath;
    using Known = std::true_type;
    using Unknown = std::false_type;
    if constexpr (kLayout != CpLayout::kContextParallel) {
      if (checked != nullptr && checked->all_covered && slot_runs_pay(s)) {
        if (checked->all_consecutive) return run(std::integral_constant<Path, Path::kRuns>{}, Known{});
        return run(std::integral_constant<Path, Path::kRuns>{}, Unknown{});
      }
    }
    if (checked != nullptr && checked->all_covered) return run(std::integral_constant<Path, Path::kCovered>{}, Unknown{});
    return run(std::integral_constant<Path, Path::kChecked>{}, Unknown{});
  });
}

}  // namespace specops::kernels
