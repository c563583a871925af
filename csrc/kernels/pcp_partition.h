#pragma once
// The prefill-context-parallel (PCP) layout of a batch over P ranks, DualChunkSwap style, for
// every rank at once. A host computation on host counts, once per step, identical on every rank.
//
// A prefill of q tokens is cut into C = 2P chunks of s = ceil(q / C) tokens; rank k computes
// chunks k and C - 1 - k (the causal cost of a head and a tail chunk balances). A replicated
// request (every decode; under DCP also a prefill too short to fill the C chunks) is whole on
// one owner rank (shard_decode: round-robin over the replicated requests with q > 0) or on every
// rank. A rank's segments are its chunks ordered by (is_prefilling, request, chunk start): the
// decodes, then the prefills, each request's chunks in query order. Walking the requests twice
// (decodes, then prefills) in request order gives that order without a sort, and since the
// chunk k starts before the chunk C - 1 - k, a request's chunks come out in query order.
//
// The gathered stream is the P local streams, each padded to L tokens, one after another:
//   padded_gather_idx[k L + o]  = the global token at local offset o of rank k (0 on padding)
//   gathered_kv_write_mask      = whether that copy writes its KV (one copy of every token does)
//   hidden_restore_idx[t]       = where the writing copy of global token t sits in the stream
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

struct PcpPartitionShape {
  int64_t num_reqs = 0;
  int64_t world_size = 1;  // P
  int64_t dcp_world_size = 1;
  bool shard_decode_requests = false;
};

template <typename CountT>
inline bool pcp_replicated(CountT q, bool prefilling, const PcpPartitionShape& s) {
  if (!prefilling) return true;
  if (s.dcp_world_size <= 1) return false;
  const int64_t chunks = 2 * s.world_size;
  const int64_t len = static_cast<int64_t>(q);
  return (chunks - 1) * ((len + chunks - 1) / chunks) >= len;
}

// Calls visit(r, a, b, writes) for every segment of rank k, in the rank's order. Every chunk
// visited is non-empty. `writes`: this copy is the one that writes the token's KV.
template <typename CountT, typename Visit>
inline void pcp_visit_rank(const CountT* q, const bool* prefilling, const PcpPartitionShape& s, int64_t k,
                           Visit&& visit) {
  const int64_t chunks = 2 * s.world_size;
  for (int pass = 0; pass < 2; ++pass) {
    const bool want_prefill = pass == 1;
    // The owner ordinal counts replicated requests in request order. With shard_decode_requests
    // (which the host op allows only with DCP 1) the replicated requests are exactly the decodes,
    // all walked in the first pass, so this counter is their global ordinal.
    int64_t ordinal = 0;
    for (int64_t r = 0; r < s.num_reqs; ++r) {
      const int64_t len = static_cast<int64_t>(q[r]);
      if (len <= 0 || prefilling[r] != want_prefill) continue;
      if (!pcp_replicated(q[r], prefilling[r], s)) {
        const int64_t size = (len + chunks - 1) / chunks;
        for (const int64_t chunk : {k, chunks - 1 - k}) {
          const int64_t a = chunk * size;
          const int64_t b = std::min(a + size, len);
          if (b > a) visit(r, a, b, true);
        }
      } else if (s.shard_decode_requests) {
        const int64_t owner = ordinal++ % s.world_size;
        if (owner == k) visit(r, int64_t{0}, len, true);
      } else {
        visit(r, int64_t{0}, len, k == 0);
      }
    }
  }
}

// Pass 1: the tokens and segments of every rank (before the empty-segment rule), so that the
// caller can size the outputs.
template <typename CountT>
void pcp_partition_sizes(const CountT* q, const bool* prefilling, const PcpPartitionShape& s, int64_t* rank_tokens,
                         int64_t* rank_segments) {
  for (int64_t k = 0; k < s.world_size; ++k) {
    int64_t tokens = 0;
    int64_t segments = 0;
    pcp_visit_rank(q, prefilling, s, k, [&](int64_t, int64_t a, int64_t b, bool) {
      tokens += b - a;
      ++segments;
    });
    rank_tokens[k] = tokens;
    rank_segments[k] = segments;
  }
}

