// correct_num_computed_tokens: its metadata checks (check_count_correction, the Meta kernel, and
// every backend's first step), then the CPU op: the checks, the two-pass body.
#include <torch/library.h>


#include "cpu/accounting_checks.h"
#include "cpu/scratch.h"
#include "kernels/correct_num_computed_tokens.h"

namespace specops::cpu {
namespace {

void correct_num_computed_tokens(const at::Tensor& num_computed_tokens, const at::Tensor& num_accepted_tokens,
                                 const at::Tensor& prev_positions, const at::Tensor& valid_sampled_token_count,
                                 const at::Tensor& prev_num_draft_tokens, const at::Tensor& cpu_num_computed_tokens) {
  check_count_correction<int64_t>(num_computed_tokens, num_accepted_tokens, prev_positions, valid_sampled_token_count,
                                  prev_num_draft_tokens, cpu_num_computed_tokens);
  const kernels::CountCorrectionShape shape =
      count_correction_shape(num_computed_tokens, prev_positions, valid_sampled_token_count, prev_num_draft_tokens);
  int32_t* scratch = int32_scratch(2 * shape.num_rows);
  with_correction_inputs(prev_positions, valid_sampled_token_count, cpu_num_computed_tokens,
                         [&](auto* prev, auto* valid, auto* host) {
                           kernels::correct_num_computed_tokens(
                               num_computed_tokens.data_ptr<int32_t>(), num_accepted_tokens.data_ptr<int32_t>(), prev,
                               valid, prev_num_draft_tokens.data_ptr<int32_t>(), host, scratch, shape);
                         });
}

void check_correct_num_computed_tokens(const at::Tensor& num_computed_tokens, const at::Tensor& num_accepted_tokens,
                                       const at::Tensor& prev_positions, const at::Tensor& valid_sampled_token_count,
                                       const at::Tensor& prev_num_draft_tokens,
                                       const at::Tensor& cpu_num_computed_tokens) {
  check_count_correction<c10::SymInt>(num_computed_tokens, num_accepted_tokens, prev_positions,
                                      valid_sampled_token_count, prev_num_draft_tokens, cpu_num_computed_tokens);
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/async_accounting.md: async spec-decode token accounting. The corrections are in place: every read sees
  // the values from before the call.
  m.def(
      "correct_num_computed_tokens(Tensor(a!) num_computed_tokens, Tensor(b!) num_accepted_tokens, "
      "Tensor prev_positions, Tensor valid_sampled_token_count, Tensor prev_num_draft_tokens, "
      "Tensor cpu_num_computed_tokens) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("correct_num_computed_tokens", &correct_num_computed_tokens); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("correct_num_computed_tokens", &check_correct_num_computed_tokens); }

}  // namespace specops::cpu
