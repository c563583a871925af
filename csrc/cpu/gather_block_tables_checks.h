#pragma once
// gather_block_tables_multi's checks, shared with prepare_spec_decode_inputs' gather, which names
// the same arguments its own way (block_tables, gathered_block_tables, num_gathered_rows): the
// metadata (check_gather_groups, on every path) and the values (check_gather_rows, on the host).
#include <c10/util/SmallVector.h>

#include <algorithm>

#include "cpu/checks.h"
#include "kernels/gather_block_tables_multi.h"

namespace specops::cpu {

struct GatherArgNames {
  const char* src_block_tables = "src_block_tables";
  const char* out = "out";
  const char* num_reqs_padded = "num_reqs_padded";
};

// The shared batch's and every group's metadata (every tensor on idx_mapping's device).
// first_positions: the request-indexed counts, or null (no masking).
template <typename Int>
void check_gather_groups(at::TensorList src_block_tables, at::TensorList num_blocks, const at::Tensor& idx_mapping,
                         at::TensorList out, int64_t num_reqs_padded, const at::Tensor* first_positions,
                         c10::IntArrayRef sliding_window_reach, c10::IntArrayRef block_sizes,
                         const GatherArgNames& names = {}) {
  const size_t num_groups = src_block_tables.size();
  for (const auto& [values, name] : {std::pair{num_blocks.size(), "num_blocks"}, std::pair{out.size(), names.out},
                                     std::pair{sliding_window_reach.size(), "sliding_window_reach"},
                                     std::pair{block_sizes.size(), "block_sizes"}}) {
    TORCH_CHECK_VALUE(values == num_groups, name, " must have one entry per source table (len(",
                      names.src_block_tables, ") = ", num_groups, "), got ", values);
  }
  check_tensor(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(idx_mapping, "idx_mapping");
  const Int num_reqs = numel_of<Int>(idx_mapping);
  TORCH_CHECK_VALUE(num_reqs_padded >= num_reqs, names.num_reqs_padded, " must be >= R = ", num_reqs, ", got ",
                    num_reqs_padded);
  if (first_positions != nullptr) check_tensor(*first_positions, "num_computed_tokens", {c10::kInt}, 1, anchor);
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t index = static_cast<int64_t>(g);
    const at::Tensor& target = out[g];
    check_tensor(target, ArgName{names.out, index}, {c10::kInt}, 2, anchor);
    check_rows_disjoint(target, ArgName{names.out, index});
    const at::Tensor& src = src_block_tables[g];
    check_tensor(src, ArgName{names.src_block_tables, index}, {c10::kInt}, 2, anchor);
    const at::Tensor& counts = num_blocks[g];
    check_tensor(counts, ArgName{"num_blocks", index}, {c10::kInt}, 1, anchor);
    const Int src_rows = size_of<Int>(src, 0);
    TORCH_CHECK_VALUE(numel_of<Int>(counts) == src_rows, "num_blocks[", g, "] must have one entry per ",
                      names.src_block_tables, "[", g, "] row (", src_rows, "), got ", numel_of<Int>(counts));
    TORCH_CHECK_VALUE(size_of<Int>(target, 0) >= num_reqs_padded, names.num_reqs_padded, " must be <= ", names.out,
                      "[", g, "].size(0) = ", size_of<Int>(target, 0), ", got ", num_reqs_padded);
    check_int32_range(sliding_window_reach[g], ArgName{"sliding_window_reach", index}, 0);
    // A block size of 0 stands for None: it is needed only to mask.
    check_int32_range(block_sizes[g], ArgName{"block_sizes", index}, 0);
    TORCH_CHECK_VALUE(sliding_window_reach[g] == 0 || block_sizes[g] >= 1, "block_sizes[", g,
                      "] must be given (>= 1) when sliding_window_reach[", g, "] > 0, got ", block_sizes[g]);
    if (first_positions != nullptr) {
      TORCH_CHECK_VALUE(numel_of<Int>(*first_positions) >= src_rows, "num_computed_tokens must have at least ",
                        names.src_block_tables, "[", g, "].size(0) = ", src_rows, " entries, got ",
                        numel_of<Int>(*first_positions));
    }
  }
}

// Every input is read while outputs are written, and each output is written by its own programs
// on a device: an output may share memory with nothing else.
inline void check_gather_outputs_alias_nothing(at::TensorList src_block_tables, at::TensorList num_blocks,
                                               const at::Tensor& idx_mapping, at::TensorList out,
                                               const at::Tensor* first_positions, const GatherArgNames& names = {}) {
  c10::SmallVector<NamedTensor, 4> outputs;
  c10::SmallVector<NamedTensor, 10> inputs;
  for (size_t g = 0; g < src_block_tables.size(); ++g) {
    const auto index = static_cast<int64_t>(g);
    outputs.push_back({&out[g], {names.out, index}});
    inputs.push_back({&src_block_tables[g], {names.src_block_tables, index}});
    inputs.push_back({&num_blocks[g], {"num_blocks", index}});
  }
  inputs.push_back({&idx_mapping, {"idx_mapping"}});
  inputs.push_back({first_positions, {"num_computed_tokens"}});
  check_outputs_alias_nothing(outputs, inputs);
}

// The groups' pointers and shapes (their arguments checked).
inline c10::SmallVector<kernels::GatherBlockTablesGroup, 4> gather_groups_of(
    at::TensorList src_block_tables, at::TensorList num_blocks, const at::Tensor& idx_mapping, at::TensorList out,
    int64_t num_reqs_padded, const at::Tensor* first_positions, c10::IntArrayRef sliding_window_reach,
    c10::IntArrayRef block_sizes) {
  // Up to 4 groups (one device launch's worth) without a heap allocation.
  c10::SmallVector<kernels::GatherBlockTablesGroup, 4> groups(src_block_tables.size());
  for (size_t g = 0; g < src_block_tables.size(); ++g) {
    const at::Tensor& src = src_block_tables[g];
    const at::Tensor& target = out[g];
    kernels::GatherBlockTablesGroup& group = groups[g];
    group.src = src.data_ptr<int32_t>();
    group.num_blocks = num_blocks[g].data_ptr<int32_t>();
    group.out = target.data_ptr<int32_t>();
    if (first_positions != nullptr && sliding_window_reach[g] > 0) {
      group.num_computed_tokens = first_positions->data_ptr<int32_t>();
    }
    kernels::GatherBlockTablesShape& shape = group.shape;
    shape.num_reqs = idx_mapping.numel();
    shape.num_reqs_padded = num_reqs_padded;
    shape.src_rows = src.size(0);
    shape.src_cols = src.size(1);
    shape.src_stride = src.stride(0);
    shape.out_cols = target.size(1);
    shape.out_stride = target.stride(0);
    shape.sliding_window_reach = sliding_window_reach[g];
    shape.block_size = std::max<int64_t>(block_sizes[g], 1);
  }
  return groups;
}

// What gather_block_tables rejects for each group's call alone (values), before any group is written.
template <typename IdxT>
void check_gather_rows(const IdxT* idx, int64_t num_reqs, c10::ArrayRef<kernels::GatherBlockTablesGroup> groups,
                       const GatherArgNames& names = {}) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const kernels::GatherBlockTablesGroup& group = groups[g];
    const int64_t most_blocks = std::min(group.shape.src_cols, group.shape.out_cols);
    for (int64_t r = 0; r < num_reqs; ++r) {
      const int64_t row = static_cast<int64_t>(idx[r]);
      TORCH_CHECK_VALUE(row < group.shape.src_rows, "idx_mapping[", r, "] = ", row, " is past ",
                        names.src_block_tables, "[", g, "], which has ", group.shape.src_rows, " rows");
      if (row < 0) continue;
      const int32_t count = group.num_blocks[row];
      TORCH_CHECK_VALUE(count >= 0 && count <= most_blocks, "num_blocks[", g, "][", row, "] = ", count,
                        " (row of idx_mapping[", r, "]) must be in [0, ", most_blocks, "], the columns of ",
                        names.src_block_tables, "[", g, "] and ", names.out, "[", g, "]");
      TORCH_CHECK_VALUE(group.num_computed_tokens == nullptr || group.num_computed_tokens[row] >= 0,
                        "num_computed_tokens[", row, "] = ", group.num_computed_tokens[row], " (row of idx_mapping[",
                        r, "]) must be >= 0");
    }
  }
}

}  // namespace specops::cpu
