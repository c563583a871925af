#pragma once
// The KV length each decode-context-parallel (DCP) rank stores of every request.
//
// Under DCP a request's KV is dealt to the W ranks in runs of I tokens (the interleave): token p
// lives on rank (p / I) % W. Of a sequence of s tokens, every rank holds `base = s / I / W * I`
// tokens of the complete rounds (a round is W * I tokens), and the tokens of the last, partial
// round go to the ranks in order, at most I each:
//
//   local = base + clamp(s - base * W - rank * I, 0, I)
//
// Summed over the ranks this is s, and it equals the number of positions in [0, s) that
// compute_slot_mapping marks local to `rank` (for any allocation block that I divides).
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct DcpLocalSeqLensShape {
  int64_t num_reqs = 0;
  int64_t num_out = 0;  // entries of out, >= num_reqs; the ones past num_reqs become 0
  int64_t world_size = 1;
  int64_t rank = 0;
  int64_t interleave = 1;
};

// A negative length (invalid; the host op rejects it) stores nothing: 0, as the device kernels.
inline int64_t dcp_local_seq_len(int64_t seq_len, const DcpLocalSeqLensShape& s) {
  if (seq_len <= 0) return 0;
  const int64_t round = s.world_size * s.interleave;
  const int64_t base = seq_len / round * s.interleave;
  const int64_t tail = seq_len - base * s.world_size - s.rank * s.interleave;
  return base + std::clamp<int64_t>(tail, 0, s.interleave);
}

// SeqT: int32 or int64, for seq_lens and out alike (a local length is never above its s).
template <typename SeqT>
void dcp_local_seq_lens(const SeqT* seq_lens, SeqT* out, const DcpLocalSeqLensShape& s) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    out[r] = static_cast<SeqT>(dcp_local_seq_len(static_cast<int64_t>(seq_lens[r]), s));
  }
  std::fill(out + s.num_reqs, out + s.num_out, SeqT{0});
}

}  // namespace specops::kernels
