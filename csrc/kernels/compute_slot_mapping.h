#pragma once
// KV-cache slot of every token, with context-parallel (CP) interleave (docs/slot_mapping.md); the
// per-position math is kernels/slot_math.h.
#include <cstdint>

#include "kernels/slot_math.h"

namespace specops::kernels {

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
      out[t] = static_cast<OutT>(slot_of_position<kLayout>(positions[t], block_row, columns, s, d));
    }
  }
  for (int64_t t = s.num_tokens; t < s.num_tokens_padded; ++t) out[t] = static_cast<OutT>(kPadSlotId);
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
