#pragma once
// The DSA-CP split of a flattened token stream across cp_size ranks (docs/context_parallel.md): the stream is
// padded to a multiple of cp_size and each rank owns one contiguous, equal slice of it.
#include <cstdint>

namespace specops::kernels {

struct CPTokenSplit {
  int64_t num_tokens_pad = 0;
  int64_t tokens_per_rank = 0;
  int64_t local_start = 0;
  int64_t local_end = 0;
};

inline CPTokenSplit cp_token_split(int64_t num_input_tokens, int64_t cp_size, int64_t cp_rank) {
  CPTokenSplit split;
  split.tokens_per_rank = (num_input_tokens + cp_size - 1) / cp_size;
  split.num_tokens_pad = split.tokens_per_rank * cp_size;
  split.local_start = cp_rank * split.tokens_per_rank;
  split.local_end = split.local_start + split.tokens_per_rank;
  return split;
}

inline int64_t clamp_to(int64_t value, int64_t low, int64_t high) {
  return value < low ? low : (value > high ? high : value);
}

}  // namespace specops::kernels
