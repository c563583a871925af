#pragma once
// Checks shared by the tree KV ops (tree_slot_mappings, tree_compaction_pairs): the per-request
// tensors beside the tree's verified prefix, and the host op's check of a tree position.
#include <optional>

#include "cpu/checks.h"
#include "cpu/step_checks.h"
#include "kernels/tree_slot_mappings.h"

namespace specops::cpu {

// draft_token_num: the tokens of each request's tree, >= 1 and below 2^31 (a token index r * D + i
// of the flat layout is int64, but a tree index is compared in int32 on device).
inline void check_draft_token_num(int64_t draft_token_num) {
  check_int32_range(draft_token_num, "draft_token_num", 1);
}

// An optional idx_mapping of one entry per request (int32 or int64, on the anchor's device).
template <typename Int>
void check_tree_idx_mapping(const OptTensor& idx_mapping, const Int& num_reqs, const char* what, const Anchor& anchor) {
  if (!idx_mapping.has_value()) return;
  check_tensor(*idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(*idx_mapping) == num_reqs, "idx_mapping must have ", what, " = ", num_reqs,
                    " entries, got ", numel_of<Int>(*idx_mapping));
}

// The host op's value check of request r's verified prefix: >= 0.
inline void check_verified_seq_len(int64_t base, int64_t r) {
  TORCH_CHECK_VALUE(base >= 0, "verified_seq_len[", r, "] = ", base, " must be >= 0");
}

// The host op's check of tree position base + i of request r in group g (row >= 0): inside the
// row's table and allocated blocks, and an int32 output's range (check_draft_position); a base
// past 2^31 - 1 is reported as itself (the sum is never formed).
inline void check_tree_position(const kernels::DraftStepGroup& group, size_t g, int64_t r, int64_t row, int64_t base,
                                int64_t i, const char* slots) {
  if (!group.enabled || row < 0) return;
  const int64_t columns = checked_group_row(group, g, r, row);
  check_draft_position(group, g, r, row, base <= INT32_MAX ? base + i : base, columns, slots);
}

}  // namespace specops::cpu
