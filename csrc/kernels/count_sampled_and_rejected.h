#pragma once
// What the sampler kept, per request of a step: a request still prefilling (seq_len below its
// prefill length, strictly: the step that completes the prefill samples its first token) samples
// and rejects nothing; any other request rejects the logits it did not keep.
//
//   chunked[r]      = row < 0 or seq_lens[r] < prefill_len[row]        (row = idx_mapping[r])
//   num_sampled[r]  = 0 if chunked[r] else num_sampled[r]
//   num_rejected[r] = 0 if chunked[r] else (cu[r+1] - cu[r]) - num_sampled[r]
//
// A row past the request-indexed prefill_len (rejected by the host op) counts as chunked, as on
// the device paths. Both outputs are 0 past the requests, up to their padded ends.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct CountSampledShape {
  int64_t num_reqs = 0;
  int64_t num_rows = 0;      // entries of prefill_len (request rows)
  int64_t sampled_end = 0;   // num_sampled is zeroed in [num_reqs, sampled_end)
  int64_t rejected_end = 0;  // num_rejected likewise
};

template <typename IdxT>
inline bool is_chunked(const int32_t* seq_lens, const IdxT* idx_mapping, const int32_t* prefill_len, int64_t r,
                       int64_t num_rows) {
  const int64_t row = static_cast<int64_t>(idx_mapping[r]);
  return row < 0 || row >= num_rows || seq_lens[r] < prefill_len[row];
}

template <typename IdxT>
void count_sampled_and_rejected(int32_t* num_sampled, const int32_t* seq_lens, const int32_t* cu_num_logits,
                                const IdxT* idx_mapping, const int32_t* prefill_len, int32_t* num_rejected,
                                const CountSampledShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    if (is_chunked(seq_lens, idx_mapping, prefill_len, r, s.num_rows)) {
      num_sampled[r] = 0;
      num_rejected[r] = 0;
      continue;
    }
    const int64_t num_logits = static_cast<int64_t>(cu_num_logits[r + 1]) - cu_num_logits[r];
    num_rejected[r] = static_cast<int32_t>(num_logits - num_sampled[r]);
  }
  std::fill(num_sampled + s.num_reqs, num_sampled + s.sampled_end, 0);
  std::fill(num_rejected + s.num_reqs, num_rejected + s.rejected_end, 0);
}

}  // namespace specops::kernels
