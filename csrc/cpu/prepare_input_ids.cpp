// prepare_input_ids: its metadata checks (the Meta kernel, and every backend's first step), then the
// CPU op: the checks, everything the formulas read (offsets, rows, the logits against each query,
// the drafts' width, the prompt's width), then the writes (cpu/input_ids_checks.h, shared with
// prepare_spec_decode_inputs' input-ids part).
#include <torch/library.h>

#include "cpu/input_ids_checks.h"

namespace specops::cpu {
namespace {

InputIdsArgs args_of(const at::Tensor& input_ids, const at::Tensor& idx_mapping, const at::Tensor& query_start_loc,
                     const at::Tensor& num_computed_tokens, const at::Tensor& prefill_len,
                     const at::Tensor& last_sampled_tokens, const at::Tensor& draft_tokens,
                     const at::Tensor& cu_num_logits, int64_t num_new_sampled_tokens, const OptTensor& all_token_ids,
                     const OptTensor& next_prefill_tokens, const at::Tensor& logits_indices,
                     const at::Tensor& expanded_idx_mapping, const at::Tensor& expanded_local_pos,
                     int64_t num_logits_padded, int64_t num_tokens_padded) {
  return {input_ids,          idx_mapping,          query_start_loc,    num_computed_tokens, prefill_len,
          last_sampled_tokens, draft_tokens,        cu_num_logits,      num_new_sampled_tokens, all_token_ids,
          next_prefill_tokens, logits_indices,      expanded_idx_mapping, expanded_local_pos, num_logits_padded,
          num_tokens_padded};
}

template <typename Int>
void check_prepare_input_ids(const at::Tensor& input_ids, const at::Tensor& idx_mapping,
                             const at::Tensor& query_start_loc, const at::Tensor& num_computed_tokens,
                             const at::Tensor& prefill_len, const at::Tensor& last_sampled_tokens,
                             const at::Tensor& draft_tokens, const at::Tensor& cu_num_logits,
                             int64_t num_new_sampled_tokens, const OptTensor& all_token_ids,
                             const OptTensor& next_prefill_tokens, const at::Tensor& logits_indices,
                             const at::Tensor& expanded_idx_mapping, const at::Tensor& expanded_local_pos,
                             int64_t num_logits_padded, int64_t num_tokens_padded) {
  check_input_ids<Int>(args_of(input_ids, idx_mapping, query_start_loc, num_computed_tokens, prefill_len,
                               last_sampled_tokens, draft_tokens, cu_num_logits, num_new_sampled_tokens, all_token_ids,
                               next_prefill_tokens, logits_indices, expanded_idx_mapping, expanded_local_pos,
                               num_logits_padded, num_tokens_padded),
                       /*outputs_apart=*/true);
}

void prepare_input_ids(const at::Tensor& input_ids, const at::Tensor& idx_mapping, const at::Tensor& query_start_loc,
                       const at::Tensor& num_computed_tokens, const at::Tensor& prefill_len,
                       const at::Tensor& last_sampled_tokens, const at::Tensor& draft_tokens,
                       const at::Tensor& cu_num_logits, int64_t num_new_sampled_tokens, const OptTensor& all_token_ids,
                       const OptTensor& next_prefill_tokens, const at::Tensor& logits_indices,
                       const at::Tensor& expanded_idx_mapping, const at::Tensor& expanded_local_pos,
                       int64_t num_logits_padded, int64_t num_tokens_padded) {
  const InputIdsArgs args =
      args_of(input_ids, idx_mapping, query_start_loc, num_computed_tokens, prefill_len, last_sampled_tokens,
              draft_tokens, cu_num_logits, num_new_sampled_tokens, all_token_ids, next_prefill_tokens, logits_indices,
              expanded_idx_mapping, expanded_local_pos, num_logits_padded, num_tokens_padded);
  check_input_ids<int64_t>(args, /*outputs_apart=*/true);
  InputIdsCall::checked(args).run();
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "prepare_input_ids(Tensor(a!) input_ids, Tensor idx_mapping, Tensor query_start_loc, "
      "Tensor num_computed_tokens, Tensor prefill_len, Tensor last_sampled_tokens, Tensor draft_tokens, "
      "Tensor cu_num_logits, int num_new_sampled_tokens, Tensor? all_token_ids, Tensor(b!)? next_prefill_tokens, "
      "Tensor(c!) logits_indices, Tensor(d!) expanded_idx_mapping, Tensor(e!) expanded_local_pos, "
      "int num_logits_padded, int num_tokens_padded) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("prepare_input_ids", &prepare_input_ids); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("prepare_input_ids", &check_prepare_input_ids<c10::SymInt>); }

}  // namespace specops::cpu
