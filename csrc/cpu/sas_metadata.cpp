// CPU op for sas_metadata: validates, plans, and only then writes the 1024 words.
#include <torch/library.h>

#include <sstream>
#include <string>

#include "cpu/checks.h"
#include "kernels/sas_metadata.h"

namespace specops::cpu {
namespace {

namespace sas = kernels::sas;

std::string describe(const sas::SASStatus& status) {
  std::ostringstream message;
  switch (status.error) {
    case sas::SASError::kNone:
      break;
    case sas::SASError::kNegativeQueryLen:
      message << "cu_seqlens_q must be non-decreasing, but cu_seqlens_q[" << status.request + 1 << "] < cu_seqlens_q["
              << status.request << "] (query length " << status.value << ")";
      break;
    case sas::SASError::kNegativeKvLen:
      message << "seqused_kv must be >= 0, got seqused_kv[" << status.request << "] = " << status.value;
      break;
    case sas::SASError::kTooManyRows:
      message << "cu_seqlens_q: request " << status.request << " has " << status.value
              << " query rows (query length * num_heads_q / num_heads_kv), more than 2^31 - 1";
      break;
    case sas::SASError::kCostOverflow:
      message << "cu_seqlens_q and seqused_kv describe more work than the int32 total cost word holds: "
              << status.value << " > 2^31 - 1";
      break;
  }
  return message.str();
}

void sas_metadata(const at::Tensor& cu_seqlens_q, const at::Tensor& seqused_kv, int64_t num_heads_q,
                  int64_t num_heads_kv, int64_t head_dim, int64_t window_left, int64_t window_right,
                  int64_t num_cube_cores, int64_t num_vector_cores, const at::Tensor& out) {
  check_tensor(cu_seqlens_q, "cu_seqlens_q", {c10::kInt}, 1);
  TORCH_CHECK_VALUE(cu_seqlens_q.numel() >= 1, "cu_seqlens_q must have R + 1 >= 1 entries, got 0");
  const int64_t num_reqs = cu_seqlens_q.numel() - 1;
  check_tensor(seqused_kv, "seqused_kv", {c10::kInt}, 1);
  TORCH_CHECK_VALUE(seqused_kv.numel() == num_reqs, "seqused_kv must have R = cu_seqlens_q.numel() - 1 = ",
                    num_reqs, " entries, got ", seqused_kv.numel());
  check_tensor(out, "out", {c10::kInt}, 1);
  TORCH_CHECK_VALUE(out.numel() == sas::kNumWords, "out must have exactly ", sas::kNumWords, " int32 words, got ",
                    out.numel());
  check_positive(num_heads_q, "num_heads_q");
  TORCH_CHECK_VALUE(num_heads_q <= sas::kInt32Max, "num_heads_q must be < 2^31, got ", num_heads_q);
  check_positive(num_heads_kv, "num_heads_kv");
  TORCH_CHECK_VALUE(num_heads_q % num_heads_kv == 0, "num_heads_q must be a multiple of num_heads_kv = ",
                    num_heads_kv, ", got ", num_heads_q);
  TORCH_CHECK_VALUE(num_reqs * num_heads_kv <= sas::kInt32Max,
                    "num_heads_kv * R must be < 2^31 (bn2 is an int32 word), got ", num_reqs * num_heads_kv);
  check_positive(head_dim, "head_dim");
  TORCH_CHECK_VALUE(window_left >= -1, "window_left must be >= -1 (-1: unbounded), got ", window_left);
  TORCH_CHECK_VALUE(window_right >= -1, "window_right must be >= -1 (-1: unbounded), got ", window_right);
  TORCH_CHECK_VALUE(num_cube_cores >= 1 && num_cube_cores <= sas::kMaxCubeCores, "num_cube_cores must be in [1, ",
                    sas::kMaxCubeCores, "], got ", num_cube_cores);
  TORCH_CHECK_VALUE(num_vector_cores >= num_cube_cores && num_vector_cores <= sas::kMaxVectorCores,
                    "num_vector_cores must be in [num_cube_cores = ", num_cube_cores, ", ", sas::kMaxVectorCores,
                    "], got ", num_vector_cores);
  check_outputs_alias_nothing({{&out, {"out"}}}, {{&cu_seqlens_q, {"cu_seqlens_q"}}, {&seqused_kv, {"seqused_kv"}}});

  const sas::SASShape shape = sas::make_sas_shape(num_reqs, num_heads_q, num_heads_kv, head_dim, window_left,
                                                  window_right, num_cube_cores, num_vector_cores);
  sas::SASPlan plan;
  const sas::SASStatus status =
      sas::plan_sas_schedule(cu_seqlens_q.data_ptr<int32_t>(), seqused_kv.data_ptr<int32_t>(), shape, &plan);
  TORCH_CHECK_VALUE(status.error == sas::SASError::kNone, describe(status));
  sas::write_sas_schedule(plan, shape, out.data_ptr<int32_t>());
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("sas_metadata", &sas_metadata); }

}  // namespace specops::cpu
