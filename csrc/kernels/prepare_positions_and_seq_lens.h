#pragma once
// Positions and seq_lens of a batch from its (corrected) device counts (docs/async_accounting.md).
//
// positions[t] = num_computed_tokens[r] + (t - query_start_loc[r]) for the tokens of request r,
// seq_lens[r] = num_computed_tokens[r] + query_len[r]; the padded tails are 0. With idx_mapping
// the counts are request-indexed, as a runner keeps them across steps: request r reads
// num_computed_tokens[idx_mapping[r]], and a request without a row (-1) has computed nothing.
#include <cstdint>

namespace specops::kernels {

struct PositionsShape {
  int64_t num_reqs = 0;
  int64_t num_tokens_padded = 0;  // >= query_start_loc[num_reqs], checked by the caller
  int64_t num_reqs_padded = 0;    // >= num_reqs
};

// CountOf: r -> int32 count of batch request r.
template <typename PosT, typename CountOf>
void positions_and_seq_lens(const CountOf& count_of, const int32_t* query_start_loc, PosT* positions,
                            int32_t* seq_lens, const PositionsShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int32_t count = count_of(r);
    const int64_t begin = query_start_loc[r];
    const int64_t end = query_start_loc[r + 1];
    const int64_t first = static_cast<int64_t>(count) - begin;
    for (int64_t t = begin; t < end; ++t) positions[t] = static_cast<PosT>(first + t);
    seq_lens[r] = static_cast<int32_t>(static_cast<uint32_t>(count) + static_cast<uint32_t>(end - begin));
  }
  for (int64_t t = query_start_loc[s.num_reqs]; t < s.num_tokens_padded; ++t) positions[t] = 0;
  for (int64_t r = s.num_reqs; r < s.num_reqs_padded; ++r) seq_lens[r] = 0;
}

template <typename PosT>
void prepare_positions_and_seq_lens(const int32_t* num_computed_tokens, const int32_t* query_start_loc,
                                    PosT* positions, int32_t* seq_lens, const PositionsShape& s) {
  positions_and_seq_lens([num_computed_tokens](int64_t r) { return num_computed_tokens[r]; }, query_start_loc,
                         positions, seq_lens, s);
}

// Request-indexed counts: num_computed_tokens has num_counts rows; a row outside them (-1, or
// past them on an unchecked path) counts 0.
template <typename PosT, typename IdxT>
void prepare_positions_and_seq_lens(const int32_t* num_computed_tokens, int64_t num_counts, const IdxT* idx_mapping,
                                    const int32_t* query_start_loc, PosT* positions, int32_t* seq_lens,
                                    const PositionsShape& s) {
  const auto count_of = [=](int64_t r) {
    const int64_t row = static_cast<int64_t>(idx_mapping[r]);
    return row >= 0 && row < num_counts ? num_computed_tokens[row] : int32_t{0};
  };
  positions_and_seq_lens(count_of, query_start_loc, positions, seq_lens, s);
}

}  // namespace specops::kernels
