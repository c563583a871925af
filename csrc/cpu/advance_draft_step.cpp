// CPU op for advance_draft_step: validates everything (the draft positions against every
// group's table included), then writes positions, seq_lens, the query layout and every slot mapping.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <sstream>
#include <vector>

#include "cpu/slot_mapping_checks.h"
#include "cpu/step_checks.h"
#include "kernels/advance_draft_step.h"

namespace specops::cpu {
namespace {

// The layout of `sizes`: see python/specops/ops/advance_draft_step.py (pack_draft_step_sizes).
constexpr size_t kNumScalars = 7;
constexpr size_t kPerGroup = 4;

bool same_span(const at::Tensor& a, const at::Tensor& b) {
  return a.data_ptr() == b.data_ptr() && a.numel() == b.numel() && a.scalar_type() == b.scalar_type();
}

template <typename PosT, typename TokT, typename IdxT>
void check_values(const at::Tensor& positions, const TokT* token_indices, const int32_t* seq_lens,
                  const int32_t* num_rejected, const IdxT* idx, const std::vector<kernels::DraftStepGroup>& groups,
                  const kernels::DraftStepShape& s) {
  const PosT* pos = positions.data_ptr<PosT>();
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    if (token_indices != nullptr) {
      const int64_t index = static_cast<int64_t>(token_indices[r]);
      TORCH_CHECK_VALUE(index >= 0 && index < s.num_positions, "token_indices[", r, "] = ", index,
                        " is outside positions, which has ", s.num_positions, " entries");
      TORCH_CHECK_VALUE(pos[index] >= 0, "positions[", index, "] = ", static_cast<int64_t>(pos[index]),
                        " (token_indices[", r, "]) must be >= 0");
    } else {
      TORCH_CHECK_VALUE(pos[r] >= 0, "positions[", r, "] = ", static_cast<int64_t>(pos[r]), " must be >= 0");
    }
    if (num_rejected != nullptr) {
      TORCH_CHECK_VALUE(static_cast<int64_t>(seq_lens[r]) - num_rejected[r] >= 0, "num_rejected_tokens[", r,
                        "] = ", num_rejected[r], " is more than seq_lens[", r, "] = ", seq_lens[r]);
    }
    const kernels::DraftPosition d = kernels::draft_position(pos, token_indices, seq_lens, num_rejected, r, s);
    const int64_t row = kernels::draft_row(idx, r);
    for (size_t g = 0; g < groups.size(); ++g) {
      const kernels::DraftStepGroup& group = groups[g];
      if (!d.mapped || !group.enabled || row < 0) continue;
      check_draft_position(group, g, r, row, d.position, checked_group_row(group, g, r, row));
    }
  }
}

void advance_draft_step(const at::Tensor& positions, const at::Tensor& seq_lens, at::TensorList block_tables,
                        const OptTensor& token_indices, const OptTensor& num_rejected_tokens,
                        const OptTensor& idx_mapping, const at::Tensor& out_positions, at::TensorList slot_mappings,
                        const OptTensor& query_start_loc, at::TensorList num_blocks, c10::IntArrayRef sizes) {
  const size_t num_groups = block_tables.size();
  TORCH_CHECK_VALUE(sizes.size() == kNumScalars + kPerGroup * num_groups, "sizes must have ", kNumScalars, " + ",
                    kPerGroup, " * len(block_tables) = ", kNumScalars + kPerGroup * num_groups, " entries, got ",
                    sizes.size());
  const int64_t max_model_len = sizes[0], rule = sizes[1], num_tokens_padded = sizes[2], num_reqs_padded = sizes[3];
  const int64_t cp_world_size = sizes[4], cp_rank = sizes[5], cp_interleave = sizes[6];
  check_positive(max_model_len, "max_model_len");
  TORCH_CHECK_VALUE(rule == 0 || rule == 1, "past_max_model_len must be \"reset\" (0) or \"clamp\" (1), got ", rule);
  check_cp_rank(cp_world_size, cp_rank, "cp_world_size");
  check_positive(cp_interleave, "cp_interleave");

  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1);
  if (token_indices.has_value()) check_tensor(*token_indices, "token_indices", {c10::kInt, c10::kLong}, 1);
  const int64_t num_reqs = token_indices.has_value() ? token_indices->numel() : positions.numel();
  const char* what = token_indices.has_value() ? "R = token_indices.numel()" : "R = positions.numel()";
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1);
  check_entries(seq_lens, "seq_lens", num_reqs, what);
  const int64_t seq_lens_end = padded_end(seq_lens, "seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  if (num_rejected_tokens.has_value()) {
    check_tensor(*num_rejected_tokens, "num_rejected_tokens", {c10::kInt}, 1);
    TORCH_CHECK_VALUE(num_rejected_tokens->numel() == num_reqs, "num_rejected_tokens must have ", what, " = ",
                      num_reqs, " entries, got ", num_rejected_tokens->numel());
  }
  if (idx_mapping.has_value()) {
    check_tensor(*idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1);
    TORCH_CHECK_VALUE(idx_mapping->numel() == num_reqs, "idx_mapping must have ", what, " = ", num_reqs,
                      " entries, got ", idx_mapping->numel());
  }
  check_tensor(out_positions, "out_positions", {c10::kLong, c10::kInt}, 1);
  check_entries(out_positions, "out_positions", num_reqs, what);
  int64_t positions_end = out_positions.numel();
  if (out_positions.numel() > num_reqs && num_tokens_padded >= 0) {
    TORCH_CHECK_VALUE(num_tokens_padded >= num_reqs && num_tokens_padded <= out_positions.numel(),
                      "num_tokens_padded must be in [R = ", num_reqs, ", out_positions.numel() = ",
                      out_positions.numel(), "], got ", num_tokens_padded);
    positions_end = num_tokens_padded;
  }
  int64_t query_start_loc_end = 0;
  if (query_start_loc.has_value()) {
    check_tensor(*query_start_loc, "query_start_loc", {c10::kInt}, 1);
    query_start_loc_end = num_reqs_padded >= 0 ? num_reqs_padded + 1 : query_start_loc->numel();
    TORCH_CHECK_VALUE(query_start_loc->numel() >= query_start_loc_end && query_start_loc_end >= num_reqs + 1,
                      "query_start_loc must have at least num_reqs_padded + 1 = ", std::max(query_start_loc_end, num_reqs + 1),
                      " entries, got ", query_start_loc->numel());
  }
  std::vector<kernels::DraftStepGroup> groups =
      draft_step_groups(block_tables, slot_mappings, num_blocks, sizes, kNumScalars, cp_world_size, cp_rank,
                        cp_interleave, num_reqs, num_reqs, num_tokens_padded);
  // out_positions may be positions itself (in place, element by element), never a part of it,
  // nor share anything with positions when token_indices gathers (another request's position).
  const bool in_place = !token_indices.has_value() && same_span(out_positions, positions);
  if (!in_place) check_no_overlap(out_positions, "out_positions", positions, "positions");
  std::vector<NamedTensor> outputs = {{&seq_lens, {"seq_lens"}}, {&out_positions, {"out_positions"}},
                                      {ptr(query_start_loc), {"query_start_loc"}}};
  std::vector<NamedTensor> inputs = {{ptr(token_indices), {"token_indices"}},
                                     {ptr(num_rejected_tokens), {"num_rejected_tokens"}},
                                     {ptr(idx_mapping), {"idx_mapping"}}};
  add_group_tensors(outputs, inputs, slot_mappings, block_tables, num_blocks);
  check_outputs_alias_nothing(outputs, inputs);
  for (const NamedTensor& out : outputs) {
    if (out.tensor != nullptr && out.tensor != &out_positions) check_no_overlap(*out.tensor, out.name, positions, "positions");
  }

  kernels::DraftStepShape s;
  s.num_reqs = num_reqs;
  s.num_positions = positions.numel();
  s.max_model_len = max_model_len;
  s.clamp = rule == 1;
  s.positions_end = positions_end;
  s.seq_lens_end = seq_lens_end;
  s.query_start_loc_end = query_start_loc_end;
  const int32_t* rejected = num_rejected_tokens.has_value() ? num_rejected_tokens->data_ptr<int32_t>() : nullptr;
  int32_t* lens = seq_lens.data_ptr<int32_t>();
  int32_t* qsl = query_start_loc.has_value() ? query_start_loc->data_ptr<int32_t>() : nullptr;
  const at::Tensor& indices = token_indices.has_value() ? *token_indices : positions;
  const bool has_indices = token_indices.has_value();
  with_idx_mapping(idx_mapping, [&](auto* idx) {
    using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    AT_DISPATCH_INDEX_TYPES(has_indices ? indices.scalar_type() : c10::kInt, "advance_draft_step", [&] {
      using TokT = index_t;
      const TokT* tokens = has_indices ? indices.data_ptr<TokT>() : nullptr;
      AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "advance_draft_step", [&] {
        using PosT = index_t;
        check_values<PosT, TokT, IdxT>(positions, tokens, lens, rejected, idx, groups, s);
        AT_DISPATCH_INDEX_TYPES(out_positions.scalar_type(), "advance_draft_step", [&] {
          kernels::advance_draft_step<PosT, index_t, TokT, IdxT>(positions.data_ptr<PosT>(), lens, tokens, rejected,
                                                                  idx, out_positions.data_ptr<index_t>(), qsl,
                                                                  groups.data(), static_cast<int64_t>(num_groups), s);
        });
      });
    });
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("advance_draft_step", &advance_draft_step); }

}  // namespace specops::cpu
