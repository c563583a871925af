#pragma once
// Positions and seq_lens of a batch from its (corrected) device counts. SPEC 3.2.
//
// positions[t] = num_computed_tokens[r] + (t - query_start_loc[r]) for the tokens of request r,
// seq_lens[r] = num_computed_tokens[r] + query_len[r]; the padded tails are 0.
#include <cstdint>

namespace specops::kernels {

struct PositionsShape {
  int64_t num_reqs = 0;
  int64_t num_tokens_padded = 0;  // >= query_start_loc[num_reqs], checked by the caller
  int64_t num_reqs_padded = 0;    // >= num_reqs
};

template <typename PosT>
void prepare_positions_and_seq_lens(const int32_t* num_computed_tokens, const int32_t* query_start_loc,
                                    PosT* positions, int32_t* seq_lens, const PositionsShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int32_t count = num_computed_tokens[r];
    const int64_t begin = query_start_loc[r];
    const int64_t end = query_start_loc[r + 1];
    const int64_t first = static_cast<int64_t>(count) - begin;
    for (int64_t t = begin; t < end; ++t) positions[t] = static_cast<PosT>(first + t);
    seq_lens[r] = static_cast<int32_t>(static_cast<uint32_t>(count) + static_cast<uint32_t>(end - begin));
  }
  for (int64_t t = query_start_loc[s.num_reqs]; t < s.num_tokens_padded; ++t) positions[t] = 0;
  for (int64_t r = s.num_reqs; r < s.num_reqs_padded; ++r) seq_lens[r] = 0;
}

}  // namespace specops::kernels
