#pragma once
// prepare_input_ids' checks and its host body, shared with prepare_spec_decode_inputs' input-ids
// part (the same arguments under the same names): the metadata (check_input_ids, on every
// path), then on the host the values (InputIdsCall::checked, before anything is written) and the
// writes (InputIdsCall::run).
#include <ATen/Dispatch.h>

#include <algorithm>
#include <optional>

#include "cpu/step_checks.h"
#include "kernels/prepare_input_ids.h"

namespace specops::cpu {

// The input-ids arguments, as both ops name them.
struct InputIdsArgs {
  const at::Tensor& input_ids;
  const at::Tensor& idx_mapping;
  const at::Tensor& query_start_loc;
  const at::Tensor& num_computed_tokens;
  const at::Tensor& prefill_len;
  const at::Tensor& last_sampled_tokens;
  const at::Tensor& draft_tokens;
  const at::Tensor& cu_num_logits;
  int64_t num_new_sampled_tokens;
  const OptTensor& all_token_ids;
  const OptTensor& next_prefill_tokens;
  const at::Tensor& logits_indices;
  const at::Tensor& expanded_idx_mapping;
  const at::Tensor& expanded_local_pos;
  int64_t num_logits_padded;
  int64_t num_tokens_padded;  // input_ids is zeroed in [T, num_tokens_padded); -1: nothing past T

