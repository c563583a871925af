// expand_parallel_draft_inputs: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks, the values (the query layout, the rejected counts, the target
// positions and every kept position against every group's table), then the draft's ids, positions,
// masks, indices, hidden mapping, slots and query layout.
#include <torch/library.h>

#include <sstream>
#include <string>
#include <vector>

#include "cpu/slot_mapping_checks.h"
#include "cpu/step_checks.h"
#include "kernels/expand_parallel_draft_inputs.h"

namespace specops::cpu {
namespace {


kernels::IntIn int_in(const at::Tensor& t) {
  return {t.data_ptr(), t.scalar_type() == c10::kLong};
}

kernels::IntOut int_out(const at::Tensor& t) {
  return {t.data_ptr(), t.scalar_type() == c10::kLong};
}

void check_values(const kernels::ParallelDraftBuffers& b, const std::vector<kernels::DraftStepGroup>& groups,
                  const kernels::ParallelDraftShape& s) {
  TORCH_CHECK_VALUE(b.query_start_loc[0] == 0 && b.query_start_loc[s.num_reqs] == s.num_tokens,
                    "query_start_loc must run from 0 to T = target_token_ids.numel() = ", s.num_tokens,
                    ", got query_start_loc[0] = ", b.query_start_loc[0], " and query_start_loc[R = ", s.num_reqs,
                    "] = ", b.query_start_loc[s.num_reqs]);
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const int64_t q = static_cast<int64_t>(b.query_start_loc[r + 1]) - b.query_start_loc[r];
    TORCH_CHECK_VALUE(q >= 1, "query_start_loc gives request ", r, " ", q, " tokens; every request needs >= 1");
  }
  for (int64_t r = 0; r < s.num_reqs; ++r) {
    const kernels::DraftRequest d = kernels::draft_request(b, s, r);
    const int64_t rej = d.q - s.shift - d.valid;
    TORCH_CHECK_VALUE(rej >= 0 && rej <= d.q - 1, "num_rejected_tokens[", r, "] = ", rej, " must be in [0, ",
                      d.q - 1, "] (request ", r, " has ", d.q, " tokens)");
    TORCH_CHECK_VALUE(d.start >= 0, "target_positions[", d.q0, "] = ", d.start, " (request ", r, ") must be >= 0");
    for (int64_t j = 1; j < d.q; ++j) {
      // start + j past int64 (start near 2^63 - 1) equals no int64 position: compared as
      // offsets from start, and printed in 64 unsigned bits, where it exists.
      const int64_t position = b.target_positions[d.q0 + j];
      TORCH_CHECK_VALUE(position >= d.start && position - d.start == j, "target_positions[", d.q0 + j, "] = ",
                        position, " must be ", static_cast<uint64_t>(d.start) + static_cast<uint64_t>(j),
                        ": the positions of request ", r, " must be consecutive");
    }
    const int64_t row = b.idx_mapping.data != nullptr ? b.idx_mapping[r] : r;
    // The kept positions run from start to start + nv + S - 1; the highest below max_model_len
    // needs the most columns, and the slot of every kept position must fit its output. As an
    // offset from start (>= 0): start + nv + S - 1 overflows int64 for a start near 2^63 - 1.
    const int64_t last = d.start + std::min(d.valid + s.slots - 1, s.max_model_len - 1 - d.start);
    for (size_t g = 0; g < groups.size(); ++g) {
      const kernels::DraftStepGroup& group = groups[g];
      if (!group.enabled || row < 0 || last < d.start) continue;
      const int64_t columns = checked_group_row(group, g, r, row);
      for (int64_t position = d.start; position <= last; ++position) {
        check_draft_position(group, g, r, row, position, columns);
      }
    }
  }
}

template <typename Int>
void check_expand_parallel_draft_inputs(
    const at::Tensor& target_token_ids, const at::Tensor& target_positions, const at::Tensor& next_token_ids,
    const at::Tensor& query_start_loc, at::TensorList block_tables, const OptTensor& num_rejected_tokens,
    const OptTensor& seq_lens, const OptTensor& idx_mapping, at::TensorList num_blocks, const at::Tensor& input_ids,
    const at::Tensor& positions, const at::Tensor& is_rejected_token_mask, const at::Tensor& is_masked_token_mask,
    const at::Tensor& token_indices_to_sample, const OptTensor& hidden_state_mapping, at::TensorList slot_mappings,
    const at::Tensor& out_query_start_loc, const OptTensor& out_seq_lens, int64_t slots_per_request,
    bool shift_input_ids, int64_t max_model_len, int64_t parallel_drafting_token_id, int64_t padding_token_id,
    int64_t num_tokens_padded, int64_t num_reqs_padded, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
    c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
    const c10::List<bool>& slot_mapping_enabled) {
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t slots = slots_per_request, shift = shift_input_ids ? 1 : 0;
  check_positive(slots, "slots_per_request");
  // Every product of it with a count then stays in int64.
  TORCH_CHECK_VALUE(slots <= INT32_MAX, "slots_per_request must be <= 2^31 - 1, got ", slots);
  TORCH_CHECK_VALUE(slots - shift >= 1, "slots_per_request must be >= 2 with shift_input_ids (N = slots_per_request "
                    "- 1 new tokens per request must be >= 1), got ", slots);
  check_positive(max_model_len, "max_model_len");
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);

