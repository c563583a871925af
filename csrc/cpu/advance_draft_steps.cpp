// advance_draft_steps: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the values (every later pass's position against each group's table and the
// RoPE cache included), then every draft pass's rows.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "cpu/slot_mapping_checks.h"
#include "cpu/step_checks.h"
#include "kernels/advance_draft_steps.h"

namespace specops::cpu {
namespace {

// What sizes each output, for the error that finds it too small.
constexpr const char* kStream =
    "num_steps rows; each pass's stream of num_input_tokens or num_reqs_padded tokens, padded to split_size";
constexpr const char* kRequests = "num_steps rows of R = token_indices.numel() requests";
constexpr const char* kRequestRows = "num_steps rows; out_seq_lens.size(1) requests";

// An output: contiguous, with at least the given rows and entries (the last dimension exactly
// `last` when it is >= 0).
template <typename Int, typename Name>
void check_rows(const at::Tensor& t, const Name& name, std::initializer_list<c10::ScalarType> dtypes,
                std::initializer_list<Int> shape, const char* sized_by, const Anchor& anchor,
                const std::optional<Int>& last = std::nullopt) {
  check_tensor(t, name, dtypes, static_cast<int64_t>(shape.size()), anchor);
  TORCH_CHECK_VALUE(t.is_contiguous(), name, " must be contiguous, got strides ", t.sym_strides());
  if (last.has_value()) {
    TORCH_CHECK_VALUE(size_of<Int>(t, t.dim() - 1) == *last, name, " must have ", *last,
                      " entries in its last dimension, got shape ", t.sym_sizes());
  }
  int64_t d = 0;
  for (const Int& least : shape) {
    TORCH_CHECK_VALUE(size_of<Int>(t, d) >= least, name, " must have at least shape ", c10::ArrayRef<Int>(shape),
                      " (", sized_by, "), got ", t.sym_sizes());
    ++d;
  }
}

// A count no output can hold is refused before the padding math, which would overflow past it.
void stream_rows(int64_t input_tokens, const char* name, int64_t split_size, int64_t* per_rank, int64_t* pad) {
  TORCH_CHECK_VALUE(input_tokens <= std::numeric_limits<int64_t>::max() - split_size, name, " = ", input_tokens,
                    " is more tokens than any output holds");
  kernels::split_of(input_tokens, split_size, per_rank, pad);
}

template <typename PosT, typename TokT, typename IdxT>
void check_values(const int32_t* qsl, const PosT* positions, const int32_t* seq_lens, const TokT* token_indices,
                  const int32_t* num_rejected, const IdxT* idx, const std::vector<kernels::DraftStepsGroup>& groups,
                  const kernels::DraftStepsShape& s) {
  const int64_t R = s.num_reqs;
  TORCH_CHECK_VALUE(qsl[0] >= 0, "query_start_loc[0] = ", qsl[0], " must be >= 0");
  for (int64_t r = 0; r < R; ++r) {
    TORCH_CHECK_VALUE(qsl[r + 1] >= qsl[r], "query_start_loc must be non-decreasing, got query_start_loc[", r + 1,
                      "] = ", qsl[r + 1], " < query_start_loc[", r, "] = ", qsl[r]);
  }
  TORCH_CHECK_VALUE(qsl[R] == s.num_tokens, "num_actual_tokens must equal query_start_loc[R = ", R, "] = ", qsl[R],
                    ", got ", s.num_tokens);
  // Pass 1 copies the target slots: an int32 out_slots[g] holds none past 2^31 - 1, as the later
  // passes' computed slots (the device paths store PAD for both).
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].step.wide) continue;
    for (int64_t t = 0; t < s.num_tokens; ++t) {
      const int64_t slot = groups[g].target(t);
      TORCH_CHECK_VALUE(slot <= INT32_MAX, "out_slots[", g, "] is int32, but target_slot_mappings[", g, "][", t,
                        "] = ", slot, " is past 2^31 - 1; pass an int64 slot mapping");
    }
  }
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    const int64_t p = static_cast<int64_t>(positions[t]);
    TORCH_CHECK_VALUE(p >= 0 && p < s.rope_rows, "positions[", t, "] = ", p,
                      " must be in [0, rope_cos_sin_cache.size(0) = ", s.rope_rows, ")");
  }
  kernels::DraftStepShape rule;
  rule.num_reqs = R;
  rule.num_positions = s.num_positions;
  rule.max_model_len = s.max_model_len;
  rule.clamp = s.clamp;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t index = static_cast<int64_t>(token_indices[r]);
    TORCH_CHECK_VALUE(index >= 0 && index < s.num_positions, "token_indices[", r, "] = ", index,
                      " is outside positions, which has ", s.num_positions, " entries");
    TORCH_CHECK_VALUE(positions[index] >= 0, "positions[", index, "] = ", static_cast<int64_t>(positions[index]),
                      " (token_indices[", r, "]) must be >= 0");
    TORCH_CHECK_VALUE(static_cast<int64_t>(seq_lens[r]) - num_rejected[r] >= 0, "num_rejected_tokens[", r, "] = ",
                      num_rejected[r], " is more than seq_lens[", r, "] = ", seq_lens[r]);
    if (s.num_steps < 2) continue;
    const int64_t row = kernels::draft_row(idx, r);
    kernels::DraftPosition d = kernels::draft_position(positions, token_indices, seq_lens, num_rejected, r, rule);
    for (int64_t k = 1; k < s.num_steps; ++k) {
      if (k > 1) {
        const int64_t p = d.position + 1;
        const bool over = !s.clamp && p >= s.max_model_len;
        d = {s.clamp ? std::min(p, s.max_model_len - 1) : (over ? 0 : p), 0, !over};
      }
      TORCH_CHECK_VALUE(d.position < s.rope_rows, "draft position ", d.position, " of request ", r, " (pass ", k + 1,
                        ") must be below rope_cos_sin_cache.size(0) = ", s.rope_rows);
      for (size_t g = 0; g < groups.size(); ++g) {
        const kernels::DraftStepGroup& group = groups[g].step;
        if (!d.mapped || !group.enabled || row < 0) continue;
        check_draft_position(group, g, r, row, d.position, checked_group_row(group, g, r, row), "out_slots");
      }
    }
  }
}

