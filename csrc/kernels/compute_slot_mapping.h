#pragma once
// KV-cache slot of every token, with context-parallel (CP) interleave (docs/slot_mapping.md).
//
// A CP "virtual block" spans cp_world_size ranks: ranks take turns storing runs of
// cp_interleave tokens, so one allocation block of kv_block tokens on a rank holds
// kv_block * cp_world_size consecutive positions of the sequence.
#include <cstdint>

#include "kernels/fast_divmod.h"

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

// Divisors of the per-token math, prepared once per call.
struct SlotMappingDivisors {
  FastDivmod virtual_block;  // kv_block * world
  FastDivmod interleave;     // I
  FastDivmod world;          // W
  FastDivmod rank_stride;    // W * I
  FastDivmod block;          // block_size

  explicit SlotMappingDivisors(const SlotMappingShape& s)
      : virtual_block(static_cast<uint32_t>(s.block_size * s.blocks_per_kv_block * s.cp_world_size)),
        interleave(static_cast<uint32_t>(s.cp_interleave)),
        world(static_cast<uint32_t>(s.cp_world_size)),
        rank_stride(static_cast<uint32_t>(s.cp_world_size * s.cp_interleave)),
        block(static_cast<uint32_t>(s.block_size)) {}
};

// Where a position lives: on which rank and, on that rank, which kernel-block column and
// offset inside the kernel block.
struct TokenPlacement {
  bool local;
  int64_t column;  // index into the block-table row
  int64_t offset;  // slot offset inside the kernel block
};

// The three layouts, fixed per call and compiled separately so the token loop does only the
// divisions its layout needs: one for a single rank, three under CP, five with interleave.
enum class CpLayout { kSingleRank, kContextParallel, kInterleaved };

template <CpLayout kLayout>
inline TokenPlacement place_token(uint32_t position, const SlotMappingShape& s,
                                  const SlotMappingDivisors& d) {
  if constexpr (kLayout == CpLayout::kSingleRank) {
    // Every token is local and its local offset is its position.
    const uint32_t kernel_block = d.block.div(position);
    return TokenPlacement{true, static_cast<int64_t>(kernel_block),
                          static_cast<int64_t>(position - kernel_block * d.block.divisor())};
  }
  const uint32_t virtual_block = d.virtual_block.div(position);
  const uint32_t offset_in_virtual = position - virtual_block * d.virtual_block.divisor();
  bool local;
  uint32_t local_offset;
  if constexpr (kLayout == CpLayout::kContextParallel) {
    // Interleave 1: ranks take single tokens in turn.
    local_offset = d.world.div(offset_in_virtual);
    local = static_cast<int64_t>(offset_in_virtual - local_offset * d.world.divisor()) == s.cp_rank;
  } else {
    const uint32_t run = d.interleave.div(offset_in_virtual);
    local = static_cast<int64_t>(d.world.mod(run)) == s.cp_rank;
    local_offset = d.rank_stride.div(offset_in_virtual) * d.interleave.divisor() +
                   (offset_in_virtual - run * d.interleave.divisor());
  }
  const uint32_t kernel_block = d.block.div(local_offset);
  return TokenPlacement{
      local,
      static_cast<int64_t>(virtual_block) * s.blocks_per_kv_block + kernel_block,
      static_cast<int64_t>(local_offset - kernel_block * d.block.divisor()),
  };
}

