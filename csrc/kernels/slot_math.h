#pragma once
// The slot of a position in a block-table row under KV-sharding context parallelism: the one
// place every C++ body that maps positions to KV-cache slots takes it from (compute_slot_mapping,
// the fused prepare_spec_decode_inputs). The same math on device is triton_kernels/_slot_math.py,
// in torch python/specops/slot_math.py (docs/slot_mapping.md).
//
// A CP "virtual block" spans cp_world_size ranks: ranks take turns storing runs of
// cp_interleave tokens, so one allocation block of kv_block tokens on a rank holds
// kv_block * cp_world_size consecutive positions of the sequence.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/fast_divmod.h"

// For the few helpers a request's loop calls (positions_are_consecutive, store_consecutive_slots
// and theirs): in the extension's LTO build the inliner kept them out of line (several
// instantiations each), which cost a call and a spill of the loop's values per request.
#if defined(__GNUC__)
#define SPECOPS_HOT_INLINE inline __attribute__((always_inline))
#else
#define SPECOPS_HOT_INLINE inline
#endif

namespace specops::kernels {

constexpr int64_t kPadSlotId = -1;

struct SlotMappingShape {
  int64_t num_reqs = 0;
  int64_t num_tokens = 0;
  int64_t num_tokens_padded = 0;
  int64_t block_table_rows = 0;
  int64_t block_table_cols = 0;
  int64_t block_table_stride = 0;  // elements between rows
  int64_t block_size = 1;
  int64_t blocks_per_kv_block = 1;
  int64_t cp_world_size = 1;
  int64_t cp_rank = 0;
  int64_t cp_interleave = 1;
  // Blocks allocated to each table row (num_blocks[row]), when the caller knows them: a position
  // whose column is at or past its row's count is past the request's allocated blocks (PAD; the
  // host ops reject it). nullptr: every column of the row is allocated.
  const int32_t* num_blocks = nullptr;
};

// The columns of `row` a position may use: its allocated blocks (a negative count: none), never
// past the table's width.
inline int64_t usable_columns(const SlotMappingShape& s, int64_t row) {
  if (s.num_blocks == nullptr) return s.block_table_cols;
  const int64_t allocated = s.num_blocks[row];
  if (allocated < 0) return 0;
  return allocated < s.block_table_cols ? allocated : s.block_table_cols;
}

// Positions below this bound lie in virtual blocks whose every column the row may use (the row's
// first `columns` columns, whole allocation blocks of them), capped at 2^31: such a position
// needs no bounds check, whichever rank stores it. A host check that finds every position of a
// request below it accepts the request without placing a token.
inline uint64_t covered_positions(const SlotMappingShape& s, int64_t columns) {
  constexpr uint64_t kCap = uint64_t{1} << 31;
  const uint64_t virtual_block_size = static_cast<uint64_t>(s.block_size * s.blocks_per_kv_block * s.cp_world_size);
  // The division is skipped in the usual case of one kernel block per allocation block.
  const uint64_t full_blocks =
      static_cast<uint64_t>(s.blocks_per_kv_block == 1 ? columns : columns / s.blocks_per_kv_block);
  if (full_blocks >= kCap / virtual_block_size) return kCap;  // checked sizes: virtual_block_size < 2^31
  return full_blocks * virtual_block_size;
}

// A position as the unsigned value the bounds above are compared with: a negative one is huge.
template <typename PosT>
inline uint64_t unsigned_position(PosT position) {
  return static_cast<uint64_t>(static_cast<int64_t>(position));
}

// Whether every positions[t], t < n, is in [0, bound) (bound <= 2^31). First the OR of the
// positions, one vector OR per pair of tokens: it is at least the largest of them as unsigned
// values (a negative one is huge), so an OR below the bound proves them all inside; only a batch
// whose OR reaches the bound (one with positions near it, or a bad one) is tested exactly,
// without a branch per token: bit 63 of (p - bound) & ~p (unsigned) is set exactly when
// 0 <= p < bound, so it survives the AND over all tokens only if each one is inside.
template <typename PosT>
inline bool all_positions_below(const PosT* positions, int64_t n, uint64_t bound) {
  // Four accumulators, so the vector loop is not one OR waiting on the last.
  uint64_t any_bits[4] = {0, 0, 0, 0};
  int64_t t = 0;
  for (; t + 4 <= n; t += 4) {
    for (int64_t j = 0; j < 4; ++j) any_bits[j] |= unsigned_position(positions[t + j]);
  }
  for (; t < n; ++t) any_bits[0] |= unsigned_position(positions[t]);
  if ((any_bits[0] | any_bits[1] | any_bits[2] | any_bits[3]) < bound) return true;
  uint64_t all = ~uint64_t{0};
  for (t = 0; t < n; ++t) {
    const uint64_t p = unsigned_position(positions[t]);
    all &= (p - bound) & ~p;
  }
  return (all >> 63) != 0;
}

// Divisors of the per-token math, prepared once per call: Div is FastDivmod, or Pow2Divmod when
// every one of them is a power of two (SlotMappingShifts).
template <typename Div>
struct SlotDivisors {
  Div virtual_block;  // kv_block * world
  Div interleave;     // I
  Div world;          // W
  Div rank_stride;    // W * I
  Div block;          // block_size
  uint32_t rank = 0;
  // With powers of two (start_run): a position's rank is the log2(W) bits above its offset in its
  // run of I, and a run of consecutive slots ends at a multiple of min(I, block_size).
  uint32_t rank_bits_mask = 0;  // (W - 1) << log2(I)
  uint32_t rank_bits = 0;       // rank << log2(I)
  uint32_t world_shift = 0;     // log2(W)
  uint32_t run_span = 1;        // min(I, block_size)

