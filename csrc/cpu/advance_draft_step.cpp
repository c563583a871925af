// advance_draft_step: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the values (the draft positions against every group's table included),
// then positions, seq_lens, the query layout, every slot mapping and the step's token bookkeeping
// (kernels/advance_draft_step.h, DraftInputs).
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <sstream>
#include <vector>

#include "cpu/slot_mapping_checks.h"
#include "cpu/step_checks.h"
#include "kernels/advance_draft_step.h"

namespace specops::cpu {
namespace {

// Whether two tensors are the same elements (out_positions given as positions itself).
bool same_span(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_same(b)) return true;
  if (a.device() != b.device() || a.scalar_type() != b.scalar_type()) return false;
  if (a.device().is_meta()) {  // a fake tensor's address is no address: its place in its storage
    return a.has_storage() && b.has_storage() &&
           a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl() &&
           a.sym_storage_offset() == b.sym_storage_offset() && a.sym_numel() == b.sym_numel();
  }
  return a.data_ptr() == b.data_ptr() && a.numel() == b.numel();
}

template <typename PosT, typename TokT, typename IdxT>
void check_values(const at::Tensor& positions, const TokT* token_indices, const int32_t* seq_lens,
                  const int32_t* num_rejected, const IdxT* idx, const std::vector<kernels::DraftStepGroup>& groups,
                  const kernels::DraftStepShape& s, const char* seq_lens_name) {
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
                        "] = ", num_rejected[r], " is more than ", seq_lens_name, "[", r, "] = ", seq_lens[r]);
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

// An optional tensor of exactly one entry per request.
template <typename Int>
void check_per_request(const OptTensor& t, const char* name, std::initializer_list<c10::ScalarType> dtypes,
                       const Int& num_reqs, const char* what, const Anchor& anchor) {
  if (!t.has_value()) return;
  check_tensor(*t, name, dtypes, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(*t) == num_reqs, name, " must have ", what, " = ", num_reqs, " entries, got ",
                    numel_of<Int>(*t));
}

// The token bookkeeping's tensors (metadata); draft_step's value is the host op's to check (reading
// it would sync a device).
template <typename Int>
void check_draft_inputs(const Int& num_reqs, const char* what, const Anchor& anchor, const OptTensor& target_seq_lens,
                        const OptTensor& input_ids, const OptTensor& draft_tokens, const OptTensor& sampled_tokens,
                        const OptTensor& draft_step, int64_t num_draft_steps, const OptTensor& sample_positions,
                        const OptTensor& hidden_states, const OptTensor& next_hidden_states) {
  check_per_request(target_seq_lens, "target_seq_lens", {c10::kInt}, num_reqs, what, anchor);
  check_per_request(sampled_tokens, "sampled_tokens", {c10::kLong, c10::kInt}, num_reqs, what, anchor);
  if (draft_tokens.has_value()) {
    check_tensor(*draft_tokens, "draft_tokens", {c10::kLong, c10::kInt}, 2, anchor);
    TORCH_CHECK_VALUE(size_of<Int>(*draft_tokens, 0) >= num_reqs, "draft_tokens must have at least ", what, " = ",
                      num_reqs, " rows, got ", size_of<Int>(*draft_tokens, 0));
    check_rows_disjoint(*draft_tokens, "draft_tokens");
  }
  TORCH_CHECK_VALUE(!sampled_tokens.has_value() || draft_tokens.has_value(),
                    "sampled_tokens needs draft_tokens (the buffer it is stored in)");
  if (input_ids.has_value()) {
    check_tensor(*input_ids, "input_ids", {c10::kInt, c10::kLong}, 1, anchor);
    check_entries(*input_ids, "input_ids", num_reqs, what);
    TORCH_CHECK_VALUE(draft_tokens.has_value(), "input_ids needs draft_tokens (the tokens it receives)");
  }
  if (draft_step.has_value()) {
    TORCH_CHECK_VALUE(draft_step->defined(), "draft_step must be a tensor, got None");
    TORCH_CHECK_VALUE(draft_step->device() == anchor.device, "draft_step must be on ", anchor.device, " like ",
                      anchor.name, ", got ", draft_step->device());
    TORCH_CHECK_VALUE(draft_step->scalar_type() == c10::kLong || draft_step->scalar_type() == c10::kInt,
                      "draft_step must have dtype int64 or int32, got ", dtype_name(draft_step->scalar_type()));
    TORCH_CHECK_VALUE(draft_step->dim() == 0, "draft_step must be 0-D, got shape ", draft_step->sym_sizes());
  } else if (draft_tokens.has_value()) {
    TORCH_CHECK_VALUE(size_of<Int>(*draft_tokens, 1) >= 1, "draft_tokens must have at least 1 column (step 0), got 0");
  }
  if (num_draft_steps >= 0) {
    TORCH_CHECK_VALUE(draft_step.has_value(), "num_draft_steps needs draft_step (the step it is compared with)");
    check_positive(num_draft_steps, "num_draft_steps");
  }
  if (sample_positions.has_value()) {
    check_tensor(*sample_positions, "sample_positions", {c10::kLong, c10::kInt}, 1, anchor);
    check_entries(*sample_positions, "sample_positions", num_reqs, what);
  }
  TORCH_CHECK_VALUE(hidden_states.has_value() == next_hidden_states.has_value(),
                    "hidden_states and next_hidden_states come together, got only ",
                    hidden_states.has_value() ? "hidden_states" : "next_hidden_states");
  if (hidden_states.has_value()) {
    check_tensor(*hidden_states, "hidden_states", {c10::kBFloat16, c10::kHalf, c10::kFloat}, 2, anchor);
    TORCH_CHECK_VALUE(next_hidden_states->defined(), "next_hidden_states must be a tensor, got None");
    TORCH_CHECK_VALUE(next_hidden_states->scalar_type() == hidden_states->scalar_type(),
                      "next_hidden_states must have dtype ", dtype_name(hidden_states->scalar_type()),
                      " like hidden_states, got ", dtype_name(next_hidden_states->scalar_type()));
    check_tensor(*next_hidden_states, "next_hidden_states", {hidden_states->scalar_type()}, 2, anchor);
    for (const auto& [t, name] : {std::pair{&*hidden_states, "hidden_states"},
                                  std::pair{&*next_hidden_states, "next_hidden_states"}}) {
      TORCH_CHECK_VALUE(size_of<Int>(*t, 0) >= num_reqs, name, " must have at least ", what, " = ", num_reqs,
                        " rows, got ", size_of<Int>(*t, 0));
    }
    TORCH_CHECK_VALUE(size_of<Int>(*next_hidden_states, 1) == size_of<Int>(*hidden_states, 1),
                      "next_hidden_states must have ", size_of<Int>(*hidden_states, 1),
                      " columns like hidden_states, got ", size_of<Int>(*next_hidden_states, 1));
    check_rows_disjoint(*next_hidden_states, "next_hidden_states");
  }
}

// The DraftInputs the token bookkeeping's tensors give (checked), draft_step read: this is the
// host op, and its tensors are host tensors.
kernels::DraftInputs draft_inputs(const OptTensor& target_seq_lens, const OptTensor& input_ids,
                                  const OptTensor& draft_tokens, const OptTensor& sampled_tokens,
                                  const OptTensor& draft_step, int64_t num_draft_steps,
                                  const OptTensor& sample_positions, const OptTensor& hidden_states,
                                  const OptTensor& next_hidden_states) {
  kernels::DraftInputs in;
  if (target_seq_lens.has_value()) in.target_seq_lens = target_seq_lens->data_ptr<int32_t>();
  if (draft_tokens.has_value()) {
    in.draft_tokens = {draft_tokens->data_ptr(), draft_tokens->scalar_type() == c10::kLong};
    in.draft_tokens_stride = draft_tokens->stride(0);
    in.draft_tokens_columns = draft_tokens->size(1);
  }
  if (sampled_tokens.has_value()) {
    in.sampled_tokens = {sampled_tokens->data_ptr(), sampled_tokens->scalar_type() == c10::kLong};
  }
  if (input_ids.has_value()) in.input_ids = {input_ids->data_ptr(), input_ids->scalar_type() == c10::kLong};
  if (draft_step.has_value()) {
    in.step = draft_step->scalar_type() == c10::kLong ? *draft_step->data_ptr<int64_t>()
                                                      : static_cast<int64_t>(*draft_step->data_ptr<int32_t>());
    if (draft_tokens.has_value()) {
      TORCH_CHECK_VALUE(in.step_in_columns(), "draft_step = ", in.step, " is outside the ", in.draft_tokens_columns,
                        " columns of draft_tokens");
    }
  }
  if (num_draft_steps >= 0) in.last = in.step >= num_draft_steps - 1;
  if (sample_positions.has_value()) {
    in.sample_positions = {sample_positions->data_ptr(), sample_positions->scalar_type() == c10::kLong};
  }
  if (hidden_states.has_value()) {
    const int64_t element = hidden_states->element_size();
    in.hidden_states = static_cast<const char*>(hidden_states->data_ptr());
    in.next_hidden_states = static_cast<char*>(next_hidden_states->data_ptr());
    in.hidden_stride = hidden_states->stride(0) * element;
    in.next_hidden_stride = next_hidden_states->stride(0) * element;
    in.row_bytes = hidden_states->size(1) * element;
  }
  return in;
}

template <typename Int>
void check_advance_draft_step(const at::Tensor& positions, const at::Tensor& seq_lens, at::TensorList block_tables,
                              const OptTensor& token_indices, const OptTensor& num_rejected_tokens,
                              const OptTensor& idx_mapping, const at::Tensor& out_positions, at::TensorList slot_mappings,
                              const OptTensor& query_start_loc, at::TensorList num_blocks, int64_t max_model_len,
                              int64_t past_max_model_len, int64_t num_tokens_padded, int64_t num_reqs_padded,
                              int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave, c10::IntArrayRef block_sizes,
                              c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
                              const c10::List<bool>& slot_mapping_enabled, const OptTensor& target_seq_lens,
                              const OptTensor& input_ids, const OptTensor& draft_tokens, const OptTensor& sampled_tokens,
                              const OptTensor& draft_step, int64_t num_draft_steps, const OptTensor& sample_positions,
                              const OptTensor& hidden_states, const OptTensor& next_hidden_states,
                              const OptTensor& max_model_len_tensor) {
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t rule = past_max_model_len;
  check_max_model_len(max_model_len, max_model_len_tensor, anchor_of(positions, "positions"));
  TORCH_CHECK_VALUE(rule == 0 || rule == 1, "past_max_model_len must be \"reset\" (0) or \"clamp\" (1), got ", rule);
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1);
  const Anchor anchor = anchor_of(positions, "positions");
  if (token_indices.has_value()) check_tensor(*token_indices, "token_indices", {c10::kInt, c10::kLong}, 1, anchor);
  const Int num_reqs = token_indices.has_value() ? numel_of<Int>(*token_indices) : numel_of<Int>(positions);
  const char* what = token_indices.has_value() ? "R = token_indices.numel()" : "R = positions.numel()";
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  check_entries(seq_lens, "seq_lens", num_reqs, what);
  padded_end(seq_lens, "seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  check_per_request(num_rejected_tokens, "num_rejected_tokens", {c10::kInt}, num_reqs, what, anchor);
  check_per_request(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, num_reqs, what, anchor);
  check_tensor(out_positions, "out_positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_entries(out_positions, "out_positions", num_reqs, what);
  if (numel_of<Int>(out_positions) > num_reqs && num_tokens_padded >= 0) {
    TORCH_CHECK_VALUE(num_tokens_padded >= num_reqs && numel_of<Int>(out_positions) >= num_tokens_padded,
                      "num_tokens_padded must be in [R = ", num_reqs, ", out_positions.numel() = ",
                      numel_of<Int>(out_positions), "], got ", num_tokens_padded);
  }
  if (query_start_loc.has_value()) {
    check_tensor(*query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
    const Int end = num_reqs_padded >= 0 ? Int(num_reqs_padded + 1) : numel_of<Int>(*query_start_loc);
    TORCH_CHECK_VALUE(numel_of<Int>(*query_start_loc) >= end && end >= num_reqs + 1,
                      "query_start_loc must have at least num_reqs_padded + 1 = ", end > num_reqs + 1 ? end : num_reqs + 1,
                      " entries, got ", numel_of<Int>(*query_start_loc));
  }
  check_draft_inputs<Int>(num_reqs, what, anchor, target_seq_lens, input_ids, draft_tokens, sampled_tokens, draft_step,
                          num_draft_steps, sample_positions, hidden_states, next_hidden_states);
  check_draft_step_groups<Int>(block_tables, slot_mappings, num_blocks, settings, num_reqs, num_tokens_padded, &anchor);
  // out_positions may be positions itself (in place, element by element), never a part of it,
  // nor share anything with positions when token_indices gathers (another request's position).
  const bool in_place = !token_indices.has_value() && same_span(out_positions, positions);
  if (!in_place) check_no_overlap(out_positions, "out_positions", positions, "positions");
  std::vector<NamedTensor> outputs = {{&seq_lens, {"seq_lens"}}, {&out_positions, {"out_positions"}},
                                      {ptr(query_start_loc), {"query_start_loc"}},
                                      {ptr(input_ids), {"input_ids"}},
                                      {ptr(draft_tokens), {"draft_tokens"}},
                                      {ptr(sample_positions), {"sample_positions"}},
                                      {ptr(next_hidden_states), {"next_hidden_states"}}};
  std::vector<NamedTensor> inputs = {{ptr(token_indices), {"token_indices"}},
                                     {ptr(num_rejected_tokens), {"num_rejected_tokens"}},
                                     {ptr(idx_mapping), {"idx_mapping"}},
                                     {ptr(target_seq_lens), {"target_seq_lens"}},
                                     {ptr(sampled_tokens), {"sampled_tokens"}},
                                     {ptr(draft_step), {"draft_step"}},
                                     {ptr(hidden_states), {"hidden_states"}},
                                     {ptr(max_model_len_tensor), {"max_model_len_tensor"}}};
  add_group_tensors(outputs, inputs, slot_mappings, block_tables, num_blocks);
  check_outputs_alias_nothing(outputs, inputs);
  for (const NamedTensor& out : outputs) {
    if (out.tensor != nullptr && out.tensor != &out_positions) {
      check_no_overlap(*out.tensor, out.name, positions, "positions");
    }
  }
}

void advance_draft_step(const at::Tensor& positions, const at::Tensor& seq_lens, at::TensorList block_tables,
                        const OptTensor& token_indices, const OptTensor& num_rejected_tokens,
                        const OptTensor& idx_mapping, const at::Tensor& out_positions, at::TensorList slot_mappings,
                        const OptTensor& query_start_loc, at::TensorList num_blocks, int64_t max_model_len,
                        int64_t past_max_model_len, int64_t num_tokens_padded, int64_t num_reqs_padded,
                        int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave, c10::IntArrayRef block_sizes,
                        c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
                        const c10::List<bool>& slot_mapping_enabled, const OptTensor& target_seq_lens,
                        const OptTensor& input_ids, const OptTensor& draft_tokens, const OptTensor& sampled_tokens,
                        const OptTensor& draft_step, int64_t num_draft_steps, const OptTensor& sample_positions,
                        const OptTensor& hidden_states, const OptTensor& next_hidden_states,
                        const OptTensor& max_model_len_tensor) {
  check_advance_draft_step<int64_t>(
      positions, seq_lens, block_tables, token_indices, num_rejected_tokens, idx_mapping, out_positions, slot_mappings,
      query_start_loc, num_blocks, max_model_len, past_max_model_len, num_tokens_padded, num_reqs_padded,
      cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded, slot_mapping_enabled,
      target_seq_lens, input_ids, draft_tokens, sampled_tokens, draft_step, num_draft_steps, sample_positions,
      hidden_states, next_hidden_states, max_model_len_tensor);
  const int64_t limit = max_model_len_value(max_model_len, max_model_len_tensor);
  const size_t num_groups = block_tables.size();
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t rule = past_max_model_len;
  const int64_t num_reqs = token_indices.has_value() ? token_indices->numel() : positions.numel();
  const int64_t seq_lens_end = padded_end(seq_lens, "seq_lens", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  const int64_t positions_end =
      out_positions.numel() > num_reqs && num_tokens_padded >= 0 ? num_tokens_padded : out_positions.numel();
  const int64_t query_start_loc_end =
      !query_start_loc.has_value() ? 0 : num_reqs_padded >= 0 ? num_reqs_padded + 1 : query_start_loc->numel();
  const kernels::DraftInputs in = draft_inputs(target_seq_lens, input_ids, draft_tokens, sampled_tokens, draft_step,
                                               num_draft_steps, sample_positions, hidden_states, next_hidden_states);
  std::vector<kernels::DraftStepGroup> groups =
      draft_step_groups(block_tables, slot_mappings, num_blocks, settings, num_reqs, num_reqs, num_tokens_padded);

  kernels::DraftStepShape s;
  s.num_reqs = num_reqs;
  s.num_positions = positions.numel();
  s.max_model_len = limit;
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
        // Also on a last step, which reads none of them: a call is valid or not whatever its step.
        check_values<PosT, TokT, IdxT>(positions, tokens, in.target_seq_lens != nullptr ? in.target_seq_lens : lens,
                                       rejected, idx, groups, s,
                                       in.target_seq_lens != nullptr ? "target_seq_lens" : "seq_lens");
        AT_DISPATCH_INDEX_TYPES(out_positions.scalar_type(), "advance_draft_step", [&] {
          kernels::advance_draft_step<PosT, index_t, TokT, IdxT>(positions.data_ptr<PosT>(), lens, tokens, rejected,
                                                                  idx, out_positions.data_ptr<index_t>(), qsl,
                                                                  groups.data(), static_cast<int64_t>(num_groups), s,
                                                                  in);
        });
      });
    });
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // past_max_model_len: 0 "reset", 1 "clamp"; out_positions may be positions itself (in place)
  // without token_indices. num_draft_steps -1: no last step (draft_step only picks the column).
  // max_model_len -1: max_model_len_tensor (0-D, read on the device) gives it.
  // The token bookkeeping's arguments (target_seq_lens on) default to none.
  m.def(
      "advance_draft_step(Tensor positions, Tensor(a!) seq_lens, Tensor[] block_tables, Tensor? token_indices, "
      "Tensor? num_rejected_tokens, Tensor? idx_mapping, Tensor(b!) out_positions, Tensor(c!)[] slot_mappings, "
      "Tensor(d!)? query_start_loc, Tensor[] num_blocks, int max_model_len, int past_max_model_len, "
      "int num_tokens_padded, int num_reqs_padded, int cp_world_size, int cp_rank, int cp_interleave, "
      "int[] block_sizes, int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, "
      "Tensor? target_seq_lens=None, Tensor(e!)? input_ids=None, Tensor(f!)? draft_tokens=None, "
      "Tensor? sampled_tokens=None, Tensor? draft_step=None, int num_draft_steps=-1, "
      "Tensor(g!)? sample_positions=None, Tensor? hidden_states=None, Tensor(h!)? next_hidden_states=None, "
      "Tensor? max_model_len_tensor=None) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("advance_draft_step", &advance_draft_step); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("advance_draft_step", &check_advance_draft_step<c10::SymInt>); }

}  // namespace specops::cpu
