// apply_staged_writes: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, every write's values, the kernel body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/checks.h"
#include "kernels/apply_staged_writes.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_apply_staged_writes(const at::Tensor& table, const at::Tensor& rows, const at::Tensor& starts,
                               const at::Tensor& cu_lens, const at::Tensor& values) {
  check_tensor(table, "table", {c10::kInt}, 2);
  check_rows_disjoint(table, "table");
  const Anchor anchor = anchor_of(table, "table");
  check_tensor(rows, "rows", {c10::kInt, c10::kLong}, 1, anchor);
  check_tensor(starts, "starts", {c10::kInt}, 1, anchor);
  check_tensor(cu_lens, "cu_lens", {c10::kInt}, 1, anchor);
  check_tensor(values, "values", {c10::kInt}, 1, anchor);
  const Int num_writes = numel_of<Int>(rows);
  TORCH_CHECK_VALUE(numel_of<Int>(starts) == num_writes, "starts must have one entry per write (K = rows.numel() = ",
                    num_writes, "), got ", numel_of<Int>(starts));
  TORCH_CHECK_VALUE(numel_of<Int>(cu_lens) == num_writes + 1, "cu_lens must have K + 1 = rows.numel() + 1 = ",
                    num_writes + 1, " entries, got ", numel_of<Int>(cu_lens));
  check_outputs_alias_nothing({{&table, {"table"}}}, {{&rows, {"rows"}},
                                                      {&starts, {"starts"}},
                                                      {&cu_lens, {"cu_lens"}},
                                                      {&values, {"values"}}});
}

void apply_staged_writes(const at::Tensor& table, const at::Tensor& rows, const at::Tensor& starts,
                         const at::Tensor& cu_lens, const at::Tensor& values) {
  check_apply_staged_writes<int64_t>(table, rows, starts, cu_lens, values);
  const int64_t num_writes = rows.numel();
  kernels::StagedWritesShape shape;
  shape.num_writes = num_writes;
  shape.num_values = values.numel();
  shape.table_rows = table.size(0);
  shape.table_cols = table.size(1);
  shape.table_stride = table.stride(0);
  const int32_t* start = starts.data_ptr<int32_t>();
  const int32_t* cu = cu_lens.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(cu[0] == 0, "cu_lens[0] must be 0, got ", cu[0]);
  for (int64_t k = 0; k < num_writes; ++k) {
    TORCH_CHECK_VALUE(cu[k + 1] >= cu[k], "cu_lens must be non-decreasing, but cu_lens[", k + 1, "] = ", cu[k + 1],
                      " < cu_lens[", k, "] = ", cu[k]);
  }
  TORCH_CHECK_VALUE(cu[num_writes] <= shape.num_values, "cu_lens[K] = ", cu[num_writes],
                    " must be <= values.numel() = ", shape.num_values);

  AT_DISPATCH_INDEX_TYPES(rows.scalar_type(), "apply_staged_writes", [&] {
    const index_t* row = rows.data_ptr<index_t>();
    for (int64_t k = 0; k < num_writes; ++k) {
      TORCH_CHECK_VALUE(row[k] >= 0 && row[k] < shape.table_rows, "rows[", k, "] = ", static_cast<int64_t>(row[k]),
                        " must be in [0, ", shape.table_rows, "), the rows of table");
      const int64_t length = cu[k + 1] - cu[k];
      TORCH_CHECK_VALUE(start[k] >= 0 && start[k] + length <= shape.table_cols, "starts[", k, "] = ", start[k],
                        " with ", length, " values must lie in [0, ", shape.table_cols, "], the columns of table");
    }
    kernels::apply_staged_writes<index_t>(table.data_ptr<int32_t>(), row, start, cu, values.data_ptr<int32_t>(),
                                          shape);
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def("apply_staged_writes(Tensor(a!) table, Tensor rows, Tensor starts, Tensor cu_lens, Tensor values) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("apply_staged_writes", &apply_staged_writes); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("apply_staged_writes", &check_apply_staged_writes<c10::SymInt>); }

}  // namespace specops::cpu
