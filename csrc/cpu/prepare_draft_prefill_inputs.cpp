// prepare_draft_prefill_inputs: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks, the values (the query layout, the rejected counts, the request
// rows, every buffer's size, and the post-update part's: cpu/post_update_checks.h), then the
// post-update part's writes when given, then the draft prefill's inputs.
#include <torch/library.h>

#include "cpu/post_update_checks.h"
#include "cpu/step_checks.h"
#include "kernels/prepare_draft_prefill_inputs.h"

namespace specops::cpu {
namespace {

constexpr const char* kWhatR = "R = idx_mapping.numel()";
constexpr const char* kWhatR1 = "R + 1 (R = idx_mapping.numel())";

kernels::IntSpan span_of(const at::Tensor& t) {
  return {t.data_ptr(), t.scalar_type() == c10::kLong, t.numel()};
}

// A token buffer must hold the batch's T = query_start_loc[R] tokens.
void check_holds_tokens(const at::Tensor& t, const char* name, int64_t num_tokens) {
  TORCH_CHECK_VALUE(num_tokens <= t.numel(), "query_start_loc[R] = ", num_tokens, " tokens are past the ", t.numel(),
                    " entries of ", name);
}

// The post-update part (sampled_tokens given): post_update_after_sampling's arguments, the batch's
// under this op's names (idx_mapping, query_start_loc, num_sampled, num_rejected,
// last_sampled_tokens), the request state's its own; no drafts to store.
struct UpdatePart {
  OptTensor query_start_loc, num_sampled, num_rejected, last_sampled_tokens;
  const OptTensor none;

  UpdatePart(const at::Tensor& qsl, const at::Tensor& sampled, const at::Tensor& rejected, const at::Tensor& last)
      : query_start_loc(qsl), num_sampled(sampled), num_rejected(rejected), last_sampled_tokens(last) {}

