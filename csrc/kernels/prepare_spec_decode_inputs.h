#pragma once
// The metadata of one async spec-decode step in one call: the count correction, positions and
// seq_lens, and the slot mapping of every KV-cache group. Equal to correct_num_computed_tokens,
// then prepare_positions_and_seq_lens, then compute_slot_mapping per group, and built from
// their bodies and the placement math of kernels/slot_math.h. Fusing saves the dispatch and checks
// of 2 + G calls and, since the op knows each request's positions are consecutive, the
// per-token divisions and block-table loads of the slot mappings (see
// slots_of_consecutive_positions). A rejected call writes nothing: positions are validated
// from the gathered counts before any store.
#include <algorithm>
#include <cstdint>

#include "kernels/slot_math.h"
#include "kernels/correct_num_computed_tokens.h"
#include "kernels/prepare_positions_and_seq_lens.h"

namespace specops::kernels {

// One KV-cache group: its table, its output (exactly one of out64 / out32 is set) and its
// slot-mapping sizes (cp_world_size 1 for a group that is not CP-sharded). A group whose slot
// mapping is disabled gets PAD for every token and its table is never read.
struct SlotMappingGroup {
  const int32_t* block_table = nullptr;
  int64_t* out64 = nullptr;
  int32_t* out32 = nullptr;
  SlotMappingShape shape;
  SlotMappingDivisors divisors;
  bool enabled = true;

  SlotMappingGroup(const int32_t* table, int64_t* out_int64, int32_t* out_int32, const SlotMappingShape& s,
                   bool slot_mapping_enabled = true)
      : block_table(table), out64(out_int64), out32(out_int32), shape(s), divisors(s),
        enabled(slot_mapping_enabled) {}
};

// The count row r will hold after the correction: gathered for rows < num_corrected, untouched
// (so read from the buffer) above.
struct CorrectedCounts {
  const int32_t* gathered;
  int64_t num_corrected;
  const int32_t* buffer;

  int32_t operator()(int64_t r) const { return r < num_corrected ? gathered[r] : buffer[r]; }
};

// The counts once stored (the store phase reads them back from num_computed_tokens).
struct StoredCounts {
  const int32_t* counts;

  int32_t operator()(int64_t r) const { return counts[r]; }
};

// First request (batch order) one of whose positions count .. count + query_len - 1 is negative,
// past int32, or stored on this rank beyond the group's table or its row's allocated blocks; -1
// if none. Positions grow
// inside a request and so do their columns, so a request whose last position lies inside the
// virtual blocks that the table covers in full is accepted without looking at its tokens.
template <typename IdxT>
int64_t find_request_beyond_block_table(const int32_t* query_start_loc, const CorrectedCounts& counts,
                                        const IdxT* idx_mapping, const SlotMappingGroup& g) {
  const SlotMappingShape& s = g.shape;
  const int64_t virtual_block_size = s.block_size * s.blocks_per_kv_block * s.cp_world_size;
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t query_len = query_start_loc[r + 1] - query_start_loc[r];
    if (row < 0 || query_len == 0) continue;
    const int64_t first = counts(r);
    const int64_t last = first + query_len - 1;
    if (first < 0 || last > INT32_MAX) return r;
    const int64_t columns = usable_columns(s, row);
    if (last < (columns / s.blocks_per_kv_block) * virtual_block_size) continue;
    for (int64_t position = first; position <= last; ++position) {
      const TokenPlacement p = place_token<CpLayout::kInterleaved>(static_cast<uint32_t>(position), g.divisors);
      if (p.local && p.column >= columns) return r;
    }
  }
  return -1;
}