// First token (in batch order) whose lookup would leave the block table or its row's allocated
// blocks, or -1 if none. The host wrapper rejects such a batch before anything is written.
template <typename PosT, typename IdxT>
int64_t find_position_beyond_block_table(const int32_t* query_start_loc, const PosT* positions,
                                         const IdxT* idx_mapping, const SlotMappingShape& s,
                                         const SlotMappingDivisors& d) {
  // Fast accept: every position inside the virtual blocks that the table covers in full.
  const int64_t virtual_block_size = s.block_size * s.blocks_per_kv_block * s.cp_world_size;
  const int64_t covered = (s.block_table_cols / s.blocks_per_kv_block) * virtual_block_size;
  bool all_covered = s.num_blocks == nullptr;
  for (int64_t t = 0; all_covered && t < s.num_tokens; ++t) {
    const int64_t position = positions[t];
    all_covered &= position >= 0 && position < covered;
  }
  if (all_covered) return -1;

  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    if (row < 0) continue;
    const int64_t columns = usable_columns(s, row);
    for (int64_t t = query_start_loc[r]; t < query_start_loc[r + 1]; ++t) {
      const int64_t position = positions[t];
      if (position < 0 || position > INT32_MAX) return t;
      const TokenPlacement p = place_token<CpLayout::kInterleaved>(static_cast<uint32_t>(position), s, d);
      if (p.local && p.column >= columns) return t;
    }
  }
  return -1;
}

// Writes out[0, num_tokens_padded). Tokens not stored on this rank, tokens of rows < 0 and
// tokens whose block id is negative get PAD; so does the tail [num_tokens, num_tokens_padded).
// Positions outside the table or past their row's allocated blocks also get PAD, so the body
// never reads out of bounds (nor the null block a row holds past its count) even if called
// without the host-side check.
template <CpLayout kLayout, typename PosT, typename IdxT, typename OutT>
void compute_slot_mapping_impl(const int32_t* query_start_loc, const PosT* positions,
                               const int32_t* block_table, const IdxT* idx_mapping, OutT* out,
                               const SlotMappingShape& s, const SlotMappingDivisors& d) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t token_begin = query_start_loc[r];
    const int64_t token_end = query_start_loc[r + 1];
    if (row < 0 || row >= s.block_table_rows) {
      for (int64_t t = token_begin; t < token_end; ++t) out[t] = static_cast<OutT>(kPadSlotId);
      continue;
    }
    const int32_t* block_row = block_table + row * s.block_table_stride;
    const int64_t columns = usable_columns(s, row);
    for (int64_t t = token_begin; t < token_end; ++t) {
      const int64_t position = positions[t];
      int64_t slot = kPadSlotId;
      if (position >= 0 && position <= INT32_MAX) {
        const TokenPlacement p = place_token<kLayout>(static_cast<uint32_t>(position), s, d);
        if (p.local && p.column < columns) {
          const int64_t block_id = block_row[p.column];
          if (block_id >= 0) slot = block_id * s.block_size + p.offset;
        }
      }
      out[t] = static_cast<OutT>(slot);
    }
  }
  for (int64_t t = s.num_tokens; t < s.num_tokens_padded; ++t) out[t] = static_cast<OutT>(kPadSlotId);
}

// First entry of slots[0, n) that an int32 output cannot hold, or -1. Stored there it would
// wrap to another request's slot (2^32 to 0), so the host ops compute int32 outputs wide first.
inline int64_t find_slot_past_int32(const int64_t* slots, int64_t n) {
  for (int64_t t = 0; t < n; ++t) {
    if (slots[t] > INT32_MAX) return t;
  }
  return -1;
}

template <typename PosT, typename IdxT, typename OutT>
void compute_slot_mapping(const int32_t* query_start_loc, const PosT* positions,
                          const int32_t* block_table, const IdxT* idx_mapping, OutT* out,
                          const SlotMappingShape& s, const SlotMappingDivisors& d) {
  if (s.cp_world_size == 1) {
    compute_slot_mapping_impl<CpLayout::kSingleRank>(query_start_loc, positions, block_table, idx_mapping, out, s, d);
  } else if (s.cp_interleave == 1) {
    compute_slot_mapping_impl<CpLayout::kContextParallel>(query_start_loc, positions, block_table, idx_mapping, out, s, d);
  } else {
    compute_slot_mapping_impl<CpLayout::kInterleaved>(query_start_loc, positions, block_table, idx_mapping, out, s, d);
  }
}

}  // namespace specops::kernels
