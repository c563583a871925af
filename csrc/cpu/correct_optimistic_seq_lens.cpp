// CPU op for correct_optimistic_seq_lens: validates, then runs the two-pass body.
#include <torch/library.h>

#include <algorithm>

#include "cpu/accounting_checks.h"
#include "cpu/scratch.h"
#include "kernels/correct_optimistic_seq_lens.h"

namespace specops::cpu {
namespace {

void correct_optimistic_seq_lens(const at::Tensor& seq_lens_cpu, const at::Tensor& prev_positions,
                                 const at::Tensor& valid_sampled_token_count, const at::Tensor& prev_num_draft_tokens) {
  check_tensor(seq_lens_cpu, "seq_lens_cpu", {c10::kInt, c10::kLong}, 1);
  check_tensor(prev_positions, "prev_positions", {c10::kInt, c10::kLong}, 1);
  // vllm-ascend's host copy of the valid counts is int64.
  check_tensor(valid_sampled_token_count, "valid_sampled_token_count", {c10::kInt, c10::kLong}, 1);
  check_tensor(prev_num_draft_tokens, "prev_num_draft_tokens", {c10::kInt}, 1);
  kernels::CountCorrectionShape shape;
  shape.num_rows = prev_positions.numel();
  shape.num_previous_rows = std::min(valid_sampled_token_count.numel(), prev_num_draft_tokens.numel());
  check_entries(seq_lens_cpu, "seq_lens_cpu", shape.num_rows, "n = prev_positions.numel()");
  const bool wide = seq_lens_cpu.scalar_type() == c10::kLong;
  with_int_data(prev_positions, [&](auto* prev) {
    with_int_data(valid_sampled_token_count, [&](auto* valid) {
      const int32_t* drafts = prev_num_draft_tokens.data_ptr<int32_t>();
      if (wide) {
        kernels::correct_optimistic_seq_lens(seq_lens_cpu.data_ptr<int64_t>(), prev, valid, drafts,
                                             int64_scratch(shape.num_rows), shape);
      } else {
        kernels::correct_optimistic_seq_lens(seq_lens_cpu.data_ptr<int32_t>(), prev, valid, drafts,
                                             int32_scratch(shape.num_rows), shape);
      }
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("correct_optimistic_seq_lens", &correct_optimistic_seq_lens); }

}  // namespace specops::cpu
