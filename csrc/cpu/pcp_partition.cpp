// CPU op for pcp_partition: validates the host counts, sizes the layout, then runs the body.
// Host-only (no device kernel): the layout is host work on host counts, before the forward.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "cpu/checks.h"
#include "kernels/pcp_partition.h"

namespace specops::cpu {
namespace {

// docs/pcp.md: the largest pcp_world_size (python/specops/reference/pcp_partition.py says the same).
constexpr int64_t kMaxPcpWorldSize = 65536;

template <typename T>
int64_t at_index(const at::Tensor& t, int64_t i) {
  return static_cast<int64_t>(t.data_ptr<T>()[i]);
}

int64_t value_at(const at::Tensor& t, int64_t i) {
  return t.scalar_type() == c10::kInt ? at_index<int32_t>(t, i) : at_index<int64_t>(t, i);
}

template <typename CountT, typename ComputedT>
std::vector<at::Tensor> run(const at::Tensor& q_t, const at::Tensor& c_t, const at::Tensor& f_t,
                            const kernels::PcpPartitionShape& shape, int64_t padded_num_tokens) {
  const CountT* q = q_t.data_ptr<CountT>();
  const ComputedT* c = c_t.data_ptr<ComputedT>();
  const bool* f = f_t.data_ptr<bool>();
  const int64_t P = shape.world_size;
  std::vector<int64_t> sizes(static_cast<size_t>(2 * P));
  kernels::pcp_partition_sizes(q, f, shape, sizes.data(), sizes.data() + P);
  int64_t max_tokens = 0;
  int64_t num_segments = 0;
  for (int64_t k = 0; k < P; ++k) {
    max_tokens = std::max(max_tokens, sizes[k]);
    sizes[P + k] = std::max<int64_t>(sizes[P + k], 1);
    num_segments += sizes[P + k];
  }
  int64_t L = max_tokens;
  if (padded_num_tokens >= 0) {
    TORCH_CHECK_VALUE(padded_num_tokens >= max_tokens,
                      "padded_num_tokens must be >= the largest rank's token count max(per_rank_num_tokens) = ",
                      max_tokens, ", got ", padded_num_tokens);
    L = padded_num_tokens;
  }
  TORCH_CHECK_VALUE(L <= INT32_MAX / P, "pcp_world_size * padded_num_tokens must be <= 2^31 - 1, got ", P, " * ", L);
  int64_t total = 0;
  for (int64_t r = 0; r < shape.num_reqs; ++r) total += static_cast<int64_t>(q[r]);

  const auto host = at::TensorOptions().device(at::kCPU);
  at::Tensor gather = at::empty({P * L}, host.dtype(at::kLong));
  at::Tensor mask = at::empty({P * L}, host.dtype(at::kBool));
  at::Tensor restore = at::empty({total}, host.dtype(at::kLong));
  at::Tensor replicated = at::empty({shape.num_reqs}, host.dtype(at::kBool));
  at::Tensor rank_info = at::empty({1 + 2 * P}, host.dtype(at::kLong));
  at::Tensor segments = at::empty({4, num_segments}, host.dtype(at::kInt));
  at::Tensor query_start_loc = at::empty({num_segments + P}, host.dtype(at::kInt));

  int64_t* info = rank_info.data_ptr<int64_t>();
  info[0] = L;
  std::copy(sizes.begin(), sizes.end(), info + 1);
  int32_t* seg = segments.data_ptr<int32_t>();
  kernels::PcpPartitionOutputs out;
  out.padded_num_tokens = L;
  out.padded_gather_idx = gather.data_ptr<int64_t>();
  out.write_mask = mask.data_ptr<bool>();
  out.hidden_restore_idx = restore.data_ptr<int64_t>();
  out.replicated = replicated.data_ptr<bool>();
  out.req_idx = seg;
  out.num_scheduled = seg + num_segments;
  out.start_pos = seg + 2 * num_segments;
  out.seq_len_upper_bound = seg + 3 * num_segments;
  out.query_start_loc = query_start_loc.data_ptr<int32_t>();
  kernels::pcp_partition_fill(q, c, f, shape, out);
  return {gather, mask, restore, replicated, rank_info, segments, query_start_loc};
}

// The metadata checks (the values are checked by the body's pass below).
void check_pcp_partition(const at::Tensor& num_scheduled_tokens, const at::Tensor& num_computed_tokens,
                         const at::Tensor& is_prefilling, int64_t pcp_world_size, bool shard_decode_requests,
                         int64_t dcp_world_size, int64_t padded_num_tokens) {
  check_tensor(num_scheduled_tokens, "num_scheduled_tokens", {c10::kInt, c10::kLong}, 1);
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt, c10::kLong}, 1);
  check_tensor(is_prefilling, "is_prefilling", {c10::kBool}, 1);
  check_positive(pcp_world_size, "pcp_world_size");
  check_positive(dcp_world_size, "dcp_world_size");
  // The layout holds host arrays per rank (its counts, at least one segment each): a bound past
  // any deployment keeps them small, where int32 indexing alone (2^30 ranks) let the op ask for
  // tens of GiB and end in std::bad_alloc.
  TORCH_CHECK_VALUE(pcp_world_size <= kMaxPcpWorldSize, "pcp_world_size must be <= ", kMaxPcpWorldSize, ", got ",
                    pcp_world_size);
  TORCH_CHECK_VALUE(!(shard_decode_requests && dcp_world_size > 1),
                    "shard_decode_requests=True needs dcp_world_size == 1 (got ", dcp_world_size,
                    "): a short prefill replicated under DCP would get one owner, and no rank would write its KV "
                    "when that owner is not rank 0");
  TORCH_CHECK_VALUE(padded_num_tokens >= -1, "padded_num_tokens must be >= 0 (or None), got ", padded_num_tokens);
  const int64_t R = num_scheduled_tokens.numel();
  TORCH_CHECK_VALUE(num_computed_tokens.numel() == R, "num_computed_tokens must have R = num_scheduled_tokens.numel() = ",
                    R, " entries, got ", num_computed_tokens.numel());
  TORCH_CHECK_VALUE(is_prefilling.numel() == R, "is_prefilling must have R = num_scheduled_tokens.numel() = ", R,
                    " entries, got ", is_prefilling.numel());
}