  PostUpdateArgs args(const at::Tensor& idx_mapping, const at::Tensor& num_computed_tokens,
                      const OptTensor& sampled_tokens, const OptTensor& all_token_ids, const OptTensor& total_len,
                      const OptTensor& output_bin_counts) const {
    return {idx_mapping,  num_computed_tokens, query_start_loc, sampled_tokens, num_sampled, num_rejected,
            last_sampled_tokens, all_token_ids, total_len,    output_bin_counts, none,     none};
  }
};

// The part is given whole (sampled_tokens with num_computed_tokens, all_token_ids and total_len;
// output_bin_counts optional) or not at all.
void check_update_part_given(const OptTensor& num_computed_tokens, const OptTensor& sampled_tokens,
                             const OptTensor& all_token_ids, const OptTensor& total_len,
                             const OptTensor& output_bin_counts) {
  const bool given = sampled_tokens.has_value();
  for (const auto& [part, name] : {std::pair{&num_computed_tokens, "num_computed_tokens"},
                                   std::pair{&all_token_ids, "all_token_ids"}, std::pair{&total_len, "total_len"}}) {
    TORCH_CHECK_VALUE(part->has_value() == given, name,
                      given ? " must be given with sampled_tokens (the post-update part)"
                            : " is part of the post-update: it needs sampled_tokens");
  }
  TORCH_CHECK_VALUE(given || !output_bin_counts.has_value(),
                    "output_bin_counts is part of the post-update: it needs sampled_tokens");
}

template <typename Int>
void check_prepare_draft_prefill_inputs(const at::Tensor& target_input_ids, const at::Tensor& target_positions,
                                        const at::Tensor& idx_mapping, const at::Tensor& query_start_loc,
                                        const at::Tensor& seq_lens, const at::Tensor& num_sampled,
                                        const at::Tensor& num_rejected, const at::Tensor& last_sampled_tokens,
                                        const at::Tensor& next_prefill_tokens, const at::Tensor& input_ids,
                                        const at::Tensor& positions, const at::Tensor& out_query_start_loc,
                                        const at::Tensor& out_seq_lens, const at::Tensor& last_token_indices,
                                        const OptTensor& current_draft_step, const OptTensor& request_idx_mapping,
                                        const OptTensor& num_computed_tokens, const OptTensor& sampled_tokens,
                                        const OptTensor& all_token_ids, const OptTensor& total_len,
                                        const OptTensor& output_bin_counts) {
  check_tensor(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(idx_mapping, "idx_mapping");
  const Int num_reqs = numel_of<Int>(idx_mapping);
  check_tensor(target_input_ids, "target_input_ids", {c10::kInt, c10::kLong}, 1, anchor);
  check_tensor(target_positions, "target_positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_tensor(query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
  check_entries(query_start_loc, "query_start_loc", num_reqs + 1, kWhatR1);
  for (const auto& [t, name] : {std::pair{&seq_lens, "seq_lens"}, std::pair{&num_sampled, "num_sampled"},
                                std::pair{&num_rejected, "num_rejected"}}) {
    check_tensor(*t, name, {c10::kInt}, 1, anchor);
    check_entries(*t, name, num_reqs, kWhatR);
  }
  TORCH_CHECK_VALUE(last_sampled_tokens.dim() == 1 || last_sampled_tokens.dim() == 2,
                    "last_sampled_tokens must be [M] or [M, 1], got shape ", last_sampled_tokens.sym_sizes());
  check_tensor(last_sampled_tokens, "last_sampled_tokens", {c10::kInt, c10::kLong}, last_sampled_tokens.dim(), anchor);
  TORCH_CHECK_VALUE(last_sampled_tokens.dim() == 1 || size_of<Int>(last_sampled_tokens, 1) == 1,
                    "last_sampled_tokens must be [M] or [M, 1], got shape ", last_sampled_tokens.sym_sizes());
  TORCH_CHECK_VALUE(next_prefill_tokens.dim() == 1 || next_prefill_tokens.dim() == 2,
                    "next_prefill_tokens must be [M] or [L, M], got shape ", next_prefill_tokens.sym_sizes());
  check_tensor(next_prefill_tokens, "next_prefill_tokens", {c10::kInt}, next_prefill_tokens.dim(), anchor);
  TORCH_CHECK_VALUE(next_prefill_tokens.dim() == 1 || size_of<Int>(next_prefill_tokens, 0) >= 1,
                    "next_prefill_tokens must be [M] or [L, M] with L >= 1, got shape ", next_prefill_tokens.sym_sizes());
  check_tensor(input_ids, "input_ids", {c10::kInt, c10::kLong}, 1, anchor);
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_tensor(out_query_start_loc, "out_query_start_loc", {c10::kInt}, 1, anchor);
  check_entries(out_query_start_loc, "out_query_start_loc", num_reqs + 1, kWhatR1);
  check_tensor(out_seq_lens, "out_seq_lens", {c10::kInt}, 1, anchor);
  check_entries(out_seq_lens, "out_seq_lens", num_reqs, kWhatR);
  check_tensor(last_token_indices, "last_token_indices", {c10::kLong, c10::kInt}, 1, anchor);
  check_entries(last_token_indices, "last_token_indices", num_reqs, kWhatR);
  if (current_draft_step.has_value()) {
    TORCH_CHECK_VALUE(current_draft_step->dim() <= 1, "current_draft_step must be 0-D or [1], got shape ",
                      current_draft_step->sym_sizes());
    check_tensor(*current_draft_step, "current_draft_step", {c10::kLong, c10::kInt}, current_draft_step->dim(), anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(*current_draft_step) == 1, "current_draft_step must be 0-D or [1], got shape ",
                      current_draft_step->sym_sizes());
  }
  if (request_idx_mapping.has_value()) {
    check_tensor(*request_idx_mapping, "request_idx_mapping", {c10::kLong, c10::kInt}, 1, anchor);
    check_entries(*request_idx_mapping, "request_idx_mapping", num_reqs, kWhatR);
  }
  check_update_part_given(num_computed_tokens, sampled_tokens, all_token_ids, total_len, output_bin_counts);
  const bool update = sampled_tokens.has_value();
  // last_sampled_tokens is written by the post-update part (each request reads its own row after
  // it) and marked written in the schema: an output on every call.
  c10::SmallVector<NamedTensor, 12> outputs{
      {&input_ids, {"input_ids"}},           {&positions, {"positions"}},
      {&out_query_start_loc, {"out_query_start_loc"}}, {&out_seq_lens, {"out_seq_lens"}},
      {&last_token_indices, {"last_token_indices"}}, {ptr(current_draft_step), {"current_draft_step"}},
      {ptr(request_idx_mapping), {"request_idx_mapping"}}, {&last_sampled_tokens, {"last_sampled_tokens"}}};
  c10::SmallVector<NamedTensor, 10> inputs{
      {&target_input_ids, {"target_input_ids"}}, {&target_positions, {"target_positions"}},
      {&idx_mapping, {"idx_mapping"}},           {&query_start_loc, {"query_start_loc"}},
      {&seq_lens, {"seq_lens"}},                 {&num_sampled, {"num_sampled"}},
      {&num_rejected, {"num_rejected"}},         {&next_prefill_tokens, {"next_prefill_tokens"}},
      {ptr(sampled_tokens), {"sampled_tokens"}}};
  if (update) {
    const UpdatePart part(query_start_loc, num_sampled, num_rejected, last_sampled_tokens);
    const PostUpdateArgs args =
        part.args(idx_mapping, *num_computed_tokens, sampled_tokens, all_token_ids, total_len, output_bin_counts);
    check_post_update<Int>(args, /*outputs_apart=*/false);
    for (const NamedTensor& output : args.outputs()) {
      // last_sampled_tokens (the part's, the op's own) is listed above.
      if (output.tensor != nullptr && output.tensor != &*part.last_sampled_tokens) outputs.push_back(output);
    }
  }
  check_outputs_alias_nothing(outputs, inputs);
}

void prepare_draft_prefill_inputs(const at::Tensor& target_input_ids, const at::Tensor& target_positions,
                                  const at::Tensor& idx_mapping, const at::Tensor& query_start_loc,
                                  const at::Tensor& seq_lens, const at::Tensor& num_sampled,
                                  const at::Tensor& num_rejected, const at::Tensor& last_sampled_tokens,
                                  const at::Tensor& next_prefill_tokens, const at::Tensor& input_ids,
                                  const at::Tensor& positions, const at::Tensor& out_query_start_loc,
                                  const at::Tensor& out_seq_lens, const at::Tensor& last_token_indices,
                                  const OptTensor& current_draft_step, const OptTensor& request_idx_mapping,
                                  const OptTensor& num_computed_tokens, const OptTensor& sampled_tokens,
                                  const OptTensor& all_token_ids, const OptTensor& total_len,
                                  const OptTensor& output_bin_counts) {
  check_prepare_draft_prefill_inputs<int64_t>(target_input_ids, target_positions, idx_mapping, query_start_loc,
                                              seq_lens, num_sampled, num_rejected, last_sampled_tokens,
                                              next_prefill_tokens, input_ids, positions, out_query_start_loc,
                                              out_seq_lens, last_token_indices, current_draft_step,
                                              request_idx_mapping, num_computed_tokens, sampled_tokens, all_token_ids,
                                              total_len, output_bin_counts);
  // The post-update part's values, checked before anything is written (its writes come first).
  const UpdatePart part(query_start_loc, num_sampled, num_rejected, last_sampled_tokens);
  std::optional<PostUpdateArgs> update_args;
  std::optional<PostUpdateCall> update;
  if (sampled_tokens.has_value()) {
    update_args.emplace(
        part.args(idx_mapping, *num_computed_tokens, sampled_tokens, all_token_ids, total_len, output_bin_counts));
    update.emplace(PostUpdateCall::checked(*update_args));
  }
  const int64_t num_reqs = idx_mapping.numel();
  // Values, all before the first write.
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(qsl[0] == 0, "query_start_loc[0] must be 0, got ", qsl[0]);
  for (int64_t r = 0; r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(qsl[r + 1] >= qsl[r], "query_start_loc must be non-decreasing, but query_start_loc[", r + 1,
                      "] = ", qsl[r + 1], " < query_start_loc[", r, "] = ", qsl[r]);
  }
  const int64_t num_tokens = qsl[num_reqs];
  check_holds_tokens(target_input_ids, "target_input_ids", num_tokens);
  check_holds_tokens(target_positions, "target_positions", num_tokens);
  check_holds_tokens(input_ids, "input_ids", num_tokens);
  check_holds_tokens(positions, "positions", num_tokens);
  const int32_t* rejected = num_rejected.data_ptr<int32_t>();
  for (int64_t r = 0; r < num_reqs; ++r) {
    // The draft keeps at least one token of every request: the one its next token replaces.
    const int64_t query_len = static_cast<int64_t>(qsl[r + 1]) - qsl[r];
    TORCH_CHECK_VALUE(rejected[r] >= 0 && rejected[r] <= query_len - 1, "num_rejected[", r, "] = ", rejected[r],
                      " must be in [0, query length - 1 = ", query_len - 1, "] (query_start_loc)");
  }
  kernels::DraftPrefillShape shape;
  shape.num_reqs = num_reqs;
  shape.num_rows = std::min(last_sampled_tokens.size(0), next_prefill_tokens.size(next_prefill_tokens.dim() - 1));
  shape.last_sampled_stride = last_sampled_tokens.stride(0);
  const kernels::IntSpan idx = span_of(idx_mapping);
  for (int64_t r = 0; r < num_reqs; ++r) {
    const int64_t row = idx.get(r);
    TORCH_CHECK_VALUE(row >= 0 && row < shape.num_rows, "idx_mapping[", r, "] = ", row, " is outside the ",
                      shape.num_rows, " request rows of last_sampled_tokens and next_prefill_tokens");
  }

  if (update.has_value()) update->run();  // the prefill then reads the updated last_sampled_tokens
  const kernels::IntSpan step = current_draft_step.has_value() ? span_of(*current_draft_step) : kernels::IntSpan{};
  const kernels::IntSpan mapping = request_idx_mapping.has_value() ? span_of(*request_idx_mapping) : kernels::IntSpan{};
  kernels::prepare_draft_prefill_inputs(
      span_of(target_input_ids), span_of(target_positions), idx, qsl, seq_lens.data_ptr<int32_t>(),
      num_sampled.data_ptr<int32_t>(), rejected, span_of(last_sampled_tokens), next_prefill_tokens.data_ptr<int32_t>(),
      span_of(input_ids), span_of(positions), out_query_start_loc.data_ptr<int32_t>(), out_query_start_loc.numel(),
      out_seq_lens.data_ptr<int32_t>(), out_seq_lens.numel(), span_of(last_token_indices),
      current_draft_step.has_value() ? &step : nullptr, request_idx_mapping.has_value() ? &mapping : nullptr, shape);
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // The draft model's prefill inputs after a target step (MRV2's prepare_prefill_inputs), with the
  // drafter's copy of the request mapping; every output padded to its own end. With sampled_tokens,
  // first post_update_after_sampling of the batch (its request state under its names; the prefill
  // then reads the updated last_sampled_tokens), in the same call.
  m.def(
      "prepare_draft_prefill_inputs(Tensor target_input_ids, Tensor target_positions, Tensor idx_mapping, "
      "Tensor query_start_loc, Tensor seq_lens, Tensor num_sampled, Tensor num_rejected, "
      "Tensor(h!) last_sampled_tokens, Tensor next_prefill_tokens, Tensor(a!) input_ids, Tensor(b!) positions, "
      "Tensor(c!) out_query_start_loc, Tensor(d!) out_seq_lens, Tensor(e!) last_token_indices, "
      "Tensor(f!)? current_draft_step, Tensor(g!)? request_idx_mapping, Tensor(i!)? num_computed_tokens=None, "
      "Tensor? sampled_tokens=None, Tensor(j!)? all_token_ids=None, Tensor(k!)? total_len=None, "
      "Tensor(l!)? output_bin_counts=None) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("prepare_draft_prefill_inputs", &prepare_draft_prefill_inputs); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("prepare_draft_prefill_inputs", &check_prepare_draft_prefill_inputs<c10::SymInt>);
}

}  // namespace specops::cpu
