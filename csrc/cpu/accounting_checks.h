#pragma once
// Checks of the count-correction arguments, shared by correct_num_computed_tokens and the fused
// prepare_spec_decode_inputs.
#include <algorithm>
#include <utility>

#include "cpu/checks.h"
#include "kernels/correct_num_computed_tokens.h"

namespace specops::cpu {

// The correction's metadata (python: ops/correct_num_computed_tokens.py's record; every tensor on
// num_computed_tokens' device).
template <typename Int>
void check_count_correction(const at::Tensor& num_computed_tokens, const at::Tensor& num_accepted_tokens,
                            const at::Tensor& prev_positions, const at::Tensor& valid_sampled_token_count,
                            const at::Tensor& prev_num_draft_tokens, const at::Tensor& cpu_num_computed_tokens,
                            bool check_outputs_apart = true) {
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1);
  const Anchor anchor = anchor_of(num_computed_tokens, "num_computed_tokens");
  check_tensor(num_accepted_tokens, "num_accepted_tokens", {c10::kInt}, 1, anchor);
  check_tensor(prev_positions, "prev_positions", {c10::kInt, c10::kLong}, 1, anchor);
  // vllm-ascend's valid counts are int64; a runner may keep int64 host counts.
  check_tensor(valid_sampled_token_count, "valid_sampled_token_count", {c10::kInt, c10::kLong}, 1, anchor);
  check_tensor(prev_num_draft_tokens, "prev_num_draft_tokens", {c10::kInt}, 1, anchor);
  check_tensor(cpu_num_computed_tokens, "cpu_num_computed_tokens", {c10::kInt, c10::kLong}, 1, anchor);
  const Int num_rows = numel_of<Int>(prev_positions);
  const char* n = "n = prev_positions.numel()";
  check_entries(num_computed_tokens, "num_computed_tokens", num_rows, n);
  check_entries(num_accepted_tokens, "num_accepted_tokens", num_rows, n);
  check_entries(cpu_num_computed_tokens, "cpu_num_computed_tokens", num_rows, n);
  // Inputs may alias the outputs (every read comes before every write); the two outputs may not
  // (checked here unless the caller checks every output of its own at once).
  if (check_outputs_apart) {
    check_no_overlap(num_accepted_tokens, "num_accepted_tokens", num_computed_tokens, "num_computed_tokens");
  }
}

// The correction's shape (its arguments checked).
inline kernels::CountCorrectionShape count_correction_shape(const at::Tensor& num_computed_tokens,
                                                            const at::Tensor& prev_positions,
                                                            const at::Tensor& valid_sampled_token_count,
                                                            const at::Tensor& prev_num_draft_tokens) {
  kernels::CountCorrectionShape shape;
  shape.num_rows = prev_positions.numel();
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

// The metadata of positions, seq_lens and their padding (every tensor on num_computed_tokens'
// device), shared by prepare_positions_and_seq_lens and the fused op (which check
// num_computed_tokens first). Request-indexed counts (read through idx_mapping) need no R
// entries; their rows are checked by the caller. query_start_loc[R] <= num_tokens_padded needs a
// value: check_token_padding, on the host.
template <typename Int>
void check_positions_and_seq_lens(const at::Tensor& num_computed_tokens, const at::Tensor& query_start_loc,
                                  const at::Tensor& positions, const at::Tensor& seq_lens,
                                  const Int& num_tokens_padded, const Int& num_reqs_padded,
                                  bool request_indexed = false, bool check_outputs_apart = true) {
  const Anchor anchor = anchor_of(num_computed_tokens, "num_computed_tokens");
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  const Int num_reqs = check_query_start_loc_meta<Int>(query_start_loc, &anchor);
  if (!request_indexed) {
    check_entries(num_computed_tokens, "num_computed_tokens", num_reqs, "R = query_start_loc.numel() - 1");
  }
  TORCH_CHECK_VALUE(num_tokens_padded >= 0 && numel_of<Int>(positions) >= num_tokens_padded,
                    "num_tokens_padded must be in [0, positions.numel() = ", numel_of<Int>(positions), "], got ",
                    num_tokens_padded);
  TORCH_CHECK_VALUE(num_reqs_padded >= num_reqs && numel_of<Int>(seq_lens) >= num_reqs_padded,
                    "num_reqs_padded must be in [R = ", num_reqs, ", seq_lens.numel() = ", numel_of<Int>(seq_lens),
                    "], got ", num_reqs_padded);
  if (!check_outputs_apart) return;  // the caller checks these pairs with its others
  check_no_overlap(positions, "positions", seq_lens, "seq_lens");
  for (const auto& [output, output_name] : {std::pair{&positions, "positions"}, std::pair{&seq_lens, "seq_lens"}}) {
    check_no_overlap(*output, output_name, num_computed_tokens, "num_computed_tokens");
    check_no_overlap(*output, output_name, query_start_loc, "query_start_loc");
  }
}

// The host op's value check of the padding: query_start_loc's offsets (from 0, never decreasing)
// and its last, the token count, within num_tokens_padded. Returns the token count.
inline int64_t check_token_padding(const at::Tensor& query_start_loc, const at::Tensor& positions,
                                   int64_t num_tokens_padded) {
  const int64_t num_tokens = check_query_start_loc_offsets(query_start_loc);
  TORCH_CHECK_VALUE(num_tokens_padded >= num_tokens, "num_tokens_padded must be in [query_start_loc[R] = ", num_tokens,
                    ", positions.numel() = ", positions.numel(), "], got ", num_tokens_padded);
  return num_tokens;
}

}  // namespace specops::cpu
