#pragma once
// Checks of the count-correction arguments, shared by correct_num_computed_tokens and the fused
// prepare_spec_decode_inputs.
#include <algorithm>
#include <utility>

#include "cpu/checks.h"
#include "kernels/correct_num_computed_tokens.h"

namespace specops::cpu {

inline kernels::CountCorrectionShape check_count_correction(const at::Tensor& num_computed_tokens,
                                                            const at::Tensor& num_accepted_tokens,
                                                            const at::Tensor& prev_positions,
                                                            const at::Tensor& valid_sampled_token_count,
                                                            const at::Tensor& prev_num_draft_tokens,
                                                            const at::Tensor& cpu_num_computed_tokens,
                                                            bool check_outputs_apart = true) {
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1);
  check_tensor(num_accepted_tokens, "num_accepted_tokens", {c10::kInt}, 1);
  check_tensor(prev_positions, "prev_positions", {c10::kInt, c10::kLong}, 1);
  // vllm-ascend's valid counts are int64; a runner may keep int64 host counts.
  check_tensor(valid_sampled_token_count, "valid_sampled_token_count", {c10::kInt, c10::kLong}, 1);
  check_tensor(prev_num_draft_tokens, "prev_num_draft_tokens", {c10::kInt}, 1);
  check_tensor(cpu_num_computed_tokens, "cpu_num_computed_tokens", {c10::kInt, c10::kLong}, 1);
  const int64_t num_rows = prev_positions.numel();
  const char* n = "n = prev_positions.numel()";
  check_entries(num_computed_tokens, "num_computed_tokens", num_rows, n);
  check_entries(num_accepted_tokens, "num_accepted_tokens", num_rows, n);
  check_entries(cpu_num_computed_tokens, "cpu_num_computed_tokens", num_rows, n);
  // Inputs may alias the outputs (every read comes before every write); the two outputs may not
  // (checked here unless the caller checks every output of its own at once).
  if (check_outputs_apart) {
    check_no_overlap(num_accepted_tokens, "num_accepted_tokens", num_computed_tokens, "num_computed_tokens");
  }
  kernels::CountCorrectionShape shape;
  shape.num_rows = num_rows;
  shape.num_previous_rows = std::min({valid_sampled_token_count.numel(), prev_num_draft_tokens.numel(),
                                      num_computed_tokens.numel()});
  return shape;
}

// Runs `run` with the data of an int32 or int64 tensor (checked to be one of them) as a typed
// const pointer: one instantiation per dtype instead of a branch per element.
template <typename Run>
void with_int_data(const at::Tensor& t, Run&& run) {
  if (t.scalar_type() == c10::kLong) {
    run(static_cast<const int64_t*>(t.data_ptr<int64_t>()));
  } else {
    run(static_cast<const int32_t*>(t.data_ptr<int32_t>()));
  }
}

// The correction's three inputs of either width, as typed pointers: run(prev, valid, host).
template <typename Run>
void with_correction_inputs(const at::Tensor& prev_positions, const at::Tensor& valid_sampled_token_count,
                            const at::Tensor& cpu_num_computed_tokens, Run&& run) {
  with_int_data(prev_positions, [&](auto* prev) {
    with_int_data(valid_sampled_token_count, [&](auto* valid) {
      with_int_data(cpu_num_computed_tokens, [&](auto* host) { run(prev, valid, host); });
    });
  });
}

// Checks of positions, seq_lens and their padding, shared by prepare_positions_and_seq_lens and
// the fused op (which checks num_computed_tokens itself first). Request-indexed counts (read
// through idx_mapping) need no R entries; their rows are checked by the caller. Returns the
// number of tokens, query_start_loc[R].
inline int64_t check_positions_and_seq_lens(const at::Tensor& num_computed_tokens, const at::Tensor& query_start_loc,
                                            const at::Tensor& positions, const at::Tensor& seq_lens,
                                            int64_t num_tokens_padded, int64_t num_reqs_padded,
                                            bool request_indexed = false, bool check_outputs_apart = true) {
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1);
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1);
  const int64_t num_tokens = check_query_start_loc_values(query_start_loc);
  const int64_t num_reqs = query_start_loc.numel() - 1;
  if (!request_indexed) {
    check_entries(num_computed_tokens, "num_computed_tokens", num_reqs, "R = query_start_loc.numel() - 1");
  }
  // The sizes first, as the Python check (which reads no value) words them; then the token count.
  TORCH_CHECK_VALUE(num_tokens_padded >= 0 && num_tokens_padded <= positions.numel(),
                    "num_tokens_padded must be in [0, positions.numel() = ", positions.numel(), "], got ",
                    num_tokens_padded);
  TORCH_CHECK_VALUE(num_tokens_padded >= num_tokens, "num_tokens_padded must be in [query_start_loc[R] = ", num_tokens,
                    ", positions.numel() = ", positions.numel(), "], got ", num_tokens_padded);
  TORCH_CHECK_VALUE(num_reqs_padded >= num_reqs && num_reqs_padded <= seq_lens.numel(), "num_reqs_padded must be in [R = ",
                    num_reqs, ", seq_lens.numel() = ", seq_lens.numel(), "], got ", num_reqs_padded);
  if (!check_outputs_apart) return num_tokens;  // the caller checks these pairs with its others
  check_no_overlap(positions, "positions", seq_lens, "seq_lens");
  for (const auto& [output, output_name] : {std::pair{&positions, "positions"}, std::pair{&seq_lens, "seq_lens"}}) {
    check_no_overlap(*output, output_name, num_computed_tokens, "num_computed_tokens");
    check_no_overlap(*output, output_name, query_start_loc, "query_start_loc");
  }
  return num_tokens;
}

}  // namespace specops::cpu
