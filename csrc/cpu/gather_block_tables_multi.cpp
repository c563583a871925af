// gather_block_tables_multi: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks of the shared batch once and of every group, the rows' values, then
// every group's rows. Nothing is written until every group has passed its checks.
#include <ATen/Dispatch.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <optional>

#include "cpu/gather_block_tables_checks.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_gather_block_tables_multi(at::TensorList src_block_tables, at::TensorList num_blocks,
                                     const at::Tensor& idx_mapping, at::TensorList out, int64_t num_reqs_padded,
                                     const std::optional<at::Tensor>& num_computed_tokens,
                                     c10::IntArrayRef sliding_window_reach, c10::IntArrayRef block_sizes) {
  const at::Tensor* first_positions = num_computed_tokens.has_value() ? &*num_computed_tokens : nullptr;
  check_gather_groups<Int>(src_block_tables, num_blocks, idx_mapping, out, num_reqs_padded, first_positions,
                           sliding_window_reach, block_sizes);
  check_gather_outputs_alias_nothing(src_block_tables, num_blocks, idx_mapping, out, first_positions);
}

void gather_block_tables_multi(at::TensorList src_block_tables, at::TensorList num_blocks,
                               const at::Tensor& idx_mapping, at::TensorList out, int64_t num_reqs_padded,
                               const std::optional<at::Tensor>& num_computed_tokens,
                               c10::IntArrayRef sliding_window_reach, c10::IntArrayRef block_sizes) {
  check_gather_block_tables_multi<int64_t>(src_block_tables, num_blocks, idx_mapping, out, num_reqs_padded,
                                           num_computed_tokens, sliding_window_reach, block_sizes);
  const at::Tensor* first_positions = num_computed_tokens.has_value() ? &*num_computed_tokens : nullptr;
  const c10::SmallVector<kernels::GatherBlockTablesGroup, 4> groups =
      gather_groups_of(src_block_tables, num_blocks, idx_mapping, out, num_reqs_padded, first_positions,
                       sliding_window_reach, block_sizes);
  const int64_t num_reqs = idx_mapping.numel();
  const size_t num_groups = src_block_tables.size();
  AT_DISPATCH_INDEX_TYPES(idx_mapping.scalar_type(), "gather_block_tables_multi", [&] {
    const index_t* idx = idx_mapping.data_ptr<index_t>();
    check_gather_rows(idx, num_reqs, groups);
    kernels::gather_block_tables_multi<index_t>(idx, groups.data(), static_cast<int64_t>(num_groups));
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // gather_block_tables of every KV-cache group in one call (one launch on a device): group g
  // gathers src_block_tables[g] (num_blocks[g], sliding_window_reach[g], block_sizes[g]; a block
  // size of 0 stands for None) into out[g]; the groups share idx_mapping, num_reqs_padded and
  // num_computed_tokens.
  m.def(
      "gather_block_tables_multi(Tensor[] src_block_tables, Tensor[] num_blocks, Tensor idx_mapping, "
      "Tensor(a!)[] out, int num_reqs_padded, Tensor? num_computed_tokens, int[] sliding_window_reach, "
      "int[] block_sizes) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("gather_block_tables_multi", &gather_block_tables_multi); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("gather_block_tables_multi", &check_gather_block_tables_multi<c10::SymInt>);
}

}  // namespace specops::cpu
