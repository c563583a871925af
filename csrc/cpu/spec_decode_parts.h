#pragma once
// prepare_spec_decode_inputs' two optional parts of a request-indexed call (model runner V2's
// target step, docs/async_accounting.md): the step's input ids (prepare_input_ids' arguments,
// under its names, checked by its checks: cpu/input_ids_checks.h) and the DCP-local seq_lens
// (kernels/dcp_local_seq_lens.h's lengths of the seq_lens the op stores).
#include <utility>

#include "cpu/input_ids_checks.h"

namespace specops::cpu {

// The two parts a request-indexed call may add (docs/async_accounting.md): the step's input ids
// (prepare_input_ids' arguments, under its names) and the DCP-local seq_lens.
struct StepParts {
  const OptTensor& input_ids;
  const OptTensor& prefill_len;
  const OptTensor& last_sampled_tokens;
  const OptTensor& draft_tokens;
  const OptTensor& cu_num_logits;
  int64_t num_new_sampled_tokens;
  const OptTensor& all_token_ids;
  const OptTensor& next_prefill_tokens;
  const OptTensor& logits_indices;
  const OptTensor& expanded_idx_mapping;
  const OptTensor& expanded_local_pos;
  int64_t num_logits_padded;
  const OptTensor& dcp_local_seq_lens;

  // The input-ids part as prepare_input_ids takes it (input_ids given; its input_ids are not
  // padded past T: the op's num_tokens_padded is the slot mappings' and positions').
  InputIdsArgs input_ids_args(const at::Tensor& idx_mapping, const at::Tensor& query_start_loc,
                              const at::Tensor& num_computed_tokens) const {
    return {*input_ids,          idx_mapping,         query_start_loc,      num_computed_tokens,
            *prefill_len,        *last_sampled_tokens, *draft_tokens,       *cu_num_logits,
            num_new_sampled_tokens, all_token_ids,    next_prefill_tokens,  *logits_indices,
            *expanded_idx_mapping, *expanded_local_pos, num_logits_padded,  -1};
  }
};

// The parts' metadata: the input-ids part needs the request-indexed mode (it reads the counts by
// row) and every one of its tensors; the DCP-local seq_lens an int32 output of at least R entries.
template <typename Int>
void check_step_parts(const StepParts& p, const at::Tensor& num_computed_tokens, const at::Tensor& query_start_loc,
                      const OptTensor& idx_mapping, bool request_indexed_counts, int64_t cp_world_size,
                      int64_t cp_interleave, const Anchor& anchor) {
  if (p.input_ids.has_value()) {
    TORCH_CHECK_VALUE(request_indexed_counts,
                      "input_ids needs request_indexed_counts (the input ids read the counts by row)");
    for (const auto& [part, name] : {std::pair{&p.prefill_len, "prefill_len"},
                                     std::pair{&p.last_sampled_tokens, "last_sampled_tokens"},
                                     std::pair{&p.draft_tokens, "draft_tokens"},
                                     std::pair{&p.cu_num_logits, "cu_num_logits"},
                                     std::pair{&p.logits_indices, "logits_indices"},
                                     std::pair{&p.expanded_idx_mapping, "expanded_idx_mapping"},
                                     std::pair{&p.expanded_local_pos, "expanded_local_pos"}}) {
      TORCH_CHECK_VALUE(part->has_value(), name, " must be given with input_ids");
    }
    check_input_ids<Int>(p.input_ids_args(*idx_mapping, query_start_loc, num_computed_tokens),
                         /*outputs_apart=*/false);
  } else {
    for (const auto& [part, name] : {std::pair{&p.prefill_len, "prefill_len"},
                                     std::pair{&p.last_sampled_tokens, "last_sampled_tokens"},
                                     std::pair{&p.draft_tokens, "draft_tokens"},
                                     std::pair{&p.cu_num_logits, "cu_num_logits"},
                                     std::pair{&p.all_token_ids, "all_token_ids"},
                                     std::pair{&p.next_prefill_tokens, "next_prefill_tokens"},
                                     std::pair{&p.logits_indices, "logits_indices"},
                                     std::pair{&p.expanded_idx_mapping, "expanded_idx_mapping"},
                                     std::pair{&p.expanded_local_pos, "expanded_local_pos"}}) {
      TORCH_CHECK_VALUE(!part->has_value(), name, " is part of the input ids: it needs input_ids");
    }
  }
  if (p.dcp_local_seq_lens.has_value()) {
    check_tensor(*p.dcp_local_seq_lens, "dcp_local_seq_lens", {c10::kInt}, 1, anchor);
    check_entries(*p.dcp_local_seq_lens, "dcp_local_seq_lens", numel_of<Int>(query_start_loc) - 1,
                  "R = query_start_loc.numel() - 1");
    // A round of W * I tokens is the kernels' divisor: it must fit their int32 size arguments.
    TORCH_CHECK_VALUE(cp_world_size <= INT32_MAX / cp_interleave,
                      "cp_world_size * cp_interleave must be <= 2^31 - 1 with dcp_local_seq_lens, got ", cp_world_size,
                      " * ", cp_interleave);
  }
}

}  // namespace specops::cpu