std::vector<at::Tensor> pcp_partition(const at::Tensor& num_scheduled_tokens, const at::Tensor& num_computed_tokens,
                                      const at::Tensor& is_prefilling, int64_t pcp_world_size,
                                      bool shard_decode_requests, int64_t dcp_world_size, int64_t padded_num_tokens) {
  check_pcp_partition(num_scheduled_tokens, num_computed_tokens, is_prefilling, pcp_world_size,
                      shard_decode_requests, dcp_world_size, padded_num_tokens);
  const int64_t R = num_scheduled_tokens.numel();
  int64_t total = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t q = value_at(num_scheduled_tokens, r);
    const int64_t c = value_at(num_computed_tokens, r);
    TORCH_CHECK_VALUE(q >= 0, "num_scheduled_tokens[", r, "] must be >= 0, got ", q);
    TORCH_CHECK_VALUE(c >= 0, "num_computed_tokens[", r, "] must be >= 0, got ", c);
    // local_start_pos and the seq_len bound are int32: c + q must fit.
    TORCH_CHECK_VALUE(q <= INT32_MAX - c, "num_computed_tokens[", r, "] + num_scheduled_tokens[", r,
                      "] must be <= 2^31 - 1, got ", c, " + ", q);
    total += q;
    TORCH_CHECK_VALUE(total <= INT32_MAX, "the batch's token count sum(num_scheduled_tokens) must be <= 2^31 - 1");
  }
  kernels::PcpPartitionShape shape;
  shape.num_reqs = R;
  shape.world_size = pcp_world_size;
  shape.dcp_world_size = dcp_world_size;
  shape.shard_decode_requests = shard_decode_requests;
  const bool q32 = num_scheduled_tokens.scalar_type() == c10::kInt;
  const bool c32 = num_computed_tokens.scalar_type() == c10::kInt;
  const at::Tensor& q = num_scheduled_tokens;
  const at::Tensor& c = num_computed_tokens;
  if (q32 && c32) return run<int32_t, int32_t>(q, c, is_prefilling, shape, padded_num_tokens);
  if (q32) return run<int32_t, int64_t>(q, c, is_prefilling, shape, padded_num_tokens);
  if (c32) return run<int64_t, int32_t>(q, c, is_prefilling, shape, padded_num_tokens);
  return run<int64_t, int64_t>(q, c, is_prefilling, shape, padded_num_tokens);
}

// The Meta entry: the checks alone, for the reference backend's pre-check (specops._fastpath.
// check_entry calls it on the host tensors). The layout's sizes depend on the counts' values, so
// there is no fake kernel: on meta (fake) tensors it refuses after the checks. A host op, it is
// called before the forward, never inside a graph.
std::vector<at::Tensor> check_only(const at::Tensor& num_scheduled_tokens, const at::Tensor& num_computed_tokens,
                                   const at::Tensor& is_prefilling, int64_t pcp_world_size,
                                   bool shard_decode_requests, int64_t dcp_world_size, int64_t padded_num_tokens) {
  check_pcp_partition(num_scheduled_tokens, num_computed_tokens, is_prefilling, pcp_world_size,
                      shard_decode_requests, dcp_world_size, padded_num_tokens);
  TORCH_CHECK(!num_scheduled_tokens.device().is_meta(),
              "pcp_partition is a host op: its outputs' sizes depend on the counts' values, so it has no fake "
              "kernel (call it before the forward, outside a compiled region)");
  return {};
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // end of the step-bookkeeping block
  // docs/pcp.md: prefill context parallelism (DualChunkSwap).
  // Host-only: every rank's layout from host counts (padded_num_tokens -1: the largest rank's
  // count). Returns [padded_gather_idx, gathered_kv_write_mask, hidden_restore_idx, replicated,
  // rank_info (L, then the tokens and the segment count of every rank), segments (int32 [4, S]:
  // request, length, start position, seq_len bound of every rank's segments, rank after rank),
  // local_query_start_loc (int32 [S + P], every rank's n_k + 1 entries, rank after rank)].
  m.def(
      "pcp_partition(Tensor num_scheduled_tokens, Tensor num_computed_tokens, Tensor is_prefilling, "
      "int pcp_world_size, bool shard_decode_requests, int dcp_world_size, int padded_num_tokens) -> Tensor[]");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("pcp_partition", &pcp_partition); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("pcp_partition", &check_only); }

}  // namespace specops::cpu
