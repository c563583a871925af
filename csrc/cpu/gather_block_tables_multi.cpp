// CPU op for gather_block_tables_multi: validates the shared batch once and every group, then
// gathers every group's rows. Nothing is written until every group has passed its checks.
#include <ATen/Dispatch.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <optional>

#include "cpu/gather_block_tables_checks.h"

namespace specops::cpu {
namespace {

void gather_block_tables_multi(at::TensorList src_block_tables, at::TensorList num_blocks,
                               const at::Tensor& idx_mapping, at::TensorList out, int64_t num_reqs_padded,
                               const std::optional<at::Tensor>& num_computed_tokens,
                               c10::IntArrayRef sliding_window_reach, c10::IntArrayRef block_sizes) {
  const size_t num_groups = src_block_tables.size();
  const at::Tensor* first_positions = num_computed_tokens.has_value() ? &*num_computed_tokens : nullptr;
  c10::SmallVector<kernels::GatherBlockTablesGroup, 4> groups =
      check_gather_groups(src_block_tables, num_blocks, idx_mapping, out, num_reqs_padded, first_positions,
                          sliding_window_reach, block_sizes);
  const int64_t num_reqs = idx_mapping.numel();
  // Every input is read while outputs are written, and each output is written by its own
  // programs on a device: an output may share memory with nothing else.
  c10::SmallVector<NamedTensor, 4> outputs;
  c10::SmallVector<NamedTensor, 10> inputs;
  for (size_t g = 0; g < num_groups; ++g) {
    const auto index = static_cast<int64_t>(g);
    outputs.push_back({&out[g], {"out", index}});
    inputs.push_back({&src_block_tables[g], {"src_block_tables", index}});
    inputs.push_back({&num_blocks[g], {"num_blocks", index}});
  }
  inputs.push_back({&idx_mapping, {"idx_mapping"}});
  inputs.push_back({first_positions, {"num_computed_tokens"}});
  check_outputs_alias_nothing(outputs, inputs);

  AT_DISPATCH_INDEX_TYPES(idx_mapping.scalar_type(), "gather_block_tables_multi", [&] {
    const index_t* idx = idx_mapping.data_ptr<index_t>();
    check_gather_rows(idx, num_reqs, groups);
    kernels::gather_block_tables_multi<index_t>(idx, groups.data(), static_cast<int64_t>(num_groups));
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("gather_block_tables_multi", &gather_block_tables_multi); }

}  // namespace specops::cpu
