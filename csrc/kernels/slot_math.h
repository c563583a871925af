#pragma once
// The slot of a position in a block-table row under KV-sharding context parallelism: the one
// place every C++ body that maps positions to KV-cache slots takes it from (compute_slot_mapping,
// the fused prepare_spec_decode_inputs). The same math on device is triton_kernels/_slot_math.py,
// in torch python/specops/reference/_slot_math.py (docs/slot_mapping.md).
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

// The slot of one position read through `block_row` (its first `columns` entries usable), or
// PAD: a position outside [0, 2^31), stored on another rank, past the usable columns, or whose
// block id is negative.
template <CpLayout kLayout>
inline int64_t slot_of_position(int64_t position, const int32_t* block_row, int64_t columns,
                                const SlotMappingShape& s, const SlotMappingDivisors& d) {
  if (position < 0 || position > INT32_MAX) return kPadSlotId;
  const TokenPlacement p = place_token<kLayout>(static_cast<uint32_t>(position), s, d);
  if (!p.local || p.column >= columns) return kPadSlotId;
  const int64_t block_id = block_row[p.column];
  return block_id >= 0 ? block_id * s.block_size + p.offset : kPadSlotId;
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
