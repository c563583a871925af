#pragma once
// The metadata of one async spec-decode step in one call: the count correction, positions and
// seq_lens, and the slot mapping of every KV-cache group. Equal to correct_num_computed_tokens,
// then prepare_positions_and_seq_lens, then compute_slot_mapping per group, and built from
// their bodies; what fusing saves is the dispatch and checks of 2 + G calls, and a rejected
// call writes nothing, since positions are validated from the gathered counts before any store.
#include <cstdint>

#include "kernels/compute_slot_mapping.h"
#include "kernels/correct_num_computed_tokens.h"
#include "kernels/prepare_positions_and_seq_lens.h"

namespace specops::kernels {

// One KV-cache group: its table, its output (exactly one of out64 / out32 is set) and its
// slot-mapping sizes (cp_world_size 1 for a group that is not CP-sharded).
struct SlotMappingGroup {
  const int32_t* block_table = nullptr;
  int64_t* out64 = nullptr;
  int32_t* out32 = nullptr;
  SlotMappingShape shape;
  SlotMappingDivisors divisors;

  SlotMappingGroup(const int32_t* table, int64_t* out_int64, int32_t* out_int32, const SlotMappingShape& s)
      : block_table(table), out64(out_int64), out32(out_int32), shape(s), divisors(s) {}
};

// The count row r will hold after the correction: gathered for rows < num_corrected, untouched
// (so read from the buffer) above.
struct CorrectedCounts {
  const int32_t* gathered;
  int64_t num_corrected;
  const int32_t* buffer;

  int32_t operator()(int64_t r) const { return r < num_corrected ? gathered[r] : buffer[r]; }
};

// First request (batch order) one of whose positions count .. count + query_len - 1 is negative,
// past int32, or stored on this rank beyond the group's table; -1 if none. Positions grow
// inside a request and so do their columns, so a request whose last position lies inside the
// virtual blocks that the table covers in full is accepted without looking at its tokens.
template <typename IdxT>
int64_t find_request_beyond_block_table(const int32_t* query_start_loc, const CorrectedCounts& counts,
                                        const IdxT* idx_mapping, const SlotMappingGroup& g) {
  const SlotMappingShape& s = g.shape;
  const int64_t virtual_block_size = s.block_size * s.blocks_per_kv_block * s.cp_world_size;
  const int64_t covered = (s.block_table_cols / s.blocks_per_kv_block) * virtual_block_size;
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t query_len = query_start_loc[r + 1] - query_start_loc[r];
    if (row < 0 || query_len == 0) continue;
    const int64_t first = counts(r);
    const int64_t last = first + query_len - 1;
    if (first < 0 || last > INT32_MAX) return r;
    if (last < covered) continue;
    for (int64_t position = first; position <= last; ++position) {
      const TokenPlacement p = place_token(static_cast<uint32_t>(position), s, g.divisors);
      if (p.local && p.column >= s.block_table_cols) return r;
    }
  }
  return -1;
}

// Every store of the fused op, after the caller gathered the corrected counts into
// new_computed / new_accepted and validated them.
template <typename PosT, typename IdxT>
void store_spec_decode_inputs(const int32_t* new_computed, const int32_t* new_accepted, int64_t num_corrected,
                              int32_t* num_computed_tokens, int32_t* num_accepted_tokens,
                              const int32_t* query_start_loc, PosT* positions, int32_t* seq_lens,
                              const PositionsShape& positions_shape, const IdxT* idx_mapping,
                              const SlotMappingGroup* groups, int64_t num_groups) {
  store_corrected_counts(new_computed, new_accepted, num_computed_tokens, num_accepted_tokens, num_corrected);
  prepare_positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, positions_shape);
  for (int64_t g = 0; g < num_groups; ++g) {
    const SlotMappingGroup& group = groups[g];
    if (group.out64 != nullptr) {
      compute_slot_mapping<PosT, IdxT, int64_t>(query_start_loc, positions, group.block_table, idx_mapping,
                                                group.out64, group.shape, group.divisors);
    } else {
      compute_slot_mapping<PosT, IdxT, int32_t>(query_start_loc, positions, group.block_table, idx_mapping,
                                                group.out32, group.shape, group.divisors);
    }
  }
}

}  // namespace specops::kernels
