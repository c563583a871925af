#pragma once
// The verify pass's input ids and logits indices, for every request of a step in one pass.
//
// For batch row r with row = idx_mapping[r] (outside [0, num_rows): no request), its query
// [q0, q1) and its n_log = cu[r+1] - cu[r] logits:
//   logits_indices[cu[r] + j] = q1 - n_log + j,  expanded_idx_mapping[...] = row (-1 without one),
//   expanded_local_pos[...] = j                                                       j < n_log
//   (1) a prefilling row (nc < prefill_len, prompt tensors given) copies its prompt chunk
//       all_token_ids[row, nc + j] to input_ids[q0 + j], and the next num_lookahead prompt tokens
//       (0 past the prefill) to next_prefill_tokens[k, row];
//   (2) a row with generated tokens (seq_len = nc + qlen > prefill_len) then overwrites the
//       query's tail: the last sampled token at q1 - n_log (when num_new_sampled_tokens is 1 and
//       that position is past the prefill), and its n_log - num_new_sampled_tokens drafts after it.
// Each input id is computed once, the later rule winning, and stored once. Reads and stores are
// bounds-checked (a draft column past the drafts' width is not read, a prompt token past the
// token table's width is 0, a store past a buffer is dropped): the host op rejects such input
// before calling this body, and the device kernels do the same.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct InputIdsShape {
  int64_t num_reqs = 0;
  int64_t num_rows = 0;  // request rows every request-indexed tensor has
  int64_t num_new_sampled_tokens = 1;
  int64_t last_stride = 1;  // elements between last_sampled_tokens rows ([M] or [M, 1])
  int64_t draft_cols = 0;
  int64_t draft_stride = 0;
  bool has_prefill = false;
  int64_t token_cols = 0;  // all_token_ids width W
  int64_t token_stride = 0;
  int64_t num_lookahead = 0;
  int64_t lookahead_stride = 0;  // elements between next_prefill_tokens rows
  int64_t input_ids_numel = 0;
  int64_t tokens_padded = -1;  // input_ids is zeroed in [T, tokens_padded); -1: nothing past T
  int64_t logits_end = 0;      // each logits output is padded in [cu[R], its end)
  int64_t expanded_idx_end = 0;
  int64_t local_pos_end = 0;
};

template <typename IdxT, typename LastT, typename DraftT>
void prepare_input_ids(int32_t* input_ids, const IdxT* idx_mapping, const int32_t* query_start_loc,
                       const int32_t* num_computed_tokens, const int32_t* prefill_len, const LastT* last_sampled,
                       const DraftT* draft_tokens, const int32_t* cu_num_logits, const int32_t* all_token_ids,
                       int32_t* next_prefill_tokens, int64_t* logits_indices, IdxT* expanded_idx_mapping,
                       int32_t* expanded_local_pos, const InputIdsShape& s) {
  const int64_t logits_max = std::max({s.logits_end, s.expanded_idx_end, s.local_pos_end});
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t mapped = static_cast<int64_t>(idx_mapping[r]);
    const bool has_row = mapped >= 0 && mapped < s.num_rows;
    const int64_t row = has_row ? mapped : -1;
    const int64_t q0 = query_start_loc[r], q1 = query_start_loc[r + 1];
    const int64_t c0 = cu_num_logits[r];
    const int64_t n_log = static_cast<int64_t>(cu_num_logits[r + 1]) - c0;
    const int64_t n_draft = n_log - s.num_new_sampled_tokens;
    const int64_t logits_stop = std::min(n_log, logits_max - c0);
    for (int64_t j = std::max<int64_t>(0, -c0); j < logits_stop; ++j) {
      const int64_t o = c0 + j;
      if (o < s.logits_end) logits_indices[o] = q1 - n_log + j;
      if (o < s.expanded_idx_end) expanded_idx_mapping[o] = static_cast<IdxT>(row);
      if (o < s.local_pos_end) expanded_local_pos[o] = static_cast<int32_t>(j);
    }
    if (!has_row) continue;
    const int64_t nc = num_computed_tokens[row], pl = prefill_len[row];
    const int64_t qlen = q1 - q0;
    const int64_t seq_len = nc + qlen;
    const bool prefilling = s.has_prefill && nc < pl;
    const bool generated = seq_len > pl;
    const bool bonus = generated && s.num_new_sampled_tokens == 1 && seq_len - n_log >= pl;
    const int32_t* tokens = s.has_prefill ? all_token_ids + row * s.token_stride : nullptr;
    const int64_t first = std::max<int64_t>(q0, 0), stop = std::min(q1, s.input_ids_numel);
    for (int64_t i = first; i < stop; ++i) {
      const int64_t draft = i - (q1 - n_draft);
      if (generated && draft >= 0 && draft < s.draft_cols) {
        input_ids[i] = static_cast<int32_t>(draft_tokens[row * s.draft_stride + draft]);
      } else if (bonus && i == q1 - n_log) {
        input_ids[i] = static_cast<int32_t>(last_sampled[row * s.last_stride]);
      } else if (prefilling) {
        const int64_t column = nc + (i - q0);
        input_ids[i] = column >= 0 && column < s.token_cols ? tokens[column] : 0;
      }
    }
    if (prefilling) {
      for (int64_t k = 0; k < s.num_lookahead; ++k) {
        const int64_t column = seq_len + k;
        next_prefill_tokens[k * s.lookahead_stride + row] =
            column >= 0 && column < pl && column < s.token_cols ? tokens[column] : 0;
      }
    }
  }
  const int64_t num_tokens = std::clamp<int64_t>(query_start_loc[s.num_reqs], 0, s.input_ids_numel);
  const int64_t tokens_end = std::min(s.tokens_padded < 0 ? num_tokens : s.tokens_padded, s.input_ids_numel);
  for (int64_t t = num_tokens; t < tokens_end; ++t) input_ids[t] = 0;
  const int64_t num_logits = std::max<int64_t>(cu_num_logits[s.num_reqs], 0);
  for (int64_t o = num_logits; o < s.logits_end; ++o) logits_indices[o] = 0;
  for (int64_t o = num_logits; o < s.expanded_idx_end; ++o) expanded_idx_mapping[o] = static_cast<IdxT>(-1);
  for (int64_t o = num_logits; o < s.local_pos_end; ++o) expanded_local_pos[o] = 0;
}

}  // namespace specops::kernels
