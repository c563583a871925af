#pragma once
// The parallel-drafting first pass: the target step's tokens rewritten into the draft's buffers
// with S = slots_per_request new slots per request (the bonus token, then S - 1 slots holding
// parallel_drafting_token_id), the rejected tokens kept as padding. For request r, with
// q0 = qsl[r], q = qsl[r + 1] - q0, rej its rejected count, shift = 1 with shift_input_ids,
// nv = q - rej - shift, N = S - shift, o = q0 + r N + j for j < q + N:
//
//   j <  nv:          input id = target_token_ids[q0 + j + shift]
//   j == nv:          input id = next_token_ids[r]                  (bonus)
//   nv < j < nv + S:  input id = parallel_drafting_token_id, masked
//   j >= nv + S:      input id = padding_token_id, rejected (position 0, slot PAD)
//   position = start + j (start = target_positions[q0]); slot PAD at or past max_model_len
//
// plus the sample indices of the S new tokens, the hidden-state mapping of the q input tokens
// (shift only), the extended query layout and seq_lens + N. Slots are advance_draft_step's
// (kernels/advance_draft_step.h), per group.
#include <algorithm>
#include <cstdint>

#include "kernels/advance_draft_step.h"

namespace specops::kernels {

struct ParallelDraftBuffers {
  IntIn target_token_ids, target_positions, next_token_ids, idx_mapping;  // idx_mapping.data null: row r
  const int32_t* query_start_loc = nullptr;
  const int32_t* num_rejected = nullptr;  // null: 0
  const int32_t* seq_lens = nullptr;
  IntOut input_ids, positions;
  bool* is_rejected = nullptr;
  bool* is_masked = nullptr;
  int32_t* token_indices_to_sample = nullptr;
  int32_t* hidden_state_mapping = nullptr;  // shift only
  int32_t* out_query_start_loc = nullptr;
  int32_t* out_seq_lens = nullptr;
};

struct ParallelDraftShape {
  int64_t num_reqs = 0;
  int64_t num_tokens = 0;      // T
  int64_t num_out_tokens = 0;  // T' = T + R N
  int64_t slots = 1;           // S
  int64_t shift = 1;
  int64_t max_model_len = 1;
  int64_t draft_token = 0;
  int64_t padding_token = 0;
  // Where each output's padding ends.
  int64_t input_ids_end = 0, positions_end = 0, rejected_end = 0, masked_end = 0;
  int64_t indices_end = 0, hidden_end = 0, query_start_loc_end = 0, seq_lens_end = 0;
  int64_t new_tokens() const { return slots - shift; }
};

// The layout of request r (the formulas above).
struct DraftRequest {
  int64_t q0, q, valid, out0, start;
};

inline DraftRequest draft_request(const ParallelDraftBuffers& b, const ParallelDraftShape& s, int64_t r) {
  const int64_t q0 = b.query_start_loc[r];
  const int64_t q = b.query_start_loc[r + 1] - q0;
  const int64_t rej = b.num_rejected != nullptr ? b.num_rejected[r] : 0;
  return {q0, q, q - rej - s.shift, q0 + r * s.new_tokens(), b.target_positions[q0]};
}

inline void expand_parallel_draft_inputs(const ParallelDraftBuffers& b, const DraftStepGroup* groups,
                                         int64_t num_groups, const ParallelDraftShape& s) {
  const int64_t n = s.new_tokens();
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const DraftRequest d = draft_request(b, s, r);
    const int64_t row = b.idx_mapping.data != nullptr ? b.idx_mapping[r] : r;
    for (int64_t j = 0; j < d.q + n; ++j) {
      const int64_t o = d.out0 + j;
      const bool rejected = j >= d.valid + s.slots;
      const bool masked = j > d.valid && !rejected;
      int64_t id = s.padding_token;
      if (j < d.valid) {
        id = b.target_token_ids[d.q0 + j + s.shift];
      } else if (j == d.valid) {
        id = b.next_token_ids[r];
      } else if (masked) {
        id = s.draft_token;
      }
      // start + j in 64 unsigned bits, as the device kernels' int64 add wraps (past 2^63 - 1 the
      // position exists in no backend's output; its slot is PAD: at or past max_model_len).
      const uint64_t offset = static_cast<uint64_t>(j);
      const int64_t position = rejected ? 0 : static_cast<int64_t>(static_cast<uint64_t>(d.start) + offset);
      b.input_ids.set(o, id);
      b.positions.set(o, position);
      b.is_rejected[o] = rejected;
      b.is_masked[o] = masked;
      if (j >= d.valid && !rejected) b.token_indices_to_sample[r * s.slots + j - d.valid] = static_cast<int32_t>(o);
      if (b.hidden_state_mapping != nullptr && j < d.q) b.hidden_state_mapping[d.q0 + j] = static_cast<int32_t>(o);
      const bool mapped = !rejected && d.start < s.max_model_len && j < s.max_model_len - d.start;
      for (int64_t g = 0; g < num_groups; ++g) groups[g].store(o, draft_slot(groups[g], row, position, mapped));
    }
    if (b.out_query_start_loc != nullptr) b.out_query_start_loc[r] = static_cast<int32_t>(d.out0);
    if (b.out_seq_lens != nullptr) b.out_seq_lens[r] = static_cast<int32_t>(b.seq_lens[r] + n);
  }
  const int64_t t = s.num_out_tokens;
  for (int64_t i = t; i < s.input_ids_end; ++i) b.input_ids.set(i, 0);
  for (int64_t i = t; i < s.positions_end; ++i) b.positions.set(i, 0);
  std::fill(b.is_rejected + std::min(t, s.rejected_end), b.is_rejected + s.rejected_end, false);
  std::fill(b.is_masked + std::min(t, s.masked_end), b.is_masked + s.masked_end, false);
  for (int64_t g = 0; g < num_groups; ++g) {
    for (int64_t i = t; i < groups[g].slot_end; ++i) groups[g].store(i, kPadSlotId);
  }
  const int64_t first_index = s.num_reqs * s.slots;
  std::fill(b.token_indices_to_sample + std::min(first_index, s.indices_end), b.token_indices_to_sample + s.indices_end,
            0);
  if (b.hidden_state_mapping != nullptr) {
    std::fill(b.hidden_state_mapping + std::min(s.num_tokens, s.hidden_end), b.hidden_state_mapping + s.hidden_end, 0);
  }
  for (int64_t i = s.num_reqs; b.out_query_start_loc != nullptr && i < s.query_start_loc_end; ++i) {
    b.out_query_start_loc[i] = static_cast<int32_t>(t);
  }
  if (b.out_seq_lens != nullptr) {
    std::fill(b.out_seq_lens + std::min(s.num_reqs, s.seq_lens_end), b.out_seq_lens + s.seq_lens_end, 0);
  }
}

}  // namespace specops::kernels
