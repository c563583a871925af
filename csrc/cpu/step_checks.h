#pragma once
// Checks shared by the step-bookkeeping ops (prepare_input_ids, count_sampled_and_rejected,
// post_update_after_sampling, prepare_next_token_ids, advance_draft_step,
// expand_parallel_draft_inputs): request rows read through idx_mapping, the padded end of an
// output, and the per-group slot targets of the two draft ops.
#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu/checks.h"
#include "cpu/slot_mapping_checks.h"
#include "kernels/advance_draft_step.h"

namespace specops::cpu {

using OptTensor = std::optional<at::Tensor>;

// An optional tensor as the alias checks take it (nullptr: not given).
inline const at::Tensor* ptr(const OptTensor& t) { return t.has_value() ? &*t : nullptr; }

// Every idx_mapping entry is a request row of the request-indexed tensors (num_rows of them) or
// negative (no request).
template <typename IdxT>
void check_request_rows(const IdxT* idx_mapping, int64_t num_reqs, int64_t num_rows, const char* rows_of) {
  for (int64_t r = 0; r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(static_cast<int64_t>(idx_mapping[r]) < num_rows, "idx_mapping[", r, "] = ",
                      static_cast<int64_t>(idx_mapping[r]), " is past the ", num_rows, " request rows of ", rows_of);
  }
}


// max_model_len as the draft ops take it: the int, or (-1 there) max_model_len_tensor, a 0-D
// int32 / int64 tensor on the anchor's device (vLLM 0.34 passes its limit so, for graph replays
// to read). Metadata only, as every backend checks it; its value is the host op's to read
// (max_model_len_value).
inline void check_max_model_len(int64_t max_model_len, const OptTensor& max_model_len_tensor, const Anchor& anchor) {
  if (!max_model_len_tensor.has_value()) {
    check_positive(max_model_len, "max_model_len");
    return;
  }
  TORCH_CHECK_VALUE(max_model_len_tensor->defined(), "max_model_len_tensor must be a tensor, got None");
  TORCH_CHECK_VALUE(max_model_len == -1, "max_model_len must be -1 when max_model_len_tensor gives it, got ",
                    max_model_len);
  check_tensor(*max_model_len_tensor, "max_model_len_tensor", {c10::kInt, c10::kLong}, 0, anchor);
}

// The CPU kernel's limit, after check_max_model_len: its tensor is host memory (on positions'
// device), so its value is read and checked here like the int's.
inline int64_t max_model_len_value(int64_t max_model_len, const OptTensor& max_model_len_tensor) {
  if (!max_model_len_tensor.has_value()) return max_model_len;
  const at::Tensor& t = *max_model_len_tensor;
  const int64_t value =
      t.scalar_type() == c10::kLong ? *t.data_ptr<int64_t>() : static_cast<int64_t>(*t.data_ptr<int32_t>());
  TORCH_CHECK_VALUE(value >= 1, "max_model_len_tensor must hold a value >= 1, got ", value);
  return value;
}

template <typename Run>
void with_index_type(const at::Tensor& t, Run&& run) {
  if (t.scalar_type() == c10::kLong) {
    run(static_cast<const int64_t*>(t.data_ptr<int64_t>()));
  } else {
    run(static_cast<const int32_t*>(t.data_ptr<int32_t>()));
  }
}

// Every group's slot target of a draft op (advance_draft_step, expand_parallel_draft_inputs): the
// group's settings (block size, blocks per KV block, CP-sharded, slot mapping on), the slot-mapping
// checks of prepare_spec_decode_inputs for num_tokens tokens (W = 1 for a group that is not
// CP-sharded), and num_blocks[g] when given. The slots are PAD in [num_tokens, end): end is
// num_tokens_padded, or (-1) the buffer's end.
template <typename Int>
void check_draft_step_groups(at::TensorList block_tables, at::TensorList slot_mappings, at::TensorList num_blocks,
                             const GroupSettings& settings, const Int& num_tokens, int64_t num_tokens_padded,
                             const Anchor* anchor) {
  const size_t num_groups = block_tables.size();
  settings.check(num_groups);
  TORCH_CHECK_VALUE(slot_mappings.size() == num_groups,
                    "slot_mappings must have one tensor per block table (len(block_tables) = ", num_groups, "), got ",
                    slot_mappings.size());
  TORCH_CHECK_VALUE(num_blocks.empty() || num_blocks.size() == num_groups,
                    "num_blocks must be empty or hold one tensor per block table (len(block_tables) = ", num_groups,
                    "), got ", num_blocks.size());
  for (size_t g = 0; g < num_groups; ++g) {
    const SlotMappingArgNames names = SlotMappingArgNames::of_group(static_cast<int64_t>(g));
    const GroupSettings::Cp cp = settings.cp(g);
    const at::Tensor& out = slot_mappings[g];
    Int slot_end = Int(num_tokens_padded);
    if (num_tokens_padded < 0) slot_end = out.defined() && numel_of<Int>(out) > num_tokens ? numel_of<Int>(out) : num_tokens;
    check_slot_mapping_args<Int>(block_tables[g], settings.block_sizes[g], out, settings.blocks_per_kv_block[g],
                                 cp.world_size, cp.rank, cp.interleave, num_tokens, slot_end, anchor, names);
    if (!num_blocks.empty()) {
      check_num_blocks<Int>(num_blocks[g], ArgName{"num_blocks", static_cast<int64_t>(g)}, block_tables[g],
                            names.block_table, anchor);
    }
  }
}

// The groups of a draft op, their arguments checked.
inline std::vector<kernels::DraftStepGroup> draft_step_groups(at::TensorList block_tables, at::TensorList slot_mappings,
                                                              at::TensorList num_blocks, const GroupSettings& settings,
                                                              int64_t num_reqs, int64_t num_tokens,
                                                              int64_t num_tokens_padded) {
  const size_t num_groups = block_tables.size();
  std::vector<kernels::DraftStepGroup> groups;
  groups.reserve(num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    const GroupSettings::Cp cp = settings.cp(g);
    const at::Tensor& out = slot_mappings[g];
    const int64_t slot_end = num_tokens_padded >= 0 ? num_tokens_padded : std::max(out.numel(), num_tokens);
    kernels::SlotMappingShape shape =
        slot_mapping_shape(block_tables[g], settings.block_sizes[g], settings.blocks_per_kv_block[g], cp.world_size,
                           cp.rank, cp.interleave, num_reqs, num_tokens, slot_end);
    if (!num_blocks.empty()) shape.num_blocks = num_blocks[g].data_ptr<int32_t>();
    const bool wide = out.scalar_type() == c10::kLong;
    groups.emplace_back(block_tables[g].data_ptr<int32_t>(), wide ? out.data_ptr<int64_t>() : nullptr,
                        wide ? nullptr : out.data_ptr<int32_t>(), wide, shape, settings.enabled(g), slot_end);
  }
  return groups;
}

// A draft op's request r (request row `row`, >= 0) in group g: its row inside the group's table;
// returns the columns the row may use (its num_blocks, or the table's width).
inline int64_t checked_group_row(const kernels::DraftStepGroup& group, size_t g, int64_t r, int64_t row) {
  TORCH_CHECK_VALUE(row < group.shape.block_table_rows, "idx_mapping[", r, "] = ", row, " is past block_tables[", g,
                    "], which has ", group.shape.block_table_rows, " rows");
  return kernels::usable_columns(group.shape, row);
}

// A draft position of request r in group g: inside the row's `columns` (naming the request, the
// group, the position and the count it passes) and, in an int32 slot mapping, a slot below 2^31
// (naming the op's slot output, `slots`[g]: slot_mappings of the single-step ops, out_slots of
// advance_draft_steps).
inline void check_draft_position(const kernels::DraftStepGroup& group, size_t g, int64_t r, int64_t row,
                                 int64_t position, int64_t columns, const char* slots = "slot_mappings") {
  bool past = position > INT32_MAX;
  int64_t column = -1;
  if (!past) {
    const kernels::TokenPlacement p =
        kernels::place_token<kernels::CpLayout::kInterleaved>(static_cast<uint32_t>(position), group.divisors);
    past = p.local && p.column >= columns;
    column = p.column;
  }
  if (past) {
    std::ostringstream count;
    if (group.shape.num_blocks != nullptr && column >= 0 && column < group.shape.block_table_cols) {
      count << "num_blocks[" << g << "][" << row << "] = " << group.shape.num_blocks[row] << " allocated blocks";
    } else {
      count << "the " << group.shape.block_table_cols << " columns of block_tables[" << g << "]";
    }
    TORCH_CHECK_VALUE(false, "draft position ", position, " of request ", r, " (row ", row, ") in group ", g,
                      " needs block column ", column < 0 ? std::string("past 2^31") : std::to_string(column),
                      ", past ", count.str());
  }
  const int64_t slot = kernels::draft_slot(group, row, position, true);
  TORCH_CHECK_VALUE(group.wide || slot <= INT32_MAX, slots, "[", g, "] is int32, but request ", r, " has slot ", slot,
                    ", past 2^31 - 1; pass an int64 slot mapping");
}

// The per-group tensors of a draft op in its alias check: each slot mapping an output, each
// block table and num_blocks tensor an input.
inline void add_group_tensors(std::vector<NamedTensor>& outputs, std::vector<NamedTensor>& inputs,
                              at::TensorList slot_mappings, at::TensorList block_tables, at::TensorList num_blocks) {
  for (size_t g = 0; g < block_tables.size(); ++g) {
    outputs.push_back({&slot_mappings[g], {"slot_mappings", static_cast<int64_t>(g)}});
    inputs.push_back({&block_tables[g], {"block_tables", static_cast<int64_t>(g)}});
    if (!num_blocks.empty()) inputs.push_back({&num_blocks[g], {"num_blocks", static_cast<int64_t>(g)}});
  }
}

}  // namespace specops::cpu
