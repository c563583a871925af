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

template <typename IdxT>
void tree_slot_mappings(IntIn verified_seq_len, const IdxT* idx_mapping, const DraftStepGroup* groups,
                        int64_t num_groups, int64_t num_reqs, int64_t draft_token_num) {
  for (int64_t r = 0; r < num_reqs; ++r) {
    const int64_t base = verified_seq_len[r];
    const int64_t row = draft_row(idx_mapping, r);
    for (int64_t g = 0; g < num_groups; ++g) {
      for (int64_t i = 0; i < draft_token_num; ++i) {
        const int64_t position = tree_position(base, i);
        groups[g].store(r * draft_token_num + i, draft_slot(groups[g], row, position, position >= 0));
      }
    }
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t t = num_reqs * draft_token_num; t < groups[g].slot_end; ++t) groups[g].store(t, kPadSlotId);
  }
}

}  // namespace specops::kernels