// The per-pass extents: (rows per split rank, padded stream rows, slot entries) every pass needs.
struct PassExtents {
  int64_t per_rank = 0, pad = 0, slot_entries = 0;
};

PassExtents pass_extents(int64_t num_steps, int64_t num_input_tokens, int64_t num_reqs_padded, int64_t split_size) {
  PassExtents e;
  int64_t later_rank = 0, later_pad = 0;
  stream_rows(num_input_tokens, "num_input_tokens", split_size, &e.per_rank, &e.pad);
  e.slot_entries = num_input_tokens;
  if (num_steps > 1) {
    stream_rows(num_reqs_padded, "num_reqs_padded", split_size, &later_rank, &later_pad);
    e.per_rank = std::max(e.per_rank, later_rank);
    e.pad = std::max(e.pad, later_pad);
    e.slot_entries = std::max(e.slot_entries, num_reqs_padded);
  }
  return e;
}

template <typename Int>
void check_advance_draft_steps(const at::Tensor& query_start_loc, const at::Tensor& positions, const at::Tensor& seq_lens,
                               const at::Tensor& token_indices, const at::Tensor& num_rejected_tokens,
                               const OptTensor& idx_mapping, at::TensorList block_tables, at::TensorList num_blocks,
                               at::TensorList target_slot_mappings, const at::Tensor& rope_cos_sin_cache,
                               const at::Tensor& out_positions, const at::Tensor& out_seq_lens,
                               const at::Tensor& out_query_start_loc, const at::Tensor& out_cos_sin,
                               const at::Tensor& out_local_cos_sin, const at::Tensor& out_local_query_start_loc,
                               const at::Tensor& out_local_seq_lens, const at::Tensor& out_start_pos,
                               at::TensorList out_slots, at::TensorList out_slot_pairs, int64_t num_steps,
                               int64_t num_actual_tokens, int64_t num_input_tokens, int64_t num_reqs_padded,
                               int64_t max_model_len, int64_t past_max_model_len, int64_t split_size, int64_t split_rank,
                               int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave, c10::IntArrayRef block_sizes,
                               c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
                               const c10::List<bool>& slot_mapping_enabled, c10::IntArrayRef storage_block_sizes,
                               const OptTensor& max_model_len_tensor) {
  const size_t num_groups = block_tables.size();
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  settings.check(num_groups);
  TORCH_CHECK_VALUE(storage_block_sizes.size() == num_groups,
                    "storage_block_sizes must have one entry per block table (len(block_tables) = ", num_groups,
                    "), got ", storage_block_sizes.size());
  const int64_t num_tokens = num_actual_tokens, rule = past_max_model_len;
  check_positive(num_steps, "num_steps");
  check_non_negative(num_tokens, "num_actual_tokens");
  TORCH_CHECK_VALUE(num_input_tokens >= num_tokens, "num_input_tokens must be >= num_actual_tokens = ", num_tokens,
                    ", got ", num_input_tokens);
  check_max_model_len(max_model_len, max_model_len_tensor, anchor_of(positions, "positions"));
  TORCH_CHECK_VALUE(rule == 0 || rule == 1, "past_max_model_len must be \"reset\" (0) or \"clamp\" (1), got ", rule);
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);
  check_cp_rank(split_size, split_rank, "split_size", "split_rank");
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1);
  const Anchor anchor = anchor_of(positions, "positions");
  check_tensor(token_indices, "token_indices", {c10::kInt, c10::kLong}, 1, anchor);
  const Int num_reqs = numel_of<Int>(token_indices);
  TORCH_CHECK_VALUE(num_reqs_padded >= num_reqs, "num_reqs_padded must be >= R = token_indices.numel() = ", num_reqs,
                    ", got ", num_reqs_padded);
  check_tensor(query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
  check_entries(query_start_loc, "query_start_loc", num_reqs + 1, "R + 1");
  check_entries(positions, "positions", Int(num_tokens), "num_actual_tokens");
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  check_entries(seq_lens, "seq_lens", num_reqs, "R");
  check_tensor(num_rejected_tokens, "num_rejected_tokens", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(num_rejected_tokens) == num_reqs,
                    "num_rejected_tokens must have R = token_indices.numel() = ", num_reqs, " entries, got ",
                    numel_of<Int>(num_rejected_tokens));
  if (idx_mapping.has_value()) {
    check_tensor(*idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(*idx_mapping) == num_reqs, "idx_mapping must have R = token_indices.numel() = ",
                      num_reqs, " entries, got ", numel_of<Int>(*idx_mapping));
  }
  check_tensor(rope_cos_sin_cache, "rope_cos_sin_cache", {c10::kFloat, c10::kHalf, c10::kBFloat16}, 2, anchor);
  TORCH_CHECK_VALUE(size_of<Int>(rope_cos_sin_cache, 0) >= 1 && rope_cos_sin_cache.is_contiguous(),
                    "rope_cos_sin_cache must be a contiguous [>= 1, rot_dim] tensor, got shape ",
                    rope_cos_sin_cache.sym_sizes(), " strides ", rope_cos_sin_cache.sym_strides());
  const Int rot_dim = size_of<Int>(rope_cos_sin_cache, 1);
  const c10::ScalarType rope_dtype = rope_cos_sin_cache.scalar_type();
  const PassExtents e = pass_extents(num_steps, num_input_tokens, num_reqs_padded, split_size);
  check_rows<Int>(out_positions, "out_positions", {c10::kLong}, {num_steps, e.pad}, kStream, anchor);
  // Named after the cache: a float32 cache with bfloat16 outputs is one mistake, whichever side it is on.
  for (const auto& [out, name] : {std::pair<const at::Tensor*, const char*>{&out_cos_sin, "out_cos_sin"},
                                  {&out_local_cos_sin, "out_local_cos_sin"}}) {
    TORCH_CHECK_VALUE(!out->defined() || out->scalar_type() == rope_dtype, name,
                      " must have rope_cos_sin_cache's dtype ", dtype_name(rope_dtype), ", got ",
                      dtype_name(out->scalar_type()));
  }
  check_rows<Int>(out_cos_sin, "out_cos_sin", {rope_dtype}, {num_steps, e.pad, rot_dim}, kStream, anchor, rot_dim);
  check_rows<Int>(out_local_cos_sin, "out_local_cos_sin", {rope_dtype}, {num_steps, e.per_rank, rot_dim}, kStream,
                  anchor, rot_dim);
  check_rows<Int>(out_seq_lens, "out_seq_lens", {c10::kInt}, {num_steps, num_reqs}, kRequests, anchor);
  const Int reqs_end = size_of<Int>(out_seq_lens, 1);
  check_rows<Int>(out_query_start_loc, "out_query_start_loc", {c10::kInt}, {num_steps, reqs_end + 1}, kRequestRows,
                  anchor);
  check_rows<Int>(out_local_query_start_loc, "out_local_query_start_loc", {c10::kInt}, {num_steps, reqs_end + 1},
                  kRequestRows, anchor);
  check_rows<Int>(out_local_seq_lens, "out_local_seq_lens", {c10::kInt}, {num_steps, reqs_end}, kRequestRows, anchor);
  check_rows<Int>(out_start_pos, "out_start_pos", {c10::kInt}, {num_steps, reqs_end}, kRequestRows, anchor);
  const std::pair<size_t, const char*> lists[] = {{num_blocks.size(), "num_blocks"},
                                                  {target_slot_mappings.size(), "target_slot_mappings"},
                                                  {out_slots.size(), "out_slots"},
                                                  {out_slot_pairs.size(), "out_slot_pairs"}};
  for (const auto& [count, name] : lists) {
    const bool optional = std::string(name) == "num_blocks";
    TORCH_CHECK_VALUE(count == num_groups || (optional && count == 0), name,
                      " must hold one tensor per block table (len(block_tables) = ", num_groups, ")",
                      optional ? ", or none" : "", ", got ", count);
  }
  std::vector<NamedTensor> outputs = {{&out_positions, {"out_positions"}},
                                      {&out_seq_lens, {"out_seq_lens"}},
                                      {&out_query_start_loc, {"out_query_start_loc"}},
                                      {&out_cos_sin, {"out_cos_sin"}},
                                      {&out_local_cos_sin, {"out_local_cos_sin"}},
                                      {&out_local_query_start_loc, {"out_local_query_start_loc"}},
                                      {&out_local_seq_lens, {"out_local_seq_lens"}},
                                      {&out_start_pos, {"out_start_pos"}}};
  std::vector<NamedTensor> inputs = {{&query_start_loc, {"query_start_loc"}}, {&positions, {"positions"}},
                                     {&seq_lens, {"seq_lens"}}, {&token_indices, {"token_indices"}},
                                     {&num_rejected_tokens, {"num_rejected_tokens"}}, {ptr(idx_mapping), {"idx_mapping"}},
                                     {&rope_cos_sin_cache, {"rope_cos_sin_cache"}},
                                     {ptr(max_model_len_tensor), {"max_model_len_tensor"}}};
  // Only passes k >= 2 take a slot per request (num_reqs_padded of them); one pass takes none.
  const Int later_reqs = num_steps > 1 ? num_reqs : Int(0);
  const Int later_padded = Int(num_steps > 1 ? num_reqs_padded : 0);
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t gi = static_cast<int64_t>(g);
    const GroupSettings::Cp cp = settings.cp(g);
    check_rows<Int>(out_slots[g], ArgName{"out_slots", gi}, {c10::kLong, c10::kInt}, {num_steps, e.slot_entries},
                    kStream, anchor);
    SlotMappingArgNames names = SlotMappingArgNames::of_group(gi);
    names.out = ArgName{"out_slots", gi};
    // Row 0 of out_slots (each pass's row has its entries) is the group's slot mapping.
    check_slot_mapping_layout<Int>(block_tables[g], block_sizes[g], blocks_per_kv_block[g], cp.world_size, cp.rank,
                                   cp.interleave, later_reqs, later_padded, size_of<Int>(out_slots[g], 1), &anchor,
                                   names);
    if (!num_blocks.empty()) {
      check_num_blocks<Int>(num_blocks[g], ArgName{"num_blocks", gi}, block_tables[g], names.block_table, &anchor);
      inputs.push_back({&num_blocks[g], {"num_blocks", gi}});
    }
    check_positive(storage_block_sizes[g], ArgName{"storage_block_sizes", gi});
    check_tensor(target_slot_mappings[g], ArgName{"target_slot_mappings", gi}, {c10::kLong, c10::kInt}, 1, anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(target_slot_mappings[g]) >= num_tokens, "target_slot_mappings[", g,
                      "] must have at least num_actual_tokens = ", num_tokens, " entries, got ",
                      numel_of<Int>(target_slot_mappings[g]));
    check_rows<Int>(out_slot_pairs[g], ArgName{"out_slot_pairs", gi}, {c10::kLong, c10::kInt},
                    {num_steps, e.slot_entries, 2}, kStream, anchor, Int(2));
    outputs.push_back({&out_slots[g], {"out_slots", gi}});
    outputs.push_back({&out_slot_pairs[g], {"out_slot_pairs", gi}});
    inputs.push_back({&block_tables[g], {"block_tables", gi}});
    inputs.push_back({&target_slot_mappings[g], {"target_slot_mappings", gi}});
  }
  check_outputs_alias_nothing(outputs, inputs);
}

