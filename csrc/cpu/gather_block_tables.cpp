// gather_block_tables: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the kernel body with its value checks.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>

#include "cpu/checks.h"
#include "kernels/gather_block_tables.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_gather_block_tables(const at::Tensor& src_block_table, const at::Tensor& num_blocks,
                               const at::Tensor& idx_mapping, const at::Tensor& out, int64_t num_reqs_padded,
                               const std::optional<at::Tensor>& num_computed_tokens, int64_t sliding_window_reach,
                               int64_t block_size) {
  check_tensor(out, "out", {c10::kInt}, 2);
  check_rows_disjoint(out, "out");
  const Anchor anchor = anchor_of(out, "out");
  check_tensor(src_block_table, "src_block_table", {c10::kInt}, 2, anchor);
  check_tensor(num_blocks, "num_blocks", {c10::kInt}, 1, anchor);
  check_tensor(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
  const Int src_rows = size_of<Int>(src_block_table, 0);
  TORCH_CHECK_VALUE(numel_of<Int>(num_blocks) == src_rows, "num_blocks must have one entry per src_block_table row (",
                    src_rows, "), got ", numel_of<Int>(num_blocks));
  const Int num_reqs = numel_of<Int>(idx_mapping);
  TORCH_CHECK_VALUE(num_reqs_padded >= num_reqs && size_of<Int>(out, 0) >= num_reqs_padded,
                    "num_reqs_padded must be in [R = ", num_reqs, ", out.size(0) = ", size_of<Int>(out, 0), "], got ",
                    num_reqs_padded);
  check_int32_range(sliding_window_reach, "sliding_window_reach", 0);
  // block_size 0 stands for None: it is needed only to mask.
  check_int32_range(block_size, "block_size", 0);
  TORCH_CHECK_VALUE(sliding_window_reach == 0 || block_size >= 1,
                    "block_size must be given (>= 1) when sliding_window_reach > 0, got ", block_size);
  if (num_computed_tokens.has_value()) {
    check_tensor(*num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1, anchor);
    check_entries(*num_computed_tokens, "num_computed_tokens", src_rows, "src_block_table.size(0)");
  }
  check_outputs_alias_nothing({{&out, {"out"}}}, {{&src_block_table, {"src_block_table"}},
                                                  {&num_blocks, {"num_blocks"}},
                                                  {&idx_mapping, {"idx_mapping"}},
                                                  {num_computed_tokens.has_value() ? &*num_computed_tokens : nullptr,
                                                   {"num_computed_tokens"}}});
}

void gather_block_tables(const at::Tensor& src_block_table, const at::Tensor& num_blocks, const at::Tensor& idx_mapping,
                         const at::Tensor& out, int64_t num_reqs_padded,
                         const std::optional<at::Tensor>& num_computed_tokens, int64_t sliding_window_reach,
                         int64_t block_size) {
  check_gather_block_tables<int64_t>(src_block_table, num_blocks, idx_mapping, out, num_reqs_padded,
                                     num_computed_tokens, sliding_window_reach, block_size);
  const int64_t src_rows = src_block_table.size(0);
  const int64_t num_reqs = idx_mapping.numel();
  const int32_t* first_positions =
      num_computed_tokens.has_value() && sliding_window_reach > 0 ? num_computed_tokens->data_ptr<int32_t>() : nullptr;

  kernels::GatherBlockTablesShape shape;
  shape.num_reqs = num_reqs;
  shape.num_reqs_padded = num_reqs_padded;
  shape.src_rows = src_rows;
  shape.src_cols = src_block_table.size(1);
  shape.src_stride = src_block_table.stride(0);
  shape.out_cols = out.size(1);
  shape.out_stride = out.stride(0);
  shape.sliding_window_reach = sliding_window_reach;
  shape.block_size = std::max<int64_t>(block_size, 1);
  const int64_t most_blocks = std::min(shape.src_cols, shape.out_cols);
  const int32_t* counts = num_blocks.data_ptr<int32_t>();

  AT_DISPATCH_INDEX_TYPES(idx_mapping.scalar_type(), "gather_block_tables", [&] {
    const index_t* idx = idx_mapping.data_ptr<index_t>();
    for (int64_t r = 0; r < num_reqs; ++r) {
      const int64_t row = static_cast<int64_t>(idx[r]);
      TORCH_CHECK_VALUE(row < src_rows, "idx_mapping[", r, "] = ", row, " is past src_block_table, which has ",
                        src_rows, " rows");
      if (row < 0) continue;
      TORCH_CHECK_VALUE(counts[row] >= 0 && counts[row] <= most_blocks, "num_blocks[", row, "] = ", counts[row],
                        " (row of idx_mapping[", r, "]) must be in [0, ", most_blocks,
                        "], the columns of src_block_table and out");
      TORCH_CHECK_VALUE(first_positions == nullptr || first_positions[row] >= 0, "num_computed_tokens[", row, "] = ",
                        first_positions[row], " (row of idx_mapping[", r, "]) must be >= 0");
    }
    kernels::gather_block_tables<index_t>(src_block_table.data_ptr<int32_t>(), counts, idx, first_positions,
                                          out.data_ptr<int32_t>(), shape);
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/persistent_buffers.md
  m.def(
      "gather_block_tables(Tensor src_block_table, Tensor num_blocks, Tensor idx_mapping, Tensor(a!) out, "
      "int num_reqs_padded, Tensor? num_computed_tokens, int sliding_window_reach, int block_size) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("gather_block_tables", &gather_block_tables); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("gather_block_tables", &check_gather_block_tables<c10::SymInt>); }

}  // namespace specops::cpu
