// post_update_after_sampling: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks, the values (repeated rows, kept counts, the token table's width, the
// bins' vocabulary), then the request state's update (cpu/post_update_checks.h, shared with
// prepare_draft_prefill_inputs' post-update part).
#include <torch/library.h>

#include "cpu/post_update_checks.h"

namespace specops::cpu {
namespace {

PostUpdateArgs args_of(const at::Tensor& idx_mapping, const at::Tensor& num_computed_tokens,
                       const OptTensor& query_start_loc, const OptTensor& sampled_tokens, const OptTensor& num_sampled,
                       const OptTensor& num_rejected, const OptTensor& last_sampled_tokens,
                       const OptTensor& all_token_ids, const OptTensor& total_len, const OptTensor& output_bin_counts,
                       const OptTensor& draft_tokens, const OptTensor& draft_tokens_out) {
  return {idx_mapping,   num_computed_tokens, query_start_loc,   sampled_tokens, num_sampled,  num_rejected,
          last_sampled_tokens, all_token_ids, total_len, output_bin_counts, draft_tokens, draft_tokens_out};
}

template <typename Int>
void check_post_update_after_sampling(const at::Tensor& idx_mapping, const at::Tensor& num_computed_tokens,
                                      const OptTensor& query_start_loc, const OptTensor& sampled_tokens,
                                      const OptTensor& num_sampled, const OptTensor& num_rejected,
                                      const OptTensor& last_sampled_tokens, const OptTensor& all_token_ids,
                                      const OptTensor& total_len, const OptTensor& output_bin_counts,
                                      const OptTensor& draft_tokens, const OptTensor& draft_tokens_out) {
  check_post_update<Int>(args_of(idx_mapping, num_computed_tokens, query_start_loc, sampled_tokens, num_sampled,
                                 num_rejected, last_sampled_tokens, all_token_ids, total_len, output_bin_counts,
                                 draft_tokens, draft_tokens_out),
                         /*outputs_apart=*/true);
}

void post_update_after_sampling(const at::Tensor& idx_mapping, const at::Tensor& num_computed_tokens,
                                const OptTensor& query_start_loc, const OptTensor& sampled_tokens,
                                const OptTensor& num_sampled, const OptTensor& num_rejected,
                                const OptTensor& last_sampled_tokens, const OptTensor& all_token_ids,
                                const OptTensor& total_len, const OptTensor& output_bin_counts,
                                const OptTensor& draft_tokens, const OptTensor& draft_tokens_out) {
  const PostUpdateArgs args =
      args_of(idx_mapping, num_computed_tokens, query_start_loc, sampled_tokens, num_sampled, num_rejected,
              last_sampled_tokens, all_token_ids, total_len, output_bin_counts, draft_tokens, draft_tokens_out);
  check_post_update<int64_t>(args, /*outputs_apart=*/true);
  PostUpdateCall::checked(args).run();
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "post_update_after_sampling(Tensor idx_mapping, Tensor(a!) num_computed_tokens, Tensor? query_start_loc, "
      "Tensor? sampled_tokens, Tensor? num_sampled, Tensor? num_rejected, Tensor(b!)? last_sampled_tokens, "
      "Tensor(c!)? all_token_ids, Tensor(d!)? total_len, Tensor(e!)? output_bin_counts, Tensor? draft_tokens, "
      "Tensor(f!)? draft_tokens_out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("post_update_after_sampling", &post_update_after_sampling); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("post_update_after_sampling", &check_post_update_after_sampling<c10::SymInt>);
}

}  // namespace specops::cpu