  explicit SlotDivisors(const SlotMappingShape& s)
      : virtual_block(static_cast<uint32_t>(s.block_size * s.blocks_per_kv_block * s.cp_world_size)),
        interleave(static_cast<uint32_t>(s.cp_interleave)),
        world(static_cast<uint32_t>(s.cp_world_size)),
        rank_stride(static_cast<uint32_t>(s.cp_world_size * s.cp_interleave)),
        block(static_cast<uint32_t>(s.block_size)),
        rank(static_cast<uint32_t>(s.cp_rank)) {
    if constexpr (std::is_same_v<Div, Pow2Divmod>) {
      const uint32_t interleave_shift = static_cast<uint32_t>(__builtin_ctz(static_cast<uint32_t>(s.cp_interleave)));
      rank_bits_mask = static_cast<uint32_t>(s.cp_world_size - 1) << interleave_shift;
      rank_bits = rank << interleave_shift;
      world_shift = static_cast<uint32_t>(__builtin_ctz(static_cast<uint32_t>(s.cp_world_size)));
      run_span = static_cast<uint32_t>(std::min(s.cp_interleave, s.block_size));
    }
  }
};
using SlotMappingDivisors = SlotDivisors<FastDivmod>;
using SlotMappingShifts = SlotDivisors<Pow2Divmod>;

// Whether the token math of `s` may shift and mask: block_size, W and I powers of two (then so
// is W * I; the virtual block is not divided by per token).
inline bool slot_sizes_are_powers_of_two(const SlotMappingShape& s) {
  return Pow2Divmod::accepts(static_cast<uint32_t>(s.block_size)) &&
         Pow2Divmod::accepts(static_cast<uint32_t>(s.cp_world_size)) &&
         Pow2Divmod::accepts(static_cast<uint32_t>(s.cp_interleave));
}

// Calls run(divisors) with SlotMappingShifts when the sizes allow it, else SlotMappingDivisors:
// the token loops are compiled once per kind, so neither pays a per-token branch.
template <typename Run>
decltype(auto) with_slot_divisors(const SlotMappingShape& s, Run&& run) {
  if (slot_sizes_are_powers_of_two(s)) return run(SlotMappingShifts(s));
  return run(SlotMappingDivisors(s));
}

// Where a position lives: on which rank and, on that rank, which kernel-block column and
// offset inside the kernel block.
struct TokenPlacement {
  bool local;
  int64_t column;  // index into the block-table row
  int64_t offset;  // slot offset inside the kernel block
};

// The three layouts, fixed per call and compiled separately so the token loop does only the
// divisions its layout needs: one for a single rank, two under CP, four with interleave.
enum class CpLayout { kSingleRank, kContextParallel, kInterleaved };

// Which rank stores `position`, and its index among the positions that rank stores (its
// "local position"). A virtual block (kv_block * W positions) is a whole number of W * I runs
// cycles, since I divides kv_block, so neither needs the virtual block: the owner is
// (position / I) % W and the local position is (position / (W * I)) * I + position % I, which is
// virtual_block * kv_block + the offset in the rank's allocation block. Its kernel-block column
// is then local / block_size (virtual_block * blocks_per_kv_block + the kernel block inside the
// allocation block) and its offset local % block_size.
template <CpLayout kLayout, typename D>
inline TokenPlacement place_token(uint32_t position, const D& d) {
  bool local = true;
  uint32_t local_position = position;  // a single rank stores every position
  if constexpr (kLayout == CpLayout::kContextParallel) {
    // Interleave 1: ranks take single tokens in turn.
    local_position = d.world.div(position);
    local = position - local_position * d.world.divisor() == d.rank;
  } else if constexpr (kLayout == CpLayout::kInterleaved) {
    const uint32_t run = d.interleave.div(position);
    local = d.world.mod(run) == d.rank;
    local_position = d.rank_stride.div(position) * d.interleave.divisor() + d.interleave.mod(position);
  }
  return TokenPlacement{local, static_cast<int64_t>(d.block.div(local_position)),
                        static_cast<int64_t>(d.block.mod(local_position))};
}

// The layout of a call, chosen once: run(std::integral_constant<CpLayout, ...>).
template <typename Run>
decltype(auto) with_cp_layout(const SlotMappingShape& s, Run&& run) {
  if (s.cp_world_size == 1) return run(std::integral_constant<CpLayout, CpLayout::kSingleRank>{});
  if (s.cp_interleave == 1) return run(std::integral_constant<CpLayout, CpLayout::kContextParallel>{});
  return run(std::integral_constant<CpLayout, CpLayout::kInterleaved>{});
}

// The slot of one position read through `block_row` (its first `columns` entries usable), or
// PAD: a position outside [0, 2^31), stored on another rank, past the usable columns, or whose
// block id is negative.
template <CpLayout kLayout, typename D>
inline int64_t slot_of_position(int64_t position, const int32_t* block_row, int64_t columns,
                                const SlotMappingShape& s, const D& d) {
  if (position < 0 || position > INT32_MAX) return kPadSlotId;
  const TokenPlacement p = place_token<kLayout>(static_cast<uint32_t>(position), d);
  if (!p.local || p.column >= columns) return kPadSlotId;
  const int64_t block_id = block_row[p.column];
  return block_id >= 0 ? block_id * s.block_size + p.offset : kPadSlotId;
}

// The same for a position below covered_positions(s, columns): its column is inside the row
// whichever rank stores it, so the block id is loaded unconditionally and the result selected
// without a branch (the token loop's common case).
template <CpLayout kLayout, typename D>
inline int64_t slot_of_covered_position(uint32_t position, const int32_t* block_row, const SlotMappingShape& s,
                                        const D& d) {
  const TokenPlacement p = place_token<kLayout>(position, d);
  const int64_t block_id = block_row[p.column];
  const int64_t slot = block_id * s.block_size + p.offset;
  return p.local & (block_id >= 0) ? slot : kPadSlotId;
}

// The slots of the consecutive positions first .. first + count - 1 (count >= 1), all below
// covered_positions(s, columns), as runs: run(begin, length, base, step) says the tokens
// begin .. begin + length - 1 (counted from `first`) get base + step * k, k = 0 .. length - 1, with
// step 1 (consecutive slots of one kernel block on this rank) or 0 (base PAD: another rank's
// run, or a negative block id). A run ends where this rank's run of I tokens ends (CP) or
// where its kernel block ends, so each one costs one placement and one block-id load, and the
// tokens inside it cost one store each. Under CP without interleave every run is one token, so
// that layout is not walked in runs (callers place its tokens one by one).
template <CpLayout kLayout, typename D, typename Run>
inline void walk_consecutive_slots(uint32_t first, int64_t count, const int32_t* block_row, const SlotMappingShape& s,
                                   const D& d, Run&& run) {
  static_assert(kLayout != CpLayout::kContextParallel, "CP without interleave is placed token by token");
  const uint32_t block_size = d.block.divisor();
  uint32_t position = first;
  int64_t begin = 0;
  while (begin < count) {
    int64_t length = count - begin;
    bool local = true;
    uint32_t local_position = position;
    if constexpr (kLayout == CpLayout::kInterleaved) {
      const uint32_t in_run = d.interleave.mod(position);
      local = d.world.mod(d.interleave.div(position)) == d.rank;
      local_position = d.rank_stride.div(position) * d.interleave.divisor() + in_run;
      length = std::min<int64_t>(length, d.interleave.divisor() - in_run);
    }
    const uint32_t in_block = d.block.mod(local_position);
    length = std::min<int64_t>(length, block_size - in_block);
    const int64_t block_id = block_row[d.block.div(local_position)];
    const bool stored = local & (block_id >= 0);
    run(begin, length, stored ? block_id * s.block_size + in_block : kPadSlotId, static_cast<int64_t>(stored));
    begin += length;
    position += static_cast<uint32_t>(length);
  }
}

// out[k] = base + step * k for k < length: one run of walk_consecutive_slots. Runs are a few
// tokens long (a decode's query), where a vector loop's set-up and tail would cost more than
// its stores save, so the loop is kept scalar (an empty asm that claims to change the value:
// no instruction, no memory clobber) and does two tokens per step.
template <typename OutT>
SPECOPS_HOT_INLINE void store_slot_run(OutT* out, int64_t length, int64_t base, int64_t step) {
  int64_t k = 0;
  for (; k + 2 <= length; k += 2) {
    out[k] = static_cast<OutT>(base);
    out[k + 1] = static_cast<OutT>(base + step);
    base += 2 * step;
#if defined(__GNUC__)
    asm("" : "+r"(base));
#endif
  }
  if (k < length) out[k] = static_cast<OutT>(base);
}

// Values of a run store_slot_run_padded writes at a time.
constexpr int64_t kSlotRunChunk = 8;

#if defined(__GNUC__)
// Two int64 lanes: GCC and Clang lower operations on it to one vector instruction where the
// target has them (SSE2, NEON) and to scalar code elsewhere.
typedef int64_t SlotLanes __attribute__((vector_size(16)));
#endif

// out[k] = base + step * k for k < length (step 0 or 1), like store_slot_run, in whole chunks of
// kSlotRunChunk: it may also write out[length, length rounded up to the chunk), which the caller
// owns and rewrites later (the next run or request, the padding). An int64 chunk is four vector
// stores: a decode's run costs one chunk, whatever its length.
template <typename OutT>
SPECOPS_HOT_INLINE void store_slot_run_padded(OutT* out, int64_t length, int64_t base, int64_t step) {
#if defined(__GNUC__)
  if constexpr (sizeof(OutT) == sizeof(int64_t)) {
    SlotLanes first = SlotLanes{base, base + step};
    const SlotLanes pair = SlotLanes{2 * step, 2 * step};
    int64_t k = 0;
    do {  // length >= 1
      for (int64_t j = 0; j < kSlotRunChunk; j += 2) {
        __builtin_memcpy(out + k + j, &first, sizeof(first));
        first += pair;
      }
      k += kSlotRunChunk;
    } while (k < length);
    return;
  }
#endif
  for (int64_t k = 0; k < length; k += kSlotRunChunk) {
    for (int64_t j = 0; j < kSlotRunChunk; ++j) out[k + j] = static_cast<OutT>(base + step * j);
    base += kSlotRunChunk * step;
  }
}

// The first position of a run (walk_consecutive_slots): whether this rank stores it, its local
// position, and how many positions from it on the run may span (to the end of this rank's run
// of I, and of its kernel block).
struct RunStart {
  bool local;
  uint32_t local_position;
  uint32_t span;
};

template <CpLayout kLayout, typename Div>
SPECOPS_HOT_INLINE RunStart start_run(uint32_t position, const SlotDivisors<Div>& d) {
  static_assert(kLayout != CpLayout::kContextParallel, "CP without interleave is placed token by token");
  if constexpr (std::is_same_v<Div, Pow2Divmod>) {
    if constexpr (kLayout == CpLayout::kInterleaved) {
      // (position / (W * I)) * I + position % I, as two masks and one shift; the run's end is
      // the next multiple of min(I, block_size), whichever of the two divides the other.
      const uint32_t in_run_mask = d.interleave.divisor() - 1;
      return RunStart{(position & d.rank_bits_mask) == d.rank_bits,
                      ((position >> d.world_shift) & ~in_run_mask) | (position & in_run_mask),
                      d.run_span - (position & (d.run_span - 1))};
    }
    return RunStart{true, position, d.block.divisor() - d.block.mod(position)};
  } else {
    RunStart start{true, position, 0};
    uint32_t span = UINT32_MAX;
    if constexpr (kLayout == CpLayout::kInterleaved) {
      const uint32_t in_run = d.interleave.mod(position);
      start.local = d.world.mod(d.interleave.div(position)) == d.rank;
      start.local_position = d.interleave.times(d.rank_stride.div(position)) + in_run;
      span = d.interleave.divisor() - in_run;
    }
    start.span = std::min(span, d.block.divisor() - d.block.mod(start.local_position));
    return start;
  }
}

// The slots of the consecutive positions first .. first + count - 1 (count >= 1), all below
// covered_positions(s, columns), stored into out[0, count): the runs of walk_consecutive_slots,
// each by store_slot_run_padded where `room` (the values out holds from out[0] on; those past
// `count` the caller rewrites later) takes its chunks, else by store_slot_run. Written out
// rather than through walk_consecutive_slots' callback, so that a request's loop keeps its
// values in registers. Returns the largest slot stored (PAD if none) when kTrackLargest.
template <CpLayout kLayout, bool kTrackLargest, typename D, typename OutT>
SPECOPS_HOT_INLINE int64_t store_consecutive_slots(uint32_t first, int64_t count, const int32_t* block_row, int64_t block_size,
                                       const D& d, OutT* out, int64_t room) {
  int64_t largest = kPadSlotId;
  uint32_t position = first;
  int64_t done = 0;
  do {
    const RunStart start = start_run<kLayout>(position, d);
    const int64_t length = std::min<int64_t>(count - done, start.span);
    const int64_t block_id = block_row[d.block.div(start.local_position)];
    const bool stored = start.local & (block_id >= 0);
    const int64_t base = stored ? block_id * block_size + d.block.mod(start.local_position) : kPadSlotId;
    const int64_t step = static_cast<int64_t>(stored);
    if constexpr (kTrackLargest) largest = std::max(largest, base + step * (length - 1));
    if (room - done >= length + kSlotRunChunk - 1) {
      store_slot_run_padded(out + done, length, base, step);
    } else {
      store_slot_run(out + done, length, base, step);
    }
    done += length;
    position += static_cast<uint32_t>(length);
  } while (done < count);
  return largest;
}

// First entry of slots[0, n) that an int32 output cannot hold, or -1. Stored there it would
// wrap to another request's slot (2^32 to 0), so the host ops compute int32 outputs wide first.
inline int64_t find_slot_past_int32(const int64_t* slots, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] > INT32_MAX) return t;
  }
  return -1;
}

}  // namespace specops::kernels
