#pragma once
// Request state after a step's sampling, for every batch row with a request row (rows outside
// [0, num_rows) are skipped entirely). All reads of a row's state come before its writes.
//
// Sampling mode: the drafts received (when given) are stored as the row's drafts; the ns =
// num_sampled[r] kept tokens are appended at total_len[row] (ns clamped to [0, S]; tokens past
// the token table's width are not stored, total_len still advances), counted in the penalty
// bins (tokens outside [0, V) are not counted), the last one becomes the row's last sampled
// token, and num_computed_tokens[row] grows by the query length minus the rejected tokens.
// Pooling mode: num_computed_tokens[row] grows by the query length.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct PostUpdateShape {
  int64_t num_reqs = 0;
  int64_t num_rows = 0;  // request rows every request-indexed tensor has
  bool has_query_start_loc = false;
  bool sampling = false;
  int64_t sampled_cols = 0;  // S
  int64_t sampled_stride = 0;
  int64_t last_stride = 1;
  int64_t token_cols = 0;  // W
  int64_t token_stride = 0;
  bool has_bins = false;
  int64_t vocab_size = 0;  // V
  int64_t bins_stride = 0;
  bool has_drafts = false;
  int64_t draft_cols = 0;
  int64_t draft_stride = 0;
  int64_t draft_out_stride = 0;
};

template <typename IdxT, typename SampledT, typename LastT, typename DraftT>
void post_update_after_sampling(const IdxT* idx_mapping, int32_t* num_computed_tokens, const int32_t* query_start_loc,
                                const SampledT* sampled_tokens, const int32_t* num_sampled,
                                const int32_t* num_rejected, LastT* last_sampled_tokens, int32_t* all_token_ids,
                                int32_t* total_len, int32_t* output_bin_counts, const DraftT* draft_tokens,
                                DraftT* draft_tokens_out, const PostUpdateShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t row = static_cast<int64_t>(idx_mapping[r]);
    if (row < 0 || row >= s.num_rows) continue;
    const int64_t query_len =
        s.has_query_start_loc ? static_cast<int64_t>(query_start_loc[r + 1]) - query_start_loc[r] : 0;
    if (!s.sampling) {
      num_computed_tokens[row] = static_cast<int32_t>(num_computed_tokens[row] + query_len);
      continue;
    }
    for (int64_t k = 0; s.has_drafts && k < s.draft_cols; ++k) {
      draft_tokens_out[row * s.draft_out_stride + k] = draft_tokens[r * s.draft_stride + k];
    }
    const int64_t ns = std::clamp<int64_t>(num_sampled[r], 0, s.sampled_cols);
    const int64_t n0 = total_len[row];
    const SampledT* sampled = sampled_tokens + r * s.sampled_stride;
    if (ns > 0) {
      last_sampled_tokens[row * s.last_stride] = static_cast<LastT>(sampled[ns - 1]);
      total_len[row] = static_cast<int32_t>(n0 + ns);
    }
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t token = static_cast<int64_t>(sampled[i]);
      const int64_t column = n0 + i;
      if (column >= 0 && column < s.token_cols) {
        all_token_ids[row * s.token_stride + column] = static_cast<int32_t>(token);
      }
      if (s.has_bins && token >= 0 && token < s.vocab_size) ++output_bin_counts[row * s.bins_stride + token];
    }
    num_computed_tokens[row] = static_cast<int32_t>(num_computed_tokens[row] + query_len - num_rejected[r]);
  }
}

}  // namespace specops::kernels
