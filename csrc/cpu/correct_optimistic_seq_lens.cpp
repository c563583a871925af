// CPU op for correct_optimistic_seq_lens: validates, then runs the two-pass body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "cpu/checks.h"
#include "cpu/scratch.h"
#include "kernels/correct_optimistic_seq_lens.h"

namespace specops::cpu {
namespace {

// Per-thread scratch of the int64 path (runners keep int64 host copies of seq_lens); only grows.
int64_t* int64_scratch(int64_t size) {
  thread_local std::vector<int64_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

void correct_optimistic_seq_lens(const at::Tensor& seq_lens_cpu, const at::Tensor& prev_positions,
                                 const at::Tensor& valid_sampled_token_count, const at::Tensor& prev_num_draft_tokens) {
  check_tensor(seq_lens_cpu, "seq_lens_cpu", {c10::kInt, c10::kLong}, 1);
  check_tensor(prev_positions, "prev_positions", {c10::kInt, c10::kLong}, 1);
  check_tensor(valid_sampled_token_count, "valid_sampled_token_count", {c10::kInt}, 1);
  check_tensor(prev_num_draft_tokens, "prev_num_draft_tokens", {c10::kInt}, 1);
  kernels::CountCorrectionShape shape;
  shape.num_rows = prev_positions.numel();
  shape.num_previous_rows = std::min(valid_sampled_token_count.numel(), prev_num_draft_tokens.numel());
  check_min_numel(seq_lens_cpu, "seq_lens_cpu", shape.num_rows, "n = prev_positions.numel()");
  const bool wide = seq_lens_cpu.scalar_type() == c10::kLong;
  AT_DISPATCH_INDEX_TYPES(prev_positions.scalar_type(), "correct_optimistic_seq_lens", [&] {
    const index_t* prev = prev_positions.data_ptr<index_t>();
    const int32_t* valid = valid_sampled_token_count.data_ptr<int32_t>();
    const int32_t* drafts = prev_num_draft_tokens.data_ptr<int32_t>();
    if (wide) {
      kernels::correct_optimistic_seq_lens<index_t, int64_t>(seq_lens_cpu.data_ptr<int64_t>(), prev, valid, drafts,
                                                             int64_scratch(shape.num_rows), shape);
    } else {
      kernels::correct_optimistic_seq_lens<index_t, int32_t>(seq_lens_cpu.data_ptr<int32_t>(), prev, valid, drafts,
                                                             int32_scratch(shape.num_rows), shape);
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("correct_optimistic_seq_lens", &correct_optimistic_seq_lens); }

}  // namespace specops::cpu
