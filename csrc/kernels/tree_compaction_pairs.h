#pragma once
// After a tree verify (SGLang's verify_tree_greedy), the KV moves that put each accepted node at
// its final position, in every KV-cache group, and the next step's per-request values.
//
//   acc = min(max(accept_token_num[r], 0), S - 1)        (S = accept_index.size(1))
//   for j < S: i_j = accept_index[r, j] - r * D           (D = draft_token_num)
//     node j is accepted when j <= acc and 0 <= i_j < D
//     src = slot(row, verified_seq_len[r] + i_j)          (its tree-order slot)
//     dst = slot(row, verified_seq_len[r] + j)            (the slot of its final position)
//     (src_slots[g, r*S + j], dst_slots[g, r*S + j]) = (src, dst) where they differ, else (PAD, PAD);
//     (PAD, PAD) for a node not accepted
//   next_seq_lens[r] = verified_seq_len[r] + acc + 1;  num_accepted_tokens[r] = acc + 1
//
// slot() is advance_draft_step's draft_slot in the group's layout: PAD where this rank does not
// store the position. So under CP an entry is a local move (both slots), a send (src only: this
// rank holds KV that belongs at a position another rank stores) or a receive (dst only: this
// rank's slot needs KV another rank holds); docs/tree_kv.md has the contract. The clamps and
// masks are the device paths' answer to invalid values; the host op rejects those values.
#include <algorithm>
#include <cstdint>

#include "kernels/advance_draft_step.h"
#include "kernels/tree_slot_mappings.h"

namespace specops::kernels {

struct TreeCompactionShape {
  int64_t num_reqs = 0;
  int64_t num_steps = 1;        // S, accept_index.size(1)
  int64_t accept_stride = 0;    // accept_index.stride(0)
  int64_t draft_token_num = 1;  // D
  int64_t src_stride = 0;       // src_slots.stride(0)
  int64_t dst_stride = 0;       // dst_slots.stride(0)
};

// A slot of a 2-D int32 / int64 pair output; an int32 one cannot hold a slot past 2^31 - 1 (the
// host op rejects it): PAD, never a wrapped slot.
inline void store_pair_slot(IntOut out, int64_t at, int64_t slot) {
  out.set(at, out.wide || slot <= INT32_MAX ? slot : kPadSlotId);
}

// The (src, dst) slots of node j, whose tree index is i (i < 0: not accepted), in one group.
struct SlotPair {
  int64_t src, dst;
};

inline SlotPair compaction_pair(const DraftStepGroup& g, int64_t row, int64_t base, int64_t i, int64_t j) {
  if (i < 0) return {kPadSlotId, kPadSlotId};
  const int64_t from = tree_position(base, i);
  const int64_t to = tree_position(base, j);
  const int64_t src = draft_slot(g, row, from, from >= 0);
  const int64_t dst = draft_slot(g, row, to, to >= 0);
  if (src == dst) return {kPadSlotId, kPadSlotId};  // the same slot, or neither stored here
  return {src, dst};
}

// The tree index of node j of request r, or -1 where the node is not accepted.
inline int64_t accepted_node(IntIn accept_index, int64_t r, int64_t j, int64_t acc, const TreeCompactionShape& s) {
  if (j > acc) return -1;
  // Compared before the subtraction, which could overflow for an index near -2^63.
  const int64_t index = accept_index[r * s.accept_stride + j];
  const int64_t first = r * s.draft_token_num;
  return index >= first && index - first < s.draft_token_num ? index - first : -1;
}

inline int64_t clamped_accept_count(int64_t count, int64_t num_steps) {
  return std::min(std::max(count, int64_t{0}), num_steps - 1);
}

template <typename IdxT>
void tree_compaction_pairs(IntIn accept_index, IntIn accept_token_num, IntIn verified_seq_len, const IdxT* idx_mapping,
                           const DraftStepGroup* groups, int64_t num_groups, IntOut src_slots, IntOut dst_slots,
                           IntOut next_seq_lens, IntOut num_accepted_tokens, const TreeCompactionShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t acc = clamped_accept_count(accept_token_num[r], s.num_steps);
    const int64_t base = verified_seq_len[r];
    const int64_t row = draft_row(idx_mapping, r);
    for (int64_t j = 0; j < s.num_steps; ++j) {
      const int64_t i = accepted_node(accept_index, r, j, acc, s);
      for (int64_t g = 0; g < num_groups; ++g) {
        const SlotPair pair = compaction_pair(groups[g], row, base, i, j);
        const int64_t at = r * s.num_steps + j;
        store_pair_slot(src_slots, g * s.src_stride + at, pair.src);
        store_pair_slot(dst_slots, g * s.dst_stride + at, pair.dst);
      }
    }
    // The sum in unsigned arithmetic: it wraps at the type's end, as the device kernels' adds do.
    if (next_seq_lens.data != nullptr) {
      next_seq_lens.set(r, static_cast<int64_t>(static_cast<uint64_t>(base) + static_cast<uint64_t>(acc + 1)));
    }
    if (num_accepted_tokens.data != nullptr) num_accepted_tokens.set(r, acc + 1);
  }
}

}  // namespace specops::kernels
