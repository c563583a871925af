#pragma once
// The KV slot of every token of a batch of draft trees, in every KV-cache group (SGLang's tree
// layout: a request's draft_token_num tokens are stored in tree order after its verified prefix).
//
//   t = r * D + i  (D = draft_token_num; i = 0 is the tree's root, the last verified token)
//   position(t) = verified_seq_len[r] + i
//   slot_mappings[g][t] = slot(row, position(t)) in group g   (row = idx_mapping[r], else r)
//
// slot(row, position) is advance_draft_step's draft_slot (kernels/advance_draft_step.h): the
// group's block size and CP layout, PAD for a row < 0, a position another rank stores, a group
// whose slot mapping is disabled, and (as on the device paths; the host op rejects them) a row
// past the table, a position past its row's table or allocated blocks, a negative
// verified_seq_len or one past 2^31 - 1. Every output is PAD in [R * D, its slot_end).
#include <cstdint>

#include "kernels/advance_draft_step.h"

namespace specops::kernels {

// verified_seq_len[r] + i, or -1 (PAD) where the base is not a position: a base past 2^31 - 1
// is past every table, so the sum is never formed (it could overflow int64).
inline int64_t tree_position(int64_t base, int64_t i) { return base >= 0 && base <= INT32_MAX ? base + i : -1; }

// Whether request r's tree (positions base .. base + count - 1) in group g lies below
// covered_positions of its row: every column it reads is inside the row's usable ones whichever
// rank stores it, so its slots are stored as runs (store_consecutive_slots) without a check per
// token. The usual case; a tree that is not (a row past its blocks, no row) is mapped token by token.
inline bool tree_is_covered(const DraftStepGroup& g, int64_t row, int64_t base, int64_t count) {
  if (!g.enabled || row < 0 || row >= g.shape.block_table_rows || base < 0 || base > INT32_MAX) return false;
  return static_cast<uint64_t>(base) + static_cast<uint64_t>(count) <=
         covered_positions(g.shape, usable_columns(g.shape, row));
}

// Request r's slots in group g, into out[first_token, first_token + count); store_consecutive_slots
// may also write the entries up to the group's slot_end in whole chunks, which the next requests
// and the padding rewrite (they are stored later).
inline void store_tree_slots(const DraftStepGroup& g, int64_t row, int64_t base, int64_t first_token, int64_t count) {
  if (tree_is_covered(g, row, base, count)) {
    const int32_t* block_row = g.block_table + row * g.shape.block_table_stride;
    const int64_t room = g.slot_end - first_token;
    const uint32_t first = static_cast<uint32_t>(base);
    auto store = [&](auto* out) {
      if (g.shape.cp_world_size == 1) {
        store_consecutive_slots<CpLayout::kSingleRank, false>(first, count, block_row, g.shape.block_size, g.divisors,
                                                              out + first_token, room);
      } else {
        store_consecutive_slots<CpLayout::kInterleaved, false>(first, count, block_row, g.shape.block_size,
                                                               g.divisors, out + first_token, room);
      }
    };
    if (g.wide) {
      store(g.out64);
    } else {
      store(g.out32);  // the host op has checked every slot below 2^31
    }
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t position = tree_position(base, i);
    g.store(first_token + i, draft_slot(g, row, position, position >= 0));
  }
}

template <typename IdxT>
void tree_slot_mappings(IntIn verified_seq_len, const IdxT* idx_mapping, const DraftStepGroup* groups,
                        int64_t num_groups, int64_t num_reqs, int64_t draft_token_num) {
  for (int64_t r = 0; r < num_reqs; ++r) {
    const int64_t base = verified_seq_len[r];
    const int64_t row = draft_row(idx_mapping, r);
    for (int64_t g = 0; g < num_groups; ++g) store_tree_slots(groups[g], row, base, r * draft_token_num, draft_token_num);
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t t = num_reqs * draft_token_num; t < groups[g].slot_end; ++t) groups[g].store(t, kPadSlotId);
  }
}

}  // namespace specops::kernels
