// correct_optimistic_seq_lens: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks, the two-pass body.
#include <torch/library.h>

#include <algorithm>

#include "cpu/accounting_checks.h"
#include "cpu/scratch.h"
#include "kernels/correct_optimistic_seq_lens.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_correct_optimistic_seq_lens(const at::Tensor& seq_lens_cpu, const at::Tensor& prev_positions,
                                       const at::Tensor& valid_sampled_token_count,
                                       const at::Tensor& prev_num_draft_tokens) {
  check_tensor(seq_lens_cpu, "seq_lens_cpu", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(seq_lens_cpu, "seq_lens_cpu");
  check_tensor(prev_positions, "prev_positions", {c10::kInt, c10::kLong}, 1, anchor);
  // vllm-ascend's host copy of the valid counts is int64.
  check_tensor(valid_sampled_token_count, "valid_sampled_token_count", {c10::kInt, c10::kLong}, 1, anchor);
  check_tensor(prev_num_draft_tokens, "prev_num_draft_tokens", {c10::kInt}, 1, anchor);
  check_entries(seq_lens_cpu, "seq_lens_cpu", numel_of<Int>(prev_positions), "n = prev_positions.numel()");
}

void correct_optimistic_seq_lens(const at::Tensor& seq_lens_cpu, const at::Tensor& prev_positions,
                                 const at::Tensor& valid_sampled_token_count, const at::Tensor& prev_num_draft_tokens) {
  check_correct_optimistic_seq_lens<int64_t>(seq_lens_cpu, prev_positions, valid_sampled_token_count,
                                             prev_num_draft_tokens);
  kernels::CountCorrectionShape shape;
  shape.num_rows = prev_positions.numel();
  shape.num_previous_rows = std::min(valid_sampled_token_count.numel(), prev_num_draft_tokens.numel());
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

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "correct_optimistic_seq_lens(Tensor(a!) seq_lens_cpu, Tensor prev_positions, Tensor valid_sampled_token_count, "
      "Tensor prev_num_draft_tokens) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("correct_optimistic_seq_lens", &correct_optimistic_seq_lens); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("correct_optimistic_seq_lens", &check_correct_optimistic_seq_lens<c10::SymInt>);
}

}  // namespace specops::cpu