void advance_draft_steps(const at::Tensor& query_start_loc, const at::Tensor& positions, const at::Tensor& seq_lens,
                         const at::Tensor& token_indices, const at::Tensor& num_rejected_tokens,
                         const OptTensor& idx_mapping, at::TensorList block_tables, at::TensorList num_blocks,
                         at::TensorList target_slot_mappings, const at::Tensor& rope_cos_sin_cache,
                         const at::Tensor& out_positions, const at::Tensor& out_seq_lens,
                         const at::Tensor& out_query_start_loc, const at::Tensor& out_cos_sin,
                         const at::Tensor& out_local_cos_sin, const at::Tensor& out_local_query_start_loc,
                         const at::Tensor& out_local_seq_lens, const at::Tensor& out_start_pos,
                         at::TensorList out_slots, at::TensorList out_slot_pairs, int64_t num_steps,
                         int64_t num_actual_tokens, int64_t num_input_tokens, int64_t num_reqs_padded,
                         int64_t max_model_len, int64_t past_max_model_len, int64_t split_size, int64_t split_rank,
                         int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave, c10::IntArrayRef block_sizes,
                         c10::IntArrayRef blocks_per_kv_block, const c10::List<bool>& cp_sharded,
                         const c10::List<bool>& slot_mapping_enabled, c10::IntArrayRef storage_block_sizes,
                         const OptTensor& max_model_len_tensor) {
  check_advance_draft_steps<int64_t>(
      query_start_loc, positions, seq_lens, token_indices, num_rejected_tokens, idx_mapping, block_tables, num_blocks,
      target_slot_mappings, rope_cos_sin_cache, out_positions, out_seq_lens, out_query_start_loc, out_cos_sin,
      out_local_cos_sin, out_local_query_start_loc, out_local_seq_lens, out_start_pos, out_slots, out_slot_pairs,
      num_steps, num_actual_tokens, num_input_tokens, num_reqs_padded, max_model_len, past_max_model_len, split_size,
      split_rank, cp_world_size, cp_rank, cp_interleave, block_sizes, blocks_per_kv_block, cp_sharded,
      slot_mapping_enabled, storage_block_sizes, max_model_len_tensor);
  const int64_t limit = max_model_len_value(max_model_len, max_model_len_tensor);
  const size_t num_groups = block_tables.size();
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   slot_mapping_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  const int64_t num_tokens = num_actual_tokens, rule = past_max_model_len;
  const int64_t num_reqs = token_indices.numel();
  const int64_t rot_dim = rope_cos_sin_cache.size(1);
  const int64_t reqs_end = out_seq_lens.size(1);
  std::vector<kernels::DraftStepsGroup> groups;
  groups.reserve(num_groups);
  std::vector<at::Tensor> first_rows;
  first_rows.reserve(num_groups);
  const int64_t later_reqs = num_steps > 1 ? num_reqs : 0, later_padded = num_steps > 1 ? num_reqs_padded : 0;
  for (size_t g = 0; g < num_groups; ++g) {
    const GroupSettings::Cp cp = settings.cp(g);
    first_rows.push_back(out_slots[g].select(0, 0));
    const at::Tensor& first = first_rows.back();
    kernels::SlotMappingShape shape = slot_mapping_shape(block_tables[g], block_sizes[g], blocks_per_kv_block[g],
                                                         cp.world_size, cp.rank, cp.interleave, num_reqs, later_reqs,
                                                         later_padded);
    if (!num_blocks.empty()) shape.num_blocks = num_blocks[g].data_ptr<int32_t>();
    const bool wide = first.scalar_type() == c10::kLong;
    const at::Tensor& target = target_slot_mappings[g];
    const bool pairs_wide = out_slot_pairs[g].scalar_type() == c10::kLong;
    groups.push_back(kernels::DraftStepsGroup{
        kernels::DraftStepGroup(block_tables[g].data_ptr<int32_t>(), wide ? first.data_ptr<int64_t>() : nullptr,
                                wide ? nullptr : first.data_ptr<int32_t>(), wide, shape, settings.enabled(g),
                                num_reqs_padded),
        target.scalar_type() == c10::kLong ? target.data_ptr<int64_t>() : nullptr,
        target.scalar_type() == c10::kLong ? nullptr : target.data_ptr<int32_t>(), out_slots[g].stride(0),
        pairs_wide ? out_slot_pairs[g].data_ptr<int64_t>() : nullptr,
        pairs_wide ? nullptr : out_slot_pairs[g].data_ptr<int32_t>(), out_slot_pairs[g].stride(0),
        storage_block_sizes[g]});
  }

  kernels::DraftStepsShape s;
  s.num_steps = num_steps;
  s.num_reqs = num_reqs;
  s.num_tokens = num_tokens;
  s.num_input_tokens = num_input_tokens;
  s.num_reqs_padded = num_reqs_padded;
  s.num_positions = positions.numel();
  s.max_model_len = limit;
  s.clamp = rule == 1;
  s.split_size = split_size;
  s.split_rank = split_rank;
  s.reqs_end = reqs_end;
  s.positions_stride = out_positions.stride(0);
  s.seq_lens_stride = out_seq_lens.stride(0);
  s.query_start_loc_stride = out_query_start_loc.stride(0);
  s.local_query_start_loc_stride = out_local_query_start_loc.stride(0);
  s.local_seq_lens_stride = out_local_seq_lens.stride(0);
  s.start_pos_stride = out_start_pos.stride(0);
  const int64_t element = rope_cos_sin_cache.element_size();
  s.rope = static_cast<const uint8_t*>(rope_cos_sin_cache.data_ptr());
  s.rope_rows = rope_cos_sin_cache.size(0);
  s.row_bytes = rot_dim * element;
  s.cos_sin = static_cast<uint8_t*>(out_cos_sin.data_ptr());
  s.cos_sin_stride = out_cos_sin.stride(0) * element;
  s.local_cos_sin = static_cast<uint8_t*>(out_local_cos_sin.data_ptr());
  s.local_cos_sin_stride = out_local_cos_sin.stride(0) * element;
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* rejected = num_rejected_tokens.data_ptr<int32_t>();
  with_idx_mapping(idx_mapping, [&](auto* idx) {
    using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    AT_DISPATCH_INDEX_TYPES(token_indices.scalar_type(), "advance_draft_steps", [&] {
      using TokT = index_t;
      const TokT* tokens = token_indices.data_ptr<TokT>();
      AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "advance_draft_steps", [&] {
        const index_t* pos = positions.data_ptr<index_t>();
        check_values<index_t, TokT, IdxT>(qsl, pos, lens, tokens, rejected, idx, groups, s);
        kernels::advance_draft_steps<index_t, TokT, IdxT>(
            qsl, pos, lens, tokens, rejected, idx, out_positions.data_ptr<int64_t>(), out_seq_lens.data_ptr<int32_t>(),
            out_query_start_loc.data_ptr<int32_t>(), out_local_query_start_loc.data_ptr<int32_t>(),
            out_local_seq_lens.data_ptr<int32_t>(), out_start_pos.data_ptr<int32_t>(), groups.data(),
            static_cast<int64_t>(num_groups), s);
      });
    });
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // Row k - 1 of every output is pass k; storage_block_sizes: each group's block size in its KV
  // cache (the slot pairs' format); max_model_len -1: max_model_len_tensor (0-D, read on the
  // device) gives it.
  m.def(
      "advance_draft_steps(Tensor query_start_loc, Tensor positions, Tensor seq_lens, Tensor token_indices, "
      "Tensor num_rejected_tokens, Tensor? idx_mapping, Tensor[] block_tables, Tensor[] num_blocks, "
      "Tensor[] target_slot_mappings, Tensor rope_cos_sin_cache, Tensor(a!) out_positions, Tensor(b!) out_seq_lens, "
      "Tensor(c!) out_query_start_loc, Tensor(d!) out_cos_sin, Tensor(e!) out_local_cos_sin, "
      "Tensor(f!) out_local_query_start_loc, Tensor(g!) out_local_seq_lens, Tensor(h!) out_start_pos, "
      "Tensor(i!)[] out_slots, Tensor(j!)[] out_slot_pairs, int num_steps, int num_actual_tokens, "
      "int num_input_tokens, int num_reqs_padded, int max_model_len, int past_max_model_len, int split_size, "
      "int split_rank, int cp_world_size, int cp_rank, int cp_interleave, int[] block_sizes, "
      "int[] blocks_per_kv_block, bool[] cp_sharded, bool[] slot_mapping_enabled, int[] storage_block_sizes, "
      "Tensor? max_model_len_tensor=None) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("advance_draft_steps", &advance_draft_steps); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("advance_draft_steps", &check_advance_draft_steps<c10::SymInt>); }

}  // namespace specops::cpu
