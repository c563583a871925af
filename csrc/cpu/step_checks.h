#pragma once
// Checks shared by the step-bookkeeping ops (prepare_input_ids, count_sampled_and_rejected,
// post_update_after_sampling, prepare_next_token_ids, advance_draft_step): request rows read
// through idx_mapping, and the padded end of an output.
#include <optional>

#include "cpu/checks.h"

namespace specops::cpu {

// Every idx_mapping entry is a request row of the request-indexed tensors (num_rows of them) or
// negative (no request).
template <typename IdxT>
void check_request_rows(const IdxT* idx_mapping, int64_t num_reqs, int64_t num_rows, const char* rows_of) {
  for (int64_t r = 0; r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(static_cast<int64_t>(idx_mapping[r]) < num_rows, "idx_mapping[", r, "] = ",
                      static_cast<int64_t>(idx_mapping[r]), " is past the ", num_rows, " request rows of ", rows_of);
  }
}

// Where the padding of `out` ends: `padded` (the op's *_padded argument; -1: the buffer's end),
// which must lie in [real, out.numel()].
inline int64_t padded_end(const at::Tensor& out, const char* out_name, int64_t padded, const char* padded_name,
                          int64_t real, const char* real_name) {
  if (padded < 0) return out.numel() > real ? out.numel() : real;
  TORCH_CHECK_VALUE(padded >= real && padded <= out.numel(), padded_name, " must be in [", real_name, " = ", real,
                    ", ", out_name, ".numel() = ", out.numel(), "], got ", padded);
  return padded;
}

template <typename Run>
void with_index_type(const at::Tensor& t, Run&& run) {
  if (t.scalar_type() == c10::kLong) {
    run(static_cast<const int64_t*>(t.data_ptr<int64_t>()));
  } else {
    run(static_cast<const int32_t*>(t.data_ptr<int32_t>()));
  }
}

}  // namespace specops::cpu
