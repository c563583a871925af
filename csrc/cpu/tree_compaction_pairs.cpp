// tree_compaction_pairs: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks, the values (the accepted path of every request, its positions
// against every group's table), then the pairs and the next step's values
// (kernels/tree_compaction_pairs.h).
#include <torch/library.h>

#include <vector>

#include "cpu/slot_mapping_checks.h"
#include "cpu/step_checks.h"
#include "cpu/tree_kv_checks.h"
#include "kernels/tree_compaction_pairs.h"

namespace specops::cpu {
namespace {

// One pair output: int32 or int64 [num_groups, bs * num_spec_steps], rows apart.
template <typename Int>
void check_pair_output(const at::Tensor& out, const char* name, size_t num_groups, const Int& entries,
                       const Anchor& anchor) {
  check_tensor(out, name, {c10::kLong, c10::kInt}, 2, anchor);
  TORCH_CHECK_VALUE(size_of<Int>(out, 0) == static_cast<int64_t>(num_groups) && size_of<Int>(out, 1) == entries,
                    name, " must have shape [len(block_tables), accept_index.numel()] = [", num_groups, ", ", entries,
                    "], got ", out.sym_sizes());
  check_rows_disjoint(out, name);
}

// An optional per-request output: int32 or int64 [bs].
template <typename Int>
void check_request_output(const OptTensor& out, const char* name, const Int& num_reqs, const Anchor& anchor) {
  if (!out.has_value()) return;
  check_tensor(*out, name, {c10::kLong, c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(*out) == num_reqs, name, " must have bs = accept_index.size(0) = ", num_reqs,
                    " entries, got ", numel_of<Int>(*out));
}

template <typename Int>
void check_tree_compaction_pairs(const at::Tensor& accept_index, const at::Tensor& accept_token_num,
                                 const at::Tensor& verified_seq_len, at::TensorList block_tables,
                                 const OptTensor& idx_mapping, const at::Tensor& src_slots,
                                 const at::Tensor& dst_slots, at::TensorList num_blocks, int64_t draft_token_num,
                                 int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
                                 c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block,
                                 const c10::List<bool>& cp_sharded, const c10::List<bool>& slot_mapping_enabled,
                                 const OptTensor& next_seq_lens, const OptTensor& num_accepted_tokens) {
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  check_draft_token_num(draft_token_num);
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);
  check_tensor(accept_index, "accept_index", {c10::kInt, c10::kLong}, 2);
  const Anchor anchor = anchor_of(accept_index, "accept_index");
  const Int num_reqs = size_of<Int>(accept_index, 0);
  TORCH_CHECK_VALUE(size_of<Int>(accept_index, 1) >= 1,
                    "accept_index must have at least 1 column (the root, num_spec_steps >= 1), got shape ",
                    accept_index.sym_sizes());
  const char* what = "bs = accept_index.size(0)";
  check_tensor(accept_token_num, "accept_token_num", {c10::kInt, c10::kLong}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(accept_token_num) == num_reqs, "accept_token_num must have ", what, " = ", num_reqs,
                    " entries, got ", numel_of<Int>(accept_token_num));
  check_tensor(verified_seq_len, "verified_seq_len", {c10::kLong, c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(verified_seq_len) == num_reqs, "verified_seq_len must have ", what, " = ", num_reqs,
                    " entries, got ", numel_of<Int>(verified_seq_len));
  check_tree_idx_mapping<Int>(idx_mapping, num_reqs, what, anchor);
  const size_t num_groups = block_tables.size();
  settings.check(num_groups);
  TORCH_CHECK_VALUE(num_blocks.empty() || num_blocks.size() == num_groups,
                    "num_blocks must be empty or hold one tensor per block table (len(block_tables) = ", num_groups,
                    "), got ", num_blocks.size());
  for (size_t g = 0; g < num_groups; ++g) {
    const SlotMappingArgNames names = SlotMappingArgNames::of_group(static_cast<int64_t>(g));
    const GroupSettings::Cp cp = settings.cp(g);
    const Int none = Int(0);  // no slot mapping of its own: the pairs are checked below
    check_slot_mapping_layout<Int>(block_tables[g], settings.block_sizes[g], settings.blocks_per_kv_block[g],
                                   cp.world_size, cp.rank, cp.interleave, none, none, none, &anchor, names);
    if (!num_blocks.empty()) {
      check_num_blocks<Int>(num_blocks[g], ArgName{"num_blocks", static_cast<int64_t>(g)}, block_tables[g],
                            names.block_table, &anchor);
    }
  }
  const Int entries = numel_of<Int>(accept_index);
  check_pair_output<Int>(src_slots, "src_slots", num_groups, entries, anchor);
  check_pair_output<Int>(dst_slots, "dst_slots", num_groups, entries, anchor);
  check_request_output<Int>(next_seq_lens, "next_seq_lens", num_reqs, anchor);
  check_request_output<Int>(num_accepted_tokens, "num_accepted_tokens", num_reqs, anchor);
  std::vector<NamedTensor> outputs = {{&src_slots, {"src_slots"}},
                                      {&dst_slots, {"dst_slots"}},
                                      {ptr(next_seq_lens), {"next_seq_lens"}},
                                      {ptr(num_accepted_tokens), {"num_accepted_tokens"}}};
  std::vector<NamedTensor> inputs = {{&accept_index, {"accept_index"}},
                                     {&accept_token_num, {"accept_token_num"}},
                                     {&verified_seq_len, {"verified_seq_len"}},
                                     {ptr(idx_mapping), {"idx_mapping"}}};
  for (size_t g = 0; g < num_groups; ++g) {
    inputs.push_back({&block_tables[g], {"block_tables", static_cast<int64_t>(g)}});
    if (!num_blocks.empty()) inputs.push_back({&num_blocks[g], {"num_blocks", static_cast<int64_t>(g)}});
  }
  check_outputs_alias_nothing(outputs, inputs);
}

// The groups' tables and layouts (the pairs are stored by the body, not through the groups; wide:
// both pair outputs are int64, else the host checks hold every slot below 2^31).
std::vector<kernels::DraftStepGroup> pair_groups(at::TensorList block_tables, at::TensorList num_blocks,
                                                 const GroupSettings& settings, int64_t num_reqs, bool wide) {
  std::vector<kernels::DraftStepGroup> groups;
  groups.reserve(block_tables.size());
  for (size_t g = 0; g < block_tables.size(); ++g) {
    const GroupSettings::Cp cp = settings.cp(g);
    kernels::SlotMappingShape shape =
        slot_mapping_shape(block_tables[g], settings.block_sizes[g], settings.blocks_per_kv_block[g], cp.world_size,
                           cp.rank, cp.interleave, num_reqs, 0, 0);
    if (!num_blocks.empty()) shape.num_blocks = num_blocks[g].data_ptr<int32_t>();
    groups.emplace_back(block_tables[g].data_ptr<int32_t>(), nullptr, nullptr, wide, shape, settings.enabled(g), 0);
  }
  return groups;
}

kernels::IntOut int_out(const OptTensor& t) {
  if (!t.has_value()) return {};
  return {t->data_ptr(), t->scalar_type() == c10::kLong};
}

// The host op's value checks: every accept count a column of accept_index, every accepted node
// a node of its request's tree, every position it reads or writes inside its row's table, every
// next seq_len inside next_seq_lens' dtype.
template <typename IdxT>
void check_values(kernels::IntIn accept_index, kernels::IntIn accept_token_num, kernels::IntIn lens, const IdxT* idx,
                  const std::vector<kernels::DraftStepGroup>& groups, const kernels::TreeCompactionShape& s,
                  const OptTensor& next_seq_lens, const char* slots) {
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t acc = accept_token_num[r];
    TORCH_CHECK_VALUE(acc >= 0 && acc < s.num_steps, "accept_token_num[", r, "] = ", acc, " must be in [0, ",
                      s.num_steps - 1, "] (accept_index has ", s.num_steps, " columns)");
    const int64_t base = lens[r];
    check_verified_seq_len(base, r);
    const int64_t row = kernels::draft_row(idx, r);
    for (int64_t j = 0; j <= acc; ++j) {
      const int64_t index = accept_index[r * s.accept_stride + j];
      const int64_t first = r * s.draft_token_num;
      TORCH_CHECK_VALUE(index >= first && index < first + s.draft_token_num, "accept_index[", r, ", ", j, "] = ", index,
                        " is not a node of request ", r, "'s tree: must be in [", first, ", ",
                        first + s.draft_token_num, ") (r * draft_token_num + i, draft_token_num = ", s.draft_token_num,
                        ")");
      for (size_t g = 0; g < groups.size(); ++g) {
        check_tree_position(groups[g], g, r, row, base, index - first, slots);
        check_tree_position(groups[g], g, r, row, base, j, slots);
      }
    }
    if (next_seq_lens.has_value() && next_seq_lens->scalar_type() == c10::kInt) {
      // Compared without forming the sum, which a base near 2^63 would overflow.
      TORCH_CHECK_VALUE(base <= INT32_MAX - 1 - acc, "next_seq_lens is int32, but request ", r, " has ",
                        "verified_seq_len + accept_token_num + 1 = ", base, " + ", acc + 1, ", past 2^31 - 1");
    }
  }
}

void tree_compaction_pairs(const at::Tensor& accept_index, const at::Tensor& accept_token_num,
                           const at::Tensor& verified_seq_len, at::TensorList block_tables,
                           const OptTensor& idx_mapping, const at::Tensor& src_slots, const at::Tensor& dst_slots,
                           at::TensorList num_blocks, int64_t draft_token_num, int64_t cp_world_size, int64_t cp_rank,
                           int64_t cp_interleave, c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block,
                           const c10::List<bool>& cp_sharded, const c10::List<bool>& slot_mapping_enabled,
                           const OptTensor& next_seq_lens, const OptTensor& num_accepted_tokens) {
  check_tree_compaction_pairs<int64_t>(accept_index, accept_token_num, verified_seq_len, block_tables, idx_mapping,
                                       src_slots, dst_slots, num_blocks, draft_token_num, cp_world_size, cp_rank,
                                       cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded,
                                       slot_mapping_enabled, next_seq_lens, num_accepted_tokens);
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  kernels::TreeCompactionShape s;
  s.num_reqs = accept_index.size(0);
  s.num_steps = accept_index.size(1);
  s.accept_stride = accept_index.stride(0);
  s.draft_token_num = draft_token_num;
  s.src_stride = src_slots.stride(0);
  s.dst_stride = dst_slots.stride(0);
  const bool int32_pairs = src_slots.scalar_type() == c10::kInt || dst_slots.scalar_type() == c10::kInt;
  const std::vector<kernels::DraftStepGroup> groups =
      pair_groups(block_tables, num_blocks, settings, s.num_reqs, !int32_pairs);
  const kernels::IntIn index{accept_index.data_ptr(), accept_index.scalar_type() == c10::kLong};
  const kernels::IntIn counts{accept_token_num.data_ptr(), accept_token_num.scalar_type() == c10::kLong};
  const kernels::IntIn lens{verified_seq_len.data_ptr(), verified_seq_len.scalar_type() == c10::kLong};
  with_idx_mapping(idx_mapping, [&](auto* idx) {
    // A slot past 2^31 - 1 is named after the (first) int32 pair output.
    check_values(index, counts, lens, idx, groups, s, next_seq_lens,
                 src_slots.scalar_type() == c10::kInt ? "src_slots" : "dst_slots");
    kernels::tree_compaction_pairs(index, counts, lens, idx, groups.data(), static_cast<int64_t>(groups.size()),
                                   int_out(src_slots), int_out(dst_slots), int_out(next_seq_lens),
                                   int_out(num_accepted_tokens), s);
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/tree_kv.md. accept_index / accept_token_num as SGLang's verify_tree_greedy writes them;
  // src_slots / dst_slots [len(block_tables), accept_index.numel()], PAD where nothing moves.
  m.def(
      "tree_compaction_pairs(Tensor accept_index, Tensor accept_token_num, Tensor verified_seq_len, "
      "Tensor[] block_tables, Tensor? idx_mapping, Tensor(a!) src_slots, Tensor(b!) dst_slots, Tensor[] num_blocks, "
      "int draft_token_num, int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, "
      "int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, "
      "Tensor(c!)? next_seq_lens=None, Tensor(d!)? num_accepted_tokens=None) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("tree_compaction_pairs", &tree_compaction_pairs); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("tree_compaction_pairs", &check_tree_compaction_pairs<c10::SymInt>); }

}  // namespace specops::cpu