// Where pass 2 writes. Per rank k, the segment arrays (int32) hold n_k = max(segments, 1)
// entries from seg_offset[k] = sum of n_j for j < k, and local_query_start_loc n_k + 1 entries
// from seg_offset[k] + k (a rank with no segment gets one empty segment (0, [0, 0))).
struct PcpPartitionOutputs {
  int64_t padded_num_tokens = 0;  // L
  int64_t* padded_gather_idx = nullptr;  // [P L]
  bool* write_mask = nullptr;  // [P L]
  int64_t* hidden_restore_idx = nullptr;  // [T]
  bool* replicated = nullptr;  // [R]
  int32_t* req_idx = nullptr;  // local_to_global_batch_req_idx
  int32_t* num_scheduled = nullptr;  // local_num_scheduled_tokens
  int32_t* start_pos = nullptr;  // local_start_pos
  int32_t* seq_len_upper_bound = nullptr;  // local_seq_lens_cpu_upper_bound
  int32_t* query_start_loc = nullptr;  // local_query_start_loc, packed as above
};

// Pass 2. computed: num_computed_tokens (c), whose c[r] + q[r] the caller checked fits int32.
template <typename CountT, typename ComputedT>
void pcp_partition_fill(const CountT* q, const ComputedT* computed, const bool* prefilling, const PcpPartitionShape& s,
                        const PcpPartitionOutputs& out) {
  const int64_t L = out.padded_num_tokens;
  for (int64_t r = 0; r < s.num_reqs; ++r) out.replicated[r] = pcp_replicated(q[r], prefilling[r], s);
  std::fill(out.padded_gather_idx, out.padded_gather_idx + s.world_size * L, int64_t{0});
  std::fill(out.write_mask, out.write_mask + s.world_size * L, false);
  int64_t segment = 0;
  for (int64_t k = 0; k < s.world_size; ++k) {
    int32_t* lqsl = out.query_start_loc + segment + k;
    const int64_t first_segment = segment;
    int64_t offset = 0;  // local token offset of the next segment
    // The global start of request r: each of the visitor's two walks is in request order, so a
    // cursor restarted with each walk sums q over the requests before r in O(R) per walk.
    int64_t cursor_req = 0;
    int64_t cursor_start = 0;
    int last_pass_prefill = -1;
    lqsl[0] = 0;
    pcp_visit_rank(q, prefilling, s, k, [&](int64_t r, int64_t a, int64_t b, bool writes) {
      const int pass = prefilling[r] ? 1 : 0;
      if (pass != last_pass_prefill) {
        last_pass_prefill = pass;
        cursor_req = 0;
        cursor_start = 0;
      }
      for (; cursor_req < r; ++cursor_req) cursor_start += std::max<int64_t>(static_cast<int64_t>(q[cursor_req]), 0);
      const int64_t global = cursor_start + a;
      const int64_t stream = k * L + offset;
      const int64_t len = b - a;
      for (int64_t i = 0; i < len; ++i) out.padded_gather_idx[stream + i] = global + i;
      if (writes) {
        std::fill(out.write_mask + stream, out.write_mask + stream + len, true);
        for (int64_t i = 0; i < len; ++i) out.hidden_restore_idx[global + i] = stream + i;
      }
      const int64_t c = static_cast<int64_t>(computed[r]);
      out.req_idx[segment] = static_cast<int32_t>(r);
      out.num_scheduled[segment] = static_cast<int32_t>(len);
      out.start_pos[segment] = static_cast<int32_t>(c + a);
      out.seq_len_upper_bound[segment] = static_cast<int32_t>(c + b);
      offset += len;
      lqsl[segment - first_segment + 1] = static_cast<int32_t>(offset);
      ++segment;
    });
    if (segment == first_segment) {  // the empty segment (0, [0, 0)), as vLLM's partition_batch
      const int32_t c0 = s.num_reqs > 0 ? static_cast<int32_t>(computed[0]) : 0;
      out.req_idx[segment] = 0;
      out.num_scheduled[segment] = 0;
      out.start_pos[segment] = c0;
      out.seq_len_upper_bound[segment] = c0;
      lqsl[1] = 0;
      ++segment;
    }
  }
}

}  // namespace specops::kernels