  check_tensor(target_token_ids, "target_token_ids", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(target_token_ids, "target_token_ids");
  const Int num_tokens = numel_of<Int>(target_token_ids);
  check_tensor(target_positions, "target_positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_entries(target_positions, "target_positions", num_tokens, "T = target_token_ids.numel()");
  check_tensor(next_token_ids, "next_token_ids", {c10::kInt, c10::kLong}, 1, anchor);
  const Int num_reqs = numel_of<Int>(next_token_ids);
  check_tensor(query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
  check_entries(query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = next_token_ids.numel())");
  if (num_rejected_tokens.has_value()) {
    check_tensor(*num_rejected_tokens, "num_rejected_tokens", {c10::kInt}, 1, anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(*num_rejected_tokens) == num_reqs, "num_rejected_tokens must have R = ", num_reqs,
                      " entries (R = next_token_ids.numel()), got ", numel_of<Int>(*num_rejected_tokens));
  }
  if (seq_lens.has_value()) {
    check_tensor(*seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
    check_entries(*seq_lens, "seq_lens", num_reqs, "R = next_token_ids.numel()");
  }
  if (idx_mapping.has_value()) {
    check_tensor(*idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(*idx_mapping) == num_reqs, "idx_mapping must have R = ", num_reqs,
                      " entries (R = next_token_ids.numel()), got ", numel_of<Int>(*idx_mapping));
  }
  const Int num_out = num_tokens + num_reqs * (slots - shift);
  TORCH_CHECK_VALUE(num_out <= INT32_MAX, "T' = T + R * N must be < 2^31, got ", num_out);
  const char* out_what = "T' = T + R * N";
  check_tensor(input_ids, "input_ids", {c10::kInt, c10::kLong}, 1, anchor);
  check_entries(input_ids, "input_ids", num_out, out_what);
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_entries(positions, "positions", num_out, out_what);
  check_tensor(is_rejected_token_mask, "is_rejected_token_mask", {c10::kBool}, 1, anchor);
  check_entries(is_rejected_token_mask, "is_rejected_token_mask", num_out, out_what);
  check_tensor(is_masked_token_mask, "is_masked_token_mask", {c10::kBool}, 1, anchor);
  check_entries(is_masked_token_mask, "is_masked_token_mask", num_out, out_what);
  padded_end(input_ids, "input_ids", num_tokens_padded, "num_tokens_padded", num_out, "T'");
  padded_end(positions, "positions", num_tokens_padded, "num_tokens_padded", num_out, "T'");
  padded_end(is_rejected_token_mask, "is_rejected_token_mask", num_tokens_padded, "num_tokens_padded", num_out, "T'");
  padded_end(is_masked_token_mask, "is_masked_token_mask", num_tokens_padded, "num_tokens_padded", num_out, "T'");
  TORCH_CHECK_VALUE(num_reqs_padded < 0 || num_reqs_padded >= num_reqs, "num_reqs_padded must be >= R = ", num_reqs,
                    ", got ", num_reqs_padded);
  // Request offsets are int32: a larger padded count is no batch (and num_reqs_padded * slots must not overflow).
  TORCH_CHECK_VALUE(num_reqs_padded < INT32_MAX, "num_reqs_padded must be < 2^31 - 1, got ", num_reqs_padded);
  check_tensor(token_indices_to_sample, "token_indices_to_sample", {c10::kInt}, 1, anchor);
  check_entries(token_indices_to_sample, "token_indices_to_sample", num_reqs * slots, "R * slots_per_request");
  if (num_reqs_padded >= 0) {
    check_entries(token_indices_to_sample, "token_indices_to_sample", Int(num_reqs_padded * slots),
                  "num_reqs_padded * slots_per_request");
  }
  if (hidden_state_mapping.has_value()) {
    TORCH_CHECK_VALUE(shift == 1, "hidden_state_mapping is computed with shift_input_ids only");
    check_tensor(*hidden_state_mapping, "hidden_state_mapping", {c10::kInt}, 1, anchor);
    check_entries(*hidden_state_mapping, "hidden_state_mapping", num_tokens, "T = target_token_ids.numel()");
  }
  check_tensor(out_query_start_loc, "out_query_start_loc", {c10::kInt}, 1, anchor);
  const Int query_start_loc_end = num_reqs_padded >= 0 ? Int(num_reqs_padded + 1) : numel_of<Int>(out_query_start_loc);
  const Int least_entries = query_start_loc_end > num_reqs + 1 ? query_start_loc_end : num_reqs + 1;
  TORCH_CHECK_VALUE(numel_of<Int>(out_query_start_loc) >= least_entries,
                    "out_query_start_loc must have at least num_reqs_padded + 1 = ", least_entries, " entries, got ",
                    numel_of<Int>(out_query_start_loc));
  if (out_seq_lens.has_value()) {
    TORCH_CHECK_VALUE(seq_lens.has_value(), "out_seq_lens needs seq_lens");
    check_tensor(*out_seq_lens, "out_seq_lens", {c10::kInt}, 1, anchor);
    check_entries(*out_seq_lens, "out_seq_lens", num_reqs, "R = next_token_ids.numel()");
    padded_end(*out_seq_lens, "out_seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  }
  check_draft_step_groups<Int>(block_tables, slot_mappings, num_blocks, settings, num_out, num_tokens_padded, &anchor);
  std::vector<NamedTensor> outputs = {{&input_ids, {"input_ids"}},
                                      {&positions, {"positions"}},
                                      {&is_rejected_token_mask, {"is_rejected_token_mask"}},
                                      {&is_masked_token_mask, {"is_masked_token_mask"}},
                                      {&token_indices_to_sample, {"token_indices_to_sample"}},
                                      {ptr(hidden_state_mapping), {"hidden_state_mapping"}},
                                      {&out_query_start_loc, {"out_query_start_loc"}},
                                      {ptr(out_seq_lens), {"out_seq_lens"}}};
  std::vector<NamedTensor> inputs = {{&target_token_ids, {"target_token_ids"}},
                                     {&target_positions, {"target_positions"}},
                                     {&next_token_ids, {"next_token_ids"}},
                                     {&query_start_loc, {"query_start_loc"}},
                                     {ptr(num_rejected_tokens), {"num_rejected_tokens"}},
                                     {ptr(seq_lens), {"seq_lens"}},
                                     {ptr(idx_mapping), {"idx_mapping"}}};
  add_group_tensors(outputs, inputs, slot_mappings, block_tables, num_blocks);
  check_outputs_alias_nothing(outputs, inputs);
}

void expand_parallel_draft_inputs(
    const at::Tensor& target_token_ids, const at::Tensor& target_positions, const at::Tensor& next_token_ids,
    const at::Tensor& query_start_loc, at::TensorList block_tables, const OptTensor& num_rejected_tokens,
    const OptTensor& seq_lens, const OptTensor& idx_mapping, at::TensorList num_blocks, const at::Tensor& input_ids,
    const at::Tensor& positions, const at::Tensor& is_rejected_token_mask, const at::Tensor& is_masked_token_mask,
    const at::Tensor& token_indices_to_sample, const OptTensor& hidden_state_mapping, at::TensorList slot_mappings,
    const at::Tensor& out_query_start_loc, const OptTensor& out_seq_lens, int64_t slots_per_request,
    bool shift_input_ids, int64_t max_model_len, int64_t parallel_drafting_token_id, int64_t padding_token_id,
    int64_t num_tokens_padded, int64_t num_reqs_padded, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
    c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
    const c10::List<bool>& slot_mapping_enabled) {
  check_expand_parallel_draft_inputs<int64_t>(
      target_token_ids, target_positions, next_token_ids, query_start_loc, block_tables, num_rejected_tokens, seq_lens,
      idx_mapping, num_blocks, input_ids, positions, is_rejected_token_mask, is_masked_token_mask,
      token_indices_to_sample, hidden_state_mapping, slot_mappings, out_query_start_loc, out_seq_lens,
      slots_per_request, shift_input_ids, max_model_len, parallel_drafting_token_id, padding_token_id,
      num_tokens_padded, num_reqs_padded, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block,
      cp_sharded, slot_mapping_enabled);
  const size_t num_groups = block_tables.size();
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t slots = slots_per_request, shift = shift_input_ids ? 1 : 0;
  const int64_t num_tokens = target_token_ids.numel();
  const int64_t num_reqs = next_token_ids.numel();
  const int64_t num_out = num_tokens + num_reqs * (slots - shift);
  kernels::ParallelDraftShape s;
  s.input_ids_end = padded_end(input_ids, "input_ids", num_tokens_padded, "num_tokens_padded", num_out, "T'");
  s.positions_end = padded_end(positions, "positions", num_tokens_padded, "num_tokens_padded", num_out, "T'");
  s.rejected_end = padded_end(is_rejected_token_mask, "is_rejected_token_mask", num_tokens_padded,
                              "num_tokens_padded", num_out, "T'");
  s.masked_end = padded_end(is_masked_token_mask, "is_masked_token_mask", num_tokens_padded, "num_tokens_padded",
                            num_out, "T'");
  s.indices_end = num_reqs_padded >= 0 ? num_reqs_padded * slots : token_indices_to_sample.numel();
  if (hidden_state_mapping.has_value()) s.hidden_end = hidden_state_mapping->numel();
  s.query_start_loc_end = num_reqs_padded >= 0 ? num_reqs_padded + 1 : out_query_start_loc.numel();
  if (out_seq_lens.has_value()) {
    s.seq_lens_end = padded_end(*out_seq_lens, "out_seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  }
  std::vector<kernels::DraftStepGroup> groups =
      draft_step_groups(block_tables, slot_mappings, num_blocks, settings, num_reqs, num_out, num_tokens_padded);
  s.num_reqs = num_reqs;
  s.num_tokens = num_tokens;
  s.num_out_tokens = num_out;
  s.slots = slots;
  s.shift = shift;
  s.max_model_len = max_model_len;
  s.draft_token = parallel_drafting_token_id;
  s.padding_token = padding_token_id;
  kernels::ParallelDraftBuffers b;
  b.target_token_ids = int_in(target_token_ids);
  b.target_positions = int_in(target_positions);
  b.next_token_ids = int_in(next_token_ids);
  if (idx_mapping.has_value()) b.idx_mapping = int_in(*idx_mapping);
  b.query_start_loc = query_start_loc.data_ptr<int32_t>();
  b.num_rejected = num_rejected_tokens.has_value() ? num_rejected_tokens->data_ptr<int32_t>() : nullptr;
  b.seq_lens = seq_lens.has_value() ? seq_lens->data_ptr<int32_t>() : nullptr;
  b.input_ids = int_out(input_ids);
  b.positions = int_out(positions);
  b.is_rejected = is_rejected_token_mask.data_ptr<bool>();
  b.is_masked = is_masked_token_mask.data_ptr<bool>();
  b.token_indices_to_sample = token_indices_to_sample.data_ptr<int32_t>();
  b.hidden_state_mapping = hidden_state_mapping.has_value() ? hidden_state_mapping->data_ptr<int32_t>() : nullptr;
  b.out_query_start_loc = out_query_start_loc.data_ptr<int32_t>();
  b.out_seq_lens = out_seq_lens.has_value() ? out_seq_lens->data_ptr<int32_t>() : nullptr;
  check_values(b, groups, s);
  kernels::expand_parallel_draft_inputs(b, groups.data(), static_cast<int64_t>(num_groups), s);
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "expand_parallel_draft_inputs(Tensor target_token_ids, Tensor target_positions, Tensor next_token_ids, "
      "Tensor query_start_loc, Tensor[] block_tables, Tensor? num_rejected_tokens, Tensor? seq_lens, "
      "Tensor? idx_mapping, Tensor[] num_blocks, Tensor(a!) input_ids, Tensor(b!) positions, "
      "Tensor(c!) is_rejected_token_mask, Tensor(d!) is_masked_token_mask, Tensor(e!) token_indices_to_sample, "
      "Tensor(f!)? hidden_state_mapping, Tensor(g!)[] slot_mappings, Tensor(h!) out_query_start_loc, "
      "Tensor(i!)? out_seq_lens, int slots_per_request, bool shift_input_ids, int max_model_len, "
      "int parallel_drafting_token_id, int padding_token_id, int num_tokens_padded, int num_reqs_padded, "
      "int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, int[] blocks_per_kv_block, "
      "bool[] cp_sharded, bool[] slot_mapping_enabled) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("expand_parallel_draft_inputs", &expand_parallel_draft_inputs); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("expand_parallel_draft_inputs", &check_expand_parallel_draft_inputs<c10::SymInt>);
}

}  // namespace specops::cpu
