// tree_slot_mappings: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the values (every tree position against every group's table), then
// every group's slots (kernels/tree_slot_mappings.h).
#include <torch/library.h>

#include <vector>

#include "cpu/slot_mapping_checks.h"
#include "cpu/step_checks.h"
#include "cpu/tree_kv_checks.h"
#include "kernels/tree_slot_mappings.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_tree_slot_mappings(const at::Tensor& verified_seq_len, at::TensorList block_tables,
                              const OptTensor& idx_mapping, at::TensorList slot_mappings, at::TensorList num_blocks,
                              int64_t draft_token_num, int64_t num_tokens_padded, int64_t cp_world_size,
                              int64_t cp_rank, int64_t cp_interleave, c10::IntArrayRef block_sizes,
                              c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
                              const c10::List<bool>& slot_mapping_enabled) {
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  check_draft_token_num(draft_token_num);
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);
  check_tensor(verified_seq_len, "verified_seq_len", {c10::kLong, c10::kInt}, 1);
  const Anchor anchor = anchor_of(verified_seq_len, "verified_seq_len");
  const Int num_reqs = numel_of<Int>(verified_seq_len);
  check_tree_idx_mapping<Int>(idx_mapping, num_reqs, "R = verified_seq_len.numel()", anchor);
  // The flat tree layout: R * draft_token_num tokens, PAD in [that, num_tokens_padded).
  const Int num_tokens = num_reqs * draft_token_num;
  check_draft_step_groups<Int>(block_tables, slot_mappings, num_blocks, settings, num_tokens, num_tokens_padded,
                               &anchor);
  std::vector<NamedTensor> outputs;
  std::vector<NamedTensor> inputs = {{&verified_seq_len, {"verified_seq_len"}}, {ptr(idx_mapping), {"idx_mapping"}}};
  add_group_tensors(outputs, inputs, slot_mappings, block_tables, num_blocks);
  check_outputs_alias_nothing(outputs, inputs);
}

void tree_slot_mappings(const at::Tensor& verified_seq_len, at::TensorList block_tables, const OptTensor& idx_mapping,
                        at::TensorList slot_mappings, at::TensorList num_blocks, int64_t draft_token_num,
                        int64_t num_tokens_padded, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
                        c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block,
                        const c10::List<bool>& cp_sharded, const c10::List<bool>& slot_mapping_enabled) {
  check_tree_slot_mappings<int64_t>(verified_seq_len, block_tables, idx_mapping, slot_mappings, num_blocks,
                                    draft_token_num, num_tokens_padded, cp_world_size, cp_rank, cp_interleave,
                                    block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled);
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t num_reqs = verified_seq_len.numel();
  const int64_t num_tokens = num_reqs * draft_token_num;
  const std::vector<kernels::DraftStepGroup> groups =
      draft_step_groups(block_tables, slot_mappings, num_blocks, settings, num_reqs, num_tokens, num_tokens_padded);
  const kernels::IntIn lens{verified_seq_len.data_ptr(), verified_seq_len.scalar_type() == c10::kLong};
  with_idx_mapping(idx_mapping, [&](auto* idx) {
    for (int64_t r = 0; r < num_reqs; ++r) {
      const int64_t base = lens[r];
      check_verified_seq_len(base, r);
      const int64_t row = kernels::draft_row(idx, r);
      for (size_t g = 0; g < groups.size(); ++g) {
        // A covered tree (kernels/tree_slot_mappings.h) is inside its row; an int64 output holds
        // any slot. Else every position is checked (the row, the columns, an int32 output's range).
        if (groups[g].wide && kernels::tree_is_covered(groups[g], row, base, draft_token_num)) continue;
        for (int64_t i = 0; i < draft_token_num; ++i) {
          check_tree_position(groups[g], g, r, row, base, i, "slot_mappings");
        }
      }
    }
    kernels::tree_slot_mappings(lens, idx, groups.data(), static_cast<int64_t>(groups.size()), num_reqs,
                                draft_token_num);
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/tree_kv.md. Token t = r * draft_token_num + i of the flat tree layout is at position
  // verified_seq_len[r] + i; num_tokens_padded -1: every slot mapping padded to its own end.
  m.def(
      "tree_slot_mappings(Tensor verified_seq_len, Tensor[] block_tables, Tensor? idx_mapping, "
      "Tensor(a!)[] slot_mappings, Tensor[] num_blocks, int draft_token_num, int num_tokens_padded, "
      "int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, int[] blocks_per_kv_block, "
      "bool[] cp_sharded, bool[] slot_mapping_enabled) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("tree_slot_mappings", &tree_slot_mappings); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("tree_slot_mappings", &check_tree_slot_mappings<c10::SymInt>); }

}  // namespace specops::cpu