  // The outputs, and the inputs read while they are written (every input is).
  c10::SmallVector<NamedTensor, 5> outputs() const {
    return {{&input_ids, {"input_ids"}},
            {ptr(next_prefill_tokens), {"next_prefill_tokens"}},
            {&logits_indices, {"logits_indices"}},
            {&expanded_idx_mapping, {"expanded_idx_mapping"}},
            {&expanded_local_pos, {"expanded_local_pos"}}};
  }
  c10::SmallVector<NamedTensor, 8> inputs() const {
    return {{&idx_mapping, {"idx_mapping"}},         {&query_start_loc, {"query_start_loc"}},
            {&num_computed_tokens, {"num_computed_tokens"}}, {&prefill_len, {"prefill_len"}},
            {&last_sampled_tokens, {"last_sampled_tokens"}}, {&draft_tokens, {"draft_tokens"}},
            {&cu_num_logits, {"cu_num_logits"}},     {ptr(all_token_ids), {"all_token_ids"}}};
  }
};

// Non-decreasing from 0 over its first n + 1 entries; returns entry n.
inline int64_t check_offsets(const at::Tensor& offsets, const char* name, int64_t n) {
  const int32_t* v = offsets.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(v[0] == 0, name, "[0] must be 0, got ", v[0]);
  for (int64_t r = 0; r < n; ++r) {
    TORCH_CHECK_VALUE(v[r + 1] >= v[r], name, " must be non-decreasing, but ", name, "[", r + 1, "] = ", v[r + 1],
                      " < ", name, "[", r, "] = ", v[r]);
  }
  return v[n];
}

// The metadata (every tensor on input_ids' device). outputs_apart: whether the outputs' aliasing
// is checked here (prepare_spec_decode_inputs checks them with its own outputs instead).
template <typename Int>
void check_input_ids(const InputIdsArgs& a, bool outputs_apart) {
  check_tensor(a.input_ids, "input_ids", {c10::kInt}, 1);
  const Anchor anchor = anchor_of(a.input_ids, "input_ids");
  check_tensor(a.idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
  const Int num_reqs = numel_of<Int>(a.idx_mapping);
  check_tensor(a.query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
  check_entries(a.query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = idx_mapping.numel())");
  check_tensor(a.num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1, anchor);
  check_tensor(a.prefill_len, "prefill_len", {c10::kInt}, 1, anchor);
  const at::Tensor& last = a.last_sampled_tokens;
  TORCH_CHECK_VALUE(last.dim() == 1 || last.dim() == 2, "last_sampled_tokens must be [M] or [M, 1], got shape ",
                    last.sym_sizes());
  check_tensor(last, "last_sampled_tokens", {c10::kInt, c10::kLong}, last.dim(), anchor);
  TORCH_CHECK_VALUE(last.dim() == 1 || size_of<Int>(last, 1) == 1,
                    "last_sampled_tokens must be [M] or [M, 1], got shape ", last.sym_sizes());
  check_tensor(a.draft_tokens, "draft_tokens", {c10::kInt, c10::kLong}, 2, anchor);
  check_tensor(a.cu_num_logits, "cu_num_logits", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(a.cu_num_logits) == num_reqs + 1, "cu_num_logits must have R + 1 = ", num_reqs + 1,
                    " entries (R = idx_mapping.numel()), got ", numel_of<Int>(a.cu_num_logits));
  TORCH_CHECK_VALUE(a.num_new_sampled_tokens == 0 || a.num_new_sampled_tokens == 1,
                    "num_new_sampled_tokens must be 0 or 1, got ", a.num_new_sampled_tokens);
  TORCH_CHECK_VALUE(a.all_token_ids.has_value() == a.next_prefill_tokens.has_value(),
                    "all_token_ids and next_prefill_tokens must be given together or not at all");
  if (a.all_token_ids.has_value()) {
    check_tensor(*a.all_token_ids, "all_token_ids", {c10::kInt}, 2, anchor);
    check_tensor(*a.next_prefill_tokens, "next_prefill_tokens", {c10::kInt}, 2, anchor);
    check_rows_disjoint(*a.next_prefill_tokens, "next_prefill_tokens");
  }
  check_tensor(a.logits_indices, "logits_indices", {c10::kLong}, 1, anchor);
  check_tensor(a.expanded_idx_mapping, "expanded_idx_mapping", {a.idx_mapping.scalar_type()}, 1, anchor);
  check_tensor(a.expanded_local_pos, "expanded_local_pos", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(a.input_ids) >= a.num_tokens_padded,
                    "num_tokens_padded must be <= input_ids.numel() = ", numel_of<Int>(a.input_ids), ", got ",
                    a.num_tokens_padded);
  for (const auto& [out, name] : {std::pair{&a.logits_indices, "logits_indices"},
                                  std::pair{&a.expanded_idx_mapping, "expanded_idx_mapping"},
                                  std::pair{&a.expanded_local_pos, "expanded_local_pos"}}) {
    TORCH_CHECK_VALUE(numel_of<Int>(*out) >= a.num_logits_padded, "num_logits_padded must be <= ", name,
                      ".numel() = ", numel_of<Int>(*out), ", got ", a.num_logits_padded);
  }
  if (outputs_apart) check_outputs_alias_nothing(a.outputs(), a.inputs());
}

// The host call: the values checked when it is made (nothing written yet), the writes by run().
class InputIdsCall {
 public:
  static InputIdsCall checked(const InputIdsArgs& a) {
    InputIdsCall call(a);
    call.check_values();
    return call;
  }

  void run() const {
    const at::Tensor* next = ptr(a_.next_prefill_tokens);
    const at::Tensor* tokens = ptr(a_.all_token_ids);
    with_index_type(a_.idx_mapping, [&](auto* idx) {
      using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
      AT_DISPATCH_INDEX_TYPES(a_.last_sampled_tokens.scalar_type(), "prepare_input_ids", [&] {
        using LastT = index_t;
        AT_DISPATCH_INDEX_TYPES(a_.draft_tokens.scalar_type(), "prepare_input_ids", [&] {
          kernels::prepare_input_ids<IdxT, LastT, index_t>(
              a_.input_ids.data_ptr<int32_t>(), idx, a_.query_start_loc.data_ptr<int32_t>(),
              a_.num_computed_tokens.data_ptr<int32_t>(), a_.prefill_len.data_ptr<int32_t>(),
              a_.last_sampled_tokens.data_ptr<LastT>(), a_.draft_tokens.data_ptr<index_t>(),
              a_.cu_num_logits.data_ptr<int32_t>(), tokens != nullptr ? tokens->data_ptr<int32_t>() : nullptr,
              next != nullptr ? next->data_ptr<int32_t>() : nullptr, a_.logits_indices.data_ptr<int64_t>(),
              a_.expanded_idx_mapping.data_ptr<IdxT>(), a_.expanded_local_pos.data_ptr<int32_t>(), shape_);
        });
      });
    });
  }

 private:
  explicit InputIdsCall(const InputIdsArgs& a) : a_(a) {}

  // Everything the formulas read: offsets, rows, the logits against each query, the drafts'
  // width, the prompt's width.
  void check_values() {
    const InputIdsArgs& a = a_;
    const int64_t num_reqs = a.idx_mapping.numel();
    int64_t num_rows = std::min({a.num_computed_tokens.numel(), a.prefill_len.numel(), a.last_sampled_tokens.size(0),
                                 a.draft_tokens.size(0)});
    if (a.all_token_ids.has_value()) {
      num_rows = std::min({num_rows, a.all_token_ids->size(0), a.next_prefill_tokens->size(1)});
    }
    const at::Tensor* next = ptr(a.next_prefill_tokens);
    const at::Tensor* tokens = ptr(a.all_token_ids);
    const int64_t num_tokens = check_offsets(a.query_start_loc, "query_start_loc", num_reqs);
    const int64_t num_logits = check_offsets(a.cu_num_logits, "cu_num_logits", num_reqs);
    TORCH_CHECK_VALUE(num_tokens <= a.input_ids.numel(), "input_ids must have at least T = query_start_loc[R] = ",
                      num_tokens, " entries, got ", a.input_ids.numel());
    TORCH_CHECK_VALUE(a.num_tokens_padded < 0 || a.num_tokens_padded >= num_tokens,
                      "num_tokens_padded must be >= T = query_start_loc[R] = ", num_tokens, ", got ",
                      a.num_tokens_padded);
    for (const auto& [out, name] : {std::pair{&a.logits_indices, "logits_indices"},
                                    std::pair{&a.expanded_idx_mapping, "expanded_idx_mapping"},
                                    std::pair{&a.expanded_local_pos, "expanded_local_pos"}}) {
      TORCH_CHECK_VALUE(out->numel() >= num_logits, name, " must have at least cu_num_logits[R] = ", num_logits,
                        " entries, got ", out->numel());
    }
    TORCH_CHECK_VALUE(a.num_logits_padded < 0 || a.num_logits_padded >= num_logits,
                      "num_logits_padded must be >= cu_num_logits[R] = ", num_logits, ", got ", a.num_logits_padded);
    const int32_t* qsl = a.query_start_loc.data_ptr<int32_t>();
    const int32_t* cu = a.cu_num_logits.data_ptr<int32_t>();
    const int32_t* nc = a.num_computed_tokens.data_ptr<int32_t>();
    const int32_t* pl = a.prefill_len.data_ptr<int32_t>();
    const int64_t width = tokens != nullptr ? tokens->size(1) : 0;
    with_index_type(a.idx_mapping, [&](auto* idx) {
      check_request_rows(idx, num_reqs, num_rows, "the request-indexed tensors");
      for (int64_t r = 0; r < num_reqs; ++r) {
        const int64_t qlen = qsl[r + 1] - qsl[r], n_log = static_cast<int64_t>(cu[r + 1]) - cu[r];
        const int64_t n_draft = n_log - a.num_new_sampled_tokens;
        TORCH_CHECK_VALUE(n_log <= qlen, "cu_num_logits gives request ", r, " ", n_log,
                          " logits, more than its query_start_loc query length ", qlen);
        TORCH_CHECK_VALUE(n_draft <= a.draft_tokens.size(1), "cu_num_logits gives request ", r, " ", n_draft,
                          " drafts, past the draft_tokens width ", a.draft_tokens.size(1));
        const int64_t row = static_cast<int64_t>(idx[r]);
        if (row < 0) continue;
        const int64_t seq_len = static_cast<int64_t>(nc[row]) + qlen;
        TORCH_CHECK_VALUE(seq_len <= pl[row] || n_draft >= 0, "cu_num_logits gives request ", r,
                          " no logit for its sampled token (num_new_sampled_tokens = 1), but it has generated tokens");
        if (tokens != nullptr && nc[row] < pl[row]) {
          TORCH_CHECK_VALUE(nc[row] >= 0, "num_computed_tokens[", row, "] = ", nc[row], " must be >= 0");
          TORCH_CHECK_VALUE(seq_len <= width && pl[row] <= width, "request ", r, " (row ", row,
                            ") reads prompt tokens up to ", std::max<int64_t>(seq_len, pl[row]),
                            " (num_computed_tokens + query length, prefill_len), past the all_token_ids width ",
                            width);
        }
      }
    });
    kernels::InputIdsShape& s = shape_;
    s.num_reqs = num_reqs;
    s.num_rows = num_rows;
    s.num_new_sampled_tokens = a.num_new_sampled_tokens;
    s.last_stride = a.last_sampled_tokens.stride(0);
    s.draft_cols = a.draft_tokens.size(1);
    s.draft_stride = a.draft_tokens.stride(0);
    s.has_prefill = tokens != nullptr;
    s.token_cols = width;
    s.token_stride = tokens != nullptr ? tokens->stride(0) : 0;
    s.num_lookahead = next != nullptr ? next->size(0) : 0;
    s.lookahead_stride = next != nullptr ? next->stride(0) : 0;
    s.input_ids_numel = a.input_ids.numel();
    s.tokens_padded = a.num_tokens_padded;
    s.logits_end = a.num_logits_padded < 0 ? a.logits_indices.numel() : a.num_logits_padded;
    s.expanded_idx_end = a.num_logits_padded < 0 ? a.expanded_idx_mapping.numel() : a.num_logits_padded;
    s.local_pos_end = a.num_logits_padded < 0 ? a.expanded_local_pos.numel() : a.num_logits_padded;
  }

  const InputIdsArgs& a_;
  kernels::InputIdsShape shape_;
};

}  // namespace specops::cpu
