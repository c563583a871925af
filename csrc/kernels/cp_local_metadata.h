#pragma once
// Per-rank view of a batch under DSA-CP (docs/context_parallel.md): which part of each request's query lives
// in this rank's token slice [local_start, local_end), and how much KV those tokens see.
//
// The cumulative local query lengths telescope: the sum over k <= r of
// clamp(qsl[k + 1]) - clamp(qsl[k]) is clamp(qsl[r + 1]) - clamp(qsl[0]), so every entry is
// computed on its own, with no scan (the Triton kernel relies on the same identity).
#include <cstdint>

#include "kernels/cp_token_split.h"

namespace specops::kernels {

struct CPLocalShape {
  int64_t num_reqs = 0;
  int64_t local_start = 0;
  int64_t local_end = 0;
  bool causal = true;
  int64_t local_query_start_loc_len = 1;  // >= num_reqs + 1; the tail repeats the last start
  int64_t local_seq_lens_len = 0;         // >= num_reqs; the tail is 0
  int64_t start_pos_len = 0;              // >= num_reqs; the tail is 0
};

// Local KV length of request r, given its global query range [begin, end) and seq_len.
inline int64_t local_seq_len(int64_t begin, int64_t end, int64_t seq_len, const CPLocalShape& s) {
  const int64_t local_begin = clamp_to(begin, s.local_start, s.local_end);
  const int64_t local_end = clamp_to(end, s.local_start, s.local_end);
  if (local_end <= local_begin) return 0;
  if (!s.causal) return seq_len;
  if (seq_len <= 0) return 0;
  // Tokens of the request on later ranks are not visible to this rank's tokens.
  const int64_t later = end - local_end;
  return seq_len > later ? seq_len - later : 0;
}

inline void cp_local_metadata(const int32_t* query_start_loc, const int32_t* seq_lens, int32_t* local_query_start_loc,
                              int32_t* local_seq_lens, int32_t* start_pos, const CPLocalShape& s) {
  const int64_t first = clamp_to(query_start_loc[0], s.local_start, s.local_end);
  for (int64_t r = 0; r <= s.num_reqs; ++r) {
    local_query_start_loc[r] =
        static_cast<int32_t>(clamp_to(query_start_loc[r], s.local_start, s.local_end) - first);
  }
  const int32_t last = local_query_start_loc[s.num_reqs];
  for (int64_t r = s.num_reqs + 1; r < s.local_query_start_loc_len; ++r) local_query_start_loc[r] = last;

  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t begin = query_start_loc[r];
    const int64_t end = query_start_loc[r + 1];
    local_seq_lens[r] = static_cast<int32_t>(local_seq_len(begin, end, seq_lens[r], s));
    start_pos[r] = static_cast<int32_t>(seq_lens[r] - (end - begin));
  }
  for (int64_t r = s.num_reqs; r < s.local_seq_lens_len; ++r) local_seq_lens[r] = 0;
  for (int64_t r = s.num_reqs; r < s.start_pos_len; ++r) start_pos[r] = 0;
}

struct CPLocalMaxima {
  int64_t max_local_query_len = 1;
  int64_t max_local_seq_len = 1;
};

// The host ints of CPLocalMetadata, from host copies of the inputs; seq_lens (int32 or int64:
// runners keep int64 host copies) may be null when only the query maximum is wanted.
template <typename SeqT>
CPLocalMaxima cp_local_max_lens(const int32_t* query_start_loc, const SeqT* seq_lens, const CPLocalShape& s) {
  CPLocalMaxima maxima;
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t begin = query_start_loc[r];
    const int64_t end = query_start_loc[r + 1];
    const int64_t local_query_len =
        clamp_to(end, s.local_start, s.local_end) - clamp_to(begin, s.local_start, s.local_end);
    if (local_query_len > maxima.max_local_query_len) maxima.max_local_query_len = local_query_len;
    if (seq_lens != nullptr) {
      const int64_t seq_len = local_seq_len(begin, end, static_cast<int64_t>(seq_lens[r]), s);
      if (seq_len > maxima.max_local_seq_len) maxima.max_local_seq_len = seq_len;
    }
  }
  return maxima;
}

}  // namespace specops::kernels