// Slots of the consecutive positions first .. first + count - 1 of one request, equal to
// compute_slot_mapping's. The fused op made the positions itself, so it knows they are
// consecutive: only the first one is placed with divisions; then each step moves one offset
// along the virtual block (the interleave run ends: the next rank's run starts; the virtual
// block ends: the next one starts), and the tokens this rank stores fill its kernel blocks in
// order, so a block id is loaded once per kernel block, not once per token.
template <CpLayout kLayout, typename OutT>
void slots_of_consecutive_positions(int64_t first, int64_t count, const int32_t* block_row, int64_t columns,
                                    OutT* out, const SlotMappingShape& s, const SlotMappingDivisors& d) {
  if (count <= 0) return;
  if (first < 0 || first + count - 1 > INT32_MAX) {
    // Positions outside [0, 2^31) (never reached after the host checks): one at a time.
    for (int64_t t = 0; t < count; ++t) {
      out[t] = static_cast<OutT>(slot_of_position<CpLayout::kInterleaved>(first + t, block_row, columns, s, d));
    }
    return;
  }
  const uint32_t block_size = d.block.divisor();
  const uint32_t virtual_block_size = d.virtual_block.divisor();
  const uint32_t interleave = d.interleave.divisor();
  const uint32_t world = d.world.divisor();
  const uint32_t rank = static_cast<uint32_t>(s.cp_rank);
  const uint32_t position = static_cast<uint32_t>(first);
  // Where the next token this rank stores goes: kernel-block column, offset in the kernel block.
  int64_t column;
  uint32_t in_block;
  uint32_t offset = 0, in_run = 0, owner = 0;  // position inside the virtual block, run, owning rank
  int64_t virtual_block_column = 0;            // first column of the current virtual block
  constexpr bool kContextParallel = kLayout != CpLayout::kSingleRank;
  if constexpr (kContextParallel) {
    const uint32_t virtual_block = d.virtual_block.div(position);
    offset = position - virtual_block * virtual_block_size;
    const uint32_t run = d.interleave.div(offset);
    in_run = offset - run * interleave;
    owner = d.world.mod(run);
    // This rank's runs before the offset, plus the part of the current run if it is ours.
    const uint32_t runs_before = d.rank_stride.div(offset) + (owner > rank ? 1 : 0);
    const uint32_t local = runs_before * interleave + (owner == rank ? in_run : 0);
    const uint32_t kernel_block = d.block.div(local);
    virtual_block_column = static_cast<int64_t>(virtual_block) * s.blocks_per_kv_block;
    column = virtual_block_column + kernel_block;
    in_block = local - kernel_block * block_size;
  } else {
    const uint32_t kernel_block = d.block.div(position);
    column = kernel_block;
    in_block = position - kernel_block * block_size;
  }
  int64_t loaded_column = -1;
  int64_t block_id = -1;
  for (int64_t t = 0; t < count; ++t) {
    int64_t slot = kPadSlotId;
    if (!kContextParallel || owner == rank) {
      if (column != loaded_column) {
        loaded_column = column;
        block_id = column < columns ? static_cast<int64_t>(block_row[column]) : -1;
      }
      if (block_id >= 0) slot = block_id * s.block_size + in_block;
      if (++in_block == block_size) {
        in_block = 0;
        ++column;
      }
    }
    out[t] = static_cast<OutT>(slot);
    if constexpr (kContextParallel) {
      if (++in_run == interleave) {
        in_run = 0;
        if (++owner == world) owner = 0;
      }
      if (++offset == virtual_block_size) {  // a whole number of runs: in_run and owner are 0 again
        offset = 0;
        virtual_block_column += s.blocks_per_kv_block;
        column = virtual_block_column;
        in_block = 0;
      }
    }
  }
}

// One group's slot mapping of the whole batch: request by request, PAD for requests whose
// row is unmapped (< 0) or past the table, PAD for positions past the row's allocated blocks,
// PAD in [num_tokens, num_tokens_padded).
// Counts: CorrectedCounts or StoredCounts.
template <CpLayout kLayout, typename Counts, typename IdxT, typename OutT>
void slot_mapping_of_consecutive_positions(const int32_t* query_start_loc, const Counts& counts,
                                           const int32_t* block_table, const IdxT* idx_mapping, OutT* out,
                                           const SlotMappingShape& s, const SlotMappingDivisors& d) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = idx_mapping ? static_cast<int64_t>(idx_mapping[r]) : r;
    const int64_t begin = query_start_loc[r];
    const int64_t count = query_start_loc[r + 1] - begin;
    if (row < 0 || row >= s.block_table_rows) {
      for (int64_t t = 0; t < count; ++t) out[begin + t] = static_cast<OutT>(kPadSlotId);
      continue;
    }
    slots_of_consecutive_positions<kLayout>(counts(r), count, block_table + row * s.block_table_stride,
                                            usable_columns(s, row), out + begin, s, d);
  }
  for (int64_t t = s.num_tokens; t < s.num_tokens_padded; ++t) out[t] = static_cast<OutT>(kPadSlotId);
}

template <typename Counts, typename IdxT, typename OutT>
void group_slot_mapping(const int32_t* query_start_loc, const Counts& counts, const IdxT* idx_mapping,
                        const SlotMappingGroup& group, OutT* out) {
  if (!group.enabled) {
    std::fill(out, out + group.shape.num_tokens_padded, static_cast<OutT>(kPadSlotId));
    return;
  }
  // The stepping needs no division per token, so CP with and without interleave share a path.
  if (group.shape.cp_world_size == 1) {
    slot_mapping_of_consecutive_positions<CpLayout::kSingleRank>(query_start_loc, counts, group.block_table,
                                                                 idx_mapping, out, group.shape, group.divisors);
  } else {
    slot_mapping_of_consecutive_positions<CpLayout::kInterleaved>(query_start_loc, counts, group.block_table,
                                                                  idx_mapping, out, group.shape, group.divisors);
  }
}

// For a group with an int32 output: the first token whose slot (from the corrected counts) the
// output cannot hold, or -1. `wide` holds num_tokens_padded int64.
template <typename IdxT>
int64_t find_group_slot_past_int32(const int32_t* query_start_loc, const CorrectedCounts& counts,
                                   const IdxT* idx_mapping, const SlotMappingGroup& group, int64_t* wide) {
  group_slot_mapping(query_start_loc, counts, idx_mapping, group, wide);
  return find_slot_past_int32(wide, group.shape.num_tokens_padded);
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
  const StoredCounts counts{num_computed_tokens};
  for (int64_t g = 0; g < num_groups; ++g) {
    const SlotMappingGroup& group = groups[g];
    if (group.out64 != nullptr) {
      group_slot_mapping(query_start_loc, counts, idx_mapping, group, group.out64);
    } else {
      group_slot_mapping(query_start_loc, counts, idx_mapping, group, group.out32);  // checked to fit
    }
  }
}

}  // namespace specops::kernels
