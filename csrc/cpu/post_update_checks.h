#pragma once
// post_update_after_sampling's checks and its host body, shared with prepare_draft_prefill_inputs'
// post-update part (the same arguments under the same names): the metadata (check_post_update, on
// every path), then on the host the values (PostUpdateCall::checked, before anything is written)
// and the writes (PostUpdateCall::run).
#include <ATen/Dispatch.h>

#include <algorithm>
#include <vector>

#include "cpu/step_checks.h"
#include "kernels/post_update_after_sampling.h"

namespace specops::cpu {

// The post-update arguments, as both ops name them.
struct PostUpdateArgs {
  const at::Tensor& idx_mapping;
  const at::Tensor& num_computed_tokens;
  const OptTensor& query_start_loc;
  const OptTensor& sampled_tokens;
  const OptTensor& num_sampled;
  const OptTensor& num_rejected;
  const OptTensor& last_sampled_tokens;
  const OptTensor& all_token_ids;
  const OptTensor& total_len;
  const OptTensor& output_bin_counts;
  const OptTensor& draft_tokens;
  const OptTensor& draft_tokens_out;

  // The outputs, and the inputs read while they are written.
  c10::SmallVector<NamedTensor, 6> outputs() const {
    return {{&num_computed_tokens, {"num_computed_tokens"}}, {ptr(last_sampled_tokens), {"last_sampled_tokens"}},
            {ptr(all_token_ids), {"all_token_ids"}},         {ptr(total_len), {"total_len"}},
            {ptr(output_bin_counts), {"output_bin_counts"}}, {ptr(draft_tokens_out), {"draft_tokens_out"}}};
  }
  c10::SmallVector<NamedTensor, 6> inputs() const {
    return {{&idx_mapping, {"idx_mapping"}},         {ptr(query_start_loc), {"query_start_loc"}},
            {ptr(sampled_tokens), {"sampled_tokens"}}, {ptr(num_sampled), {"num_sampled"}},
            {ptr(num_rejected), {"num_rejected"}},   {ptr(draft_tokens), {"draft_tokens"}}};
  }
};

// The metadata (every tensor on idx_mapping's device). outputs_apart: whether the outputs'
// aliasing is checked here (prepare_draft_prefill_inputs checks them with its own instead).
template <typename Int>
void check_post_update(const PostUpdateArgs& a, bool outputs_apart) {
  const at::Tensor& idx_mapping = a.idx_mapping;
  const at::Tensor& num_computed_tokens = a.num_computed_tokens;
  const OptTensor& query_start_loc = a.query_start_loc;
  const OptTensor& sampled_tokens = a.sampled_tokens;
  const OptTensor& num_sampled = a.num_sampled;
  const OptTensor& num_rejected = a.num_rejected;
  const OptTensor& last_sampled_tokens = a.last_sampled_tokens;
  const OptTensor& all_token_ids = a.all_token_ids;
  const OptTensor& total_len = a.total_len;
  const OptTensor& output_bin_counts = a.output_bin_counts;
  const OptTensor& draft_tokens = a.draft_tokens;
  const OptTensor& draft_tokens_out = a.draft_tokens_out;
  check_tensor(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(idx_mapping, "idx_mapping");
  const Int num_reqs = numel_of<Int>(idx_mapping);
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1, anchor);
  const int given = sampled_tokens.has_value() + num_sampled.has_value() + num_rejected.has_value() +
                    last_sampled_tokens.has_value() + all_token_ids.has_value() + total_len.has_value();
  TORCH_CHECK_VALUE(given == 0 || given == 6,
                    "sampled_tokens, num_sampled, num_rejected, last_sampled_tokens, all_token_ids and total_len "
                    "must be given together (sampling mode) or not at all (pooling mode), got ", given, " of them");
  const bool sampling = given == 6;
  if (query_start_loc.has_value()) {
    check_tensor(*query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
    check_entries(*query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = idx_mapping.numel())");
  } else {
    TORCH_CHECK_VALUE(sampling, "query_start_loc is required in pooling mode (no sampled_tokens)");
  }
  if (sampling) {
    check_tensor(*sampled_tokens, "sampled_tokens", {c10::kInt, c10::kLong}, 2, anchor);
    TORCH_CHECK_VALUE(size_of<Int>(*sampled_tokens, 0) >= num_reqs, "sampled_tokens must have at least R = ", num_reqs,
                      " rows, got ", size_of<Int>(*sampled_tokens, 0));
    check_tensor(*num_sampled, "num_sampled", {c10::kInt}, 1, anchor);
    check_entries(*num_sampled, "num_sampled", num_reqs, "R = idx_mapping.numel()");
    check_tensor(*num_rejected, "num_rejected", {c10::kInt}, 1, anchor);
    check_entries(*num_rejected, "num_rejected", num_reqs, "R = idx_mapping.numel()");
    TORCH_CHECK_VALUE(last_sampled_tokens->dim() == 1 || (last_sampled_tokens->dim() == 2 &&
                                                          size_of<Int>(*last_sampled_tokens, 1) == 1),
                      "last_sampled_tokens must be [M] or [M, 1], got shape ", last_sampled_tokens->sym_sizes());
    check_tensor(*last_sampled_tokens, "last_sampled_tokens", {c10::kInt, c10::kLong}, last_sampled_tokens->dim(), anchor);
    check_tensor(*all_token_ids, "all_token_ids", {c10::kInt}, 2, anchor);
    check_rows_disjoint(*all_token_ids, "all_token_ids");
    check_tensor(*total_len, "total_len", {c10::kInt}, 1, anchor);
    if (output_bin_counts.has_value()) {
      check_tensor(*output_bin_counts, "output_bin_counts", {c10::kInt}, 2, anchor);
      check_rows_disjoint(*output_bin_counts, "output_bin_counts");
    }
  } else {
    TORCH_CHECK_VALUE(!output_bin_counts.has_value() && !draft_tokens.has_value() && !draft_tokens_out.has_value(),
                      "output_bin_counts, draft_tokens and draft_tokens_out need sampling mode (sampled_tokens)");
  }
  TORCH_CHECK_VALUE(!draft_tokens.has_value() || draft_tokens_out.has_value(),
                    "draft_tokens needs draft_tokens_out (the buffer its rows are stored into)");
  if (draft_tokens_out.has_value() && !draft_tokens.has_value()) {
    // vLLM's post_update is handed its draft buffer on every call and the received drafts only on
    // a non-last pipeline rank: without drafts nothing is stored there.
    check_tensor(*draft_tokens_out, "draft_tokens_out", {c10::kInt, c10::kLong}, 2, anchor);
  }
  if (draft_tokens.has_value()) {
    check_tensor(*draft_tokens, "draft_tokens", {c10::kInt, c10::kLong}, 2, anchor);
    check_tensor(*draft_tokens_out, "draft_tokens_out", {draft_tokens->scalar_type()}, 2, anchor);
    check_rows_disjoint(*draft_tokens_out, "draft_tokens_out");
    TORCH_CHECK_VALUE(size_of<Int>(*draft_tokens, 0) >= num_reqs, "draft_tokens must have at least R = ", num_reqs,
                      " rows, got ", size_of<Int>(*draft_tokens, 0));
    TORCH_CHECK_VALUE(size_of<Int>(*draft_tokens, 1) == size_of<Int>(*draft_tokens_out, 1),
                      "draft_tokens_out must have the ", size_of<Int>(*draft_tokens, 1), " columns of draft_tokens, got ",
                      size_of<Int>(*draft_tokens_out, 1));
  }
  if (outputs_apart) check_outputs_alias_nothing(a.outputs(), a.inputs());
}

// The host call: the values checked when it is made (nothing written yet), the writes by run().
class PostUpdateCall {
 public:
  static PostUpdateCall checked(const PostUpdateArgs& a) {
    PostUpdateCall call(a);
    call.check_values();
    return call;
  }

  void run() const {
    const PostUpdateArgs& a = a_;
    const kernels::PostUpdateShape& s = shape_;
    const bool sampling = s.sampling;
    with_index_type(a.idx_mapping, [&](auto* idx) {
      using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
      const at::ScalarType sampled_type = sampling ? a.sampled_tokens->scalar_type() : c10::kLong;
      const at::ScalarType last_type = sampling ? a.last_sampled_tokens->scalar_type() : c10::kLong;
      const at::ScalarType draft_type = s.has_drafts ? a.draft_tokens->scalar_type() : c10::kLong;
      AT_DISPATCH_INDEX_TYPES(sampled_type, "post_update_after_sampling", [&] {
        using SampledT = index_t;
        AT_DISPATCH_INDEX_TYPES(last_type, "post_update_after_sampling", [&] {
          using LastT = index_t;
          AT_DISPATCH_INDEX_TYPES(draft_type, "post_update_after_sampling", [&] {
            kernels::post_update_after_sampling<IdxT, SampledT, LastT, index_t>(
                idx, a.num_computed_tokens.data_ptr<int32_t>(),
                a.query_start_loc.has_value() ? a.query_start_loc->data_ptr<int32_t>() : nullptr,
                sampling ? a.sampled_tokens->data_ptr<SampledT>() : nullptr,
                sampling ? a.num_sampled->data_ptr<int32_t>() : nullptr,
                sampling ? a.num_rejected->data_ptr<int32_t>() : nullptr,
                sampling ? a.last_sampled_tokens->data_ptr<LastT>() : nullptr,
                sampling ? a.all_token_ids->data_ptr<int32_t>() : nullptr,
                sampling ? a.total_len->data_ptr<int32_t>() : nullptr,
                s.has_bins ? a.output_bin_counts->data_ptr<int32_t>() : nullptr,
                s.has_drafts ? a.draft_tokens->data_ptr<index_t>() : nullptr,
                s.has_drafts ? a.draft_tokens_out->data_ptr<index_t>() : nullptr, s);
          });
        });
      });
    });
  }

 private:
  explicit PostUpdateCall(const PostUpdateArgs& a) : a_(a) {}

  // Repeated rows, kept counts, the token table's width, the bins' vocabulary.
  void check_values() {
    const PostUpdateArgs& a = a_;
    const int64_t num_reqs = a.idx_mapping.numel();
    const bool sampling = a.sampled_tokens.has_value();
    int64_t num_rows = a.num_computed_tokens.numel();
    if (sampling) {
      num_rows = std::min({num_rows, a.last_sampled_tokens->size(0), a.all_token_ids->size(0), a.total_len->numel()});
      if (a.output_bin_counts.has_value()) num_rows = std::min(num_rows, a.output_bin_counts->size(0));
    }
    if (a.draft_tokens.has_value()) num_rows = std::min(num_rows, a.draft_tokens_out->size(0));
    kernels::PostUpdateShape& s = shape_;
    s.num_reqs = num_reqs;
    s.num_rows = num_rows;
    s.has_query_start_loc = a.query_start_loc.has_value();
    s.sampling = sampling;
    if (sampling) {
      s.sampled_cols = a.sampled_tokens->size(1);
      s.sampled_stride = a.sampled_tokens->stride(0);
      s.last_stride = a.last_sampled_tokens->stride(0);
      s.token_cols = a.all_token_ids->size(1);
      s.token_stride = a.all_token_ids->stride(0);
      s.has_bins = a.output_bin_counts.has_value();
      s.vocab_size = s.has_bins ? a.output_bin_counts->size(1) : 0;
      s.bins_stride = s.has_bins ? a.output_bin_counts->stride(0) : 0;
    }
    s.has_drafts = a.draft_tokens.has_value();
    s.draft_cols = s.has_drafts ? a.draft_tokens->size(1) : 0;
    s.draft_stride = s.has_drafts ? a.draft_tokens->stride(0) : 0;
    s.draft_out_stride = s.has_drafts ? a.draft_tokens_out->stride(0) : 0;
    with_index_type(a.idx_mapping, [&](auto* idx) {
      check_request_rows(idx, num_reqs, num_rows, "the request-indexed tensors");
      std::vector<int64_t> batch_row_of(static_cast<size_t>(num_rows), -1);
      for (int64_t r = 0; r < num_reqs; ++r) {
        const int64_t row = static_cast<int64_t>(idx[r]);
        if (row < 0) continue;
        TORCH_CHECK_VALUE(batch_row_of[row] < 0, "idx_mapping repeats request row ", row, " (at ", batch_row_of[row],
                          " and ", r, "): two requests would update one row");
        batch_row_of[row] = r;
        if (!sampling) continue;
        const int64_t ns = a.num_sampled->data_ptr<int32_t>()[r];
        TORCH_CHECK_VALUE(ns >= 0 && ns <= s.sampled_cols, "num_sampled[", r, "] = ", ns, " must be in [0, ",
                          s.sampled_cols, "] (sampled_tokens.size(1))");
        const int64_t n0 = a.total_len->data_ptr<int32_t>()[row];
        TORCH_CHECK_VALUE(n0 >= 0 && n0 + ns <= s.token_cols, "request ", r, " (row ", row, ") appends ", ns,
                          " tokens at total_len = ", n0, ", past the all_token_ids width ", s.token_cols);
        if (!s.has_bins) continue;
        AT_DISPATCH_INDEX_TYPES(a.sampled_tokens->scalar_type(), "post_update_after_sampling", [&] {
          const index_t* tokens = a.sampled_tokens->data_ptr<index_t>() + r * s.sampled_stride;
          for (int64_t i = 0; i < ns; ++i) {
            TORCH_CHECK_VALUE(tokens[i] >= 0 && tokens[i] < s.vocab_size, "sampled_tokens[", r, ", ", i, "] = ",
                              static_cast<int64_t>(tokens[i]), " is a kept token outside [0, ", s.vocab_size,
                              ") of output_bin_counts");
          }
        });
      }
    });
  }

  const PostUpdateArgs& a_;
  kernels::PostUpdateShape shape_;
};

}  // namespace specops::cpu
