#pragma once
// The drafter's next token of every request, its valid sampled count and, for the padded
// drafting path, its rejected count and the token index to sample from.
//
//   valid(x)    = 0 <= x < vocab_size
//   count[r]    = 0 if discard[r] else #{ j < S : valid(s[r, j]) }
//   next[r]     = backup[r] if discard[r] or count[r] == 0, else s[r, j*] (j* the largest valid j)
//   d[r]        = cu[r] - cu[r - 1]   (cu[-1] = 0)
//   rejected[r] = d[r] + 1 - count[r] if d[r] > 0 else 0
//   index[r]    = max(qsl[r + 1] - 1 - rejected[r], qsl[r])
//
// The backup is the caller's backup_next_token_ids[r], or gathered here: token_ids[r, n - 1]
// with n = num_tokens_no_spec[r] when 1 <= n <= the table's width, else -1. Every output is 0
// past the requests, up to its padded end.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct NextTokensShape {
  int64_t num_reqs = 0;
  int64_t sampled_cols = 0;  // S
  int64_t sampled_stride = 0;
  int64_t vocab_size = 1;
  int64_t token_cols = 0;  // width of token_ids (device backup)
  int64_t token_stride = 0;
  int64_t next_end = 0, count_end = 0, rejected_end = 0, index_end = 0;  // padded ends
  bool has_backup = true;    // false: the device backup from token_ids and num_tokens_no_spec
  bool padded_path = false;  // the last two outputs are computed
};

template <typename SampledT>
void prepare_next_token_ids(const SampledT* sampled, const bool* discard_request_mask,
                            const int32_t* backup_next_token_ids, const int32_t* token_ids,
                            const int32_t* num_tokens_no_spec, const int32_t* cu_num_draft_tokens,
                            const int32_t* query_start_loc, int32_t* next_token_ids,
                            int32_t* valid_sampled_token_count, int32_t* num_rejected_tokens,
                            int32_t* token_indices_to_sample, const NextTokensShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const SampledT* row = sampled + r * s.sampled_stride;
    const bool discard = discard_request_mask != nullptr && discard_request_mask[r];
    int64_t count = 0, last_valid = -1;
    for (int64_t j = 0; j < s.sampled_cols; ++j) {
      if (row[j] >= 0 && static_cast<int64_t>(row[j]) < s.vocab_size) {
        ++count;
        last_valid = j;
      }
    }
    if (discard) count = 0;
    int64_t next;
    if (count > 0) {
      next = static_cast<int64_t>(row[last_valid]);
    } else if (s.has_backup) {
      next = backup_next_token_ids[r];
    } else {
      const int64_t n = num_tokens_no_spec[r];
      next = n >= 1 && n <= s.token_cols ? token_ids[r * s.token_stride + n - 1] : -1;
    }
    next_token_ids[r] = static_cast<int32_t>(next);
    valid_sampled_token_count[r] = static_cast<int32_t>(count);
    if (!s.padded_path) continue;
    const int64_t drafts = static_cast<int64_t>(cu_num_draft_tokens[r]) - (r > 0 ? cu_num_draft_tokens[r - 1] : 0);
    const int64_t rejected = drafts > 0 ? drafts + 1 - count : 0;
    num_rejected_tokens[r] = static_cast<int32_t>(rejected);
    token_indices_to_sample[r] = static_cast<int32_t>(
        std::max<int64_t>(static_cast<int64_t>(query_start_loc[r + 1]) - 1 - rejected, query_start_loc[r]));
  }
  std::fill(next_token_ids + s.num_reqs, next_token_ids + s.next_end, 0);
  std::fill(valid_sampled_token_count + s.num_reqs, valid_sampled_token_count + s.count_end, 0);
  if (!s.padded_path) return;
  std::fill(num_rejected_tokens + s.num_reqs, num_rejected_tokens + s.rejected_end, 0);
  std::fill(token_indices_to_sample + s.num_reqs, token_indices_to_sample + s.index_end, 0);
}

}  // namespace specops::kernels
