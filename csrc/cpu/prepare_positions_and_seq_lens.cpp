// CPU op for prepare_positions_and_seq_lens: validates, then runs the body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/accounting_checks.h"
#include "kernels/prepare_positions_and_seq_lens.h"

namespace specops::cpu {
namespace {

void prepare_positions_and_seq_lens(const at::Tensor& num_computed_tokens, const at::Tensor& query_start_loc,
                                    const at::Tensor& positions, const at::Tensor& seq_lens, int64_t num_tokens_padded,
                                    int64_t num_reqs_padded) {
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1);
  check_positions_and_seq_lens(num_computed_tokens, query_start_loc, positions, seq_lens, num_tokens_padded,
                               num_reqs_padded);
  kernels::PositionsShape shape;
  shape.num_reqs = query_start_loc.numel() - 1;
  shape.num_tokens_padded = num_tokens_padded;
  shape.num_reqs_padded = num_reqs_padded;
  AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "prepare_positions_and_seq_lens", [&] {
    kernels::prepare_positions_and_seq_lens<index_t>(num_computed_tokens.data_ptr<int32_t>(),
                                                     query_start_loc.data_ptr<int32_t>(), positions.data_ptr<index_t>(),
                                                     seq_lens.data_ptr<int32_t>(), shape);
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("prepare_positions_and_seq_lens", &prepare_positions_and_seq_lens); }

}  // namespace specops::cpu
