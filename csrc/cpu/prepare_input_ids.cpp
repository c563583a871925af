// prepare_input_ids: its metadata checks (the Meta kernel, and every backend's first step), then the
// CPU op: the checks, everything the formulas read (offsets, rows, the logits against each query,
// the drafts' width, the prompt's width), then the writes.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/step_checks.h"
#include "kernels/prepare_input_ids.h"

namespace specops::cpu {
namespace {

// Non-decreasing from 0 over its first n + 1 entries; returns entry n.
int64_t check_offsets(const at::Tensor& offsets, const char* name, int64_t n) {
  const int32_t* v = offsets.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(v[0] == 0, name, "[0] must be 0, got ", v[0]);
  for (int64_t r = 0; r < n; ++r) {
    TORCH_CHECK_VALUE(v[r + 1] >= v[r], name, " must be non-decreasing, but ", name, "[", r + 1, "] = ", v[r + 1],
                      " < ", name, "[", r, "] = ", v[r]);
  }
  return v[n];
}

template <typename Int>
void check_prepare_input_ids(const at::Tensor& input_ids, const at::Tensor& idx_mapping,
                             const at::Tensor& query_start_loc, const at::Tensor& num_computed_tokens,
                             const at::Tensor& prefill_len, const at::Tensor& last_sampled_tokens,
                             const at::Tensor& draft_tokens, const at::Tensor& cu_num_logits,
                             int64_t num_new_sampled_tokens, const std::optional<at::Tensor>& all_token_ids,
                             const std::optional<at::Tensor>& next_prefill_tokens, const at::Tensor& logits_indices,
                             const at::Tensor& expanded_idx_mapping, const at::Tensor& expanded_local_pos,
                             int64_t num_logits_padded, int64_t num_tokens_padded) {
  check_tensor(input_ids, "input_ids", {c10::kInt}, 1);
  const Anchor anchor = anchor_of(input_ids, "input_ids");
  check_tensor(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1, anchor);
  const Int num_reqs = numel_of<Int>(idx_mapping);
  check_tensor(query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
  check_entries(query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = idx_mapping.numel())");
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1, anchor);
  check_tensor(prefill_len, "prefill_len", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(last_sampled_tokens.dim() == 1 || last_sampled_tokens.dim() == 2,
                    "last_sampled_tokens must be [M] or [M, 1], got shape ", last_sampled_tokens.sym_sizes());
  check_tensor(last_sampled_tokens, "last_sampled_tokens", {c10::kInt, c10::kLong}, last_sampled_tokens.dim(), anchor);
  TORCH_CHECK_VALUE(last_sampled_tokens.dim() == 1 || size_of<Int>(last_sampled_tokens, 1) == 1,
                    "last_sampled_tokens must be [M] or [M, 1], got shape ", last_sampled_tokens.sym_sizes());
  check_tensor(draft_tokens, "draft_tokens", {c10::kInt, c10::kLong}, 2, anchor);
  check_tensor(cu_num_logits, "cu_num_logits", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(cu_num_logits) == num_reqs + 1, "cu_num_logits must have R + 1 = ", num_reqs + 1,
                    " entries (R = idx_mapping.numel()), got ", numel_of<Int>(cu_num_logits));
  TORCH_CHECK_VALUE(num_new_sampled_tokens == 0 || num_new_sampled_tokens == 1,
                    "num_new_sampled_tokens must be 0 or 1, got ", num_new_sampled_tokens);
  TORCH_CHECK_VALUE(all_token_ids.has_value() == next_prefill_tokens.has_value(),
                    "all_token_ids and next_prefill_tokens must be given together or not at all");
  if (all_token_ids.has_value()) {
    check_tensor(*all_token_ids, "all_token_ids", {c10::kInt}, 2, anchor);
    check_tensor(*next_prefill_tokens, "next_prefill_tokens", {c10::kInt}, 2, anchor);
    check_rows_disjoint(*next_prefill_tokens, "next_prefill_tokens");
  }
  check_tensor(logits_indices, "logits_indices", {c10::kLong}, 1, anchor);
  check_tensor(expanded_idx_mapping, "expanded_idx_mapping", {idx_mapping.scalar_type()}, 1, anchor);
  check_tensor(expanded_local_pos, "expanded_local_pos", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(input_ids) >= num_tokens_padded, "num_tokens_padded must be <= input_ids.numel() = ",
                    numel_of<Int>(input_ids), ", got ", num_tokens_padded);
  for (const auto& [out, name] : {std::pair{&logits_indices, "logits_indices"},
                                  std::pair{&expanded_idx_mapping, "expanded_idx_mapping"},
                                  std::pair{&expanded_local_pos, "expanded_local_pos"}}) {
    TORCH_CHECK_VALUE(numel_of<Int>(*out) >= num_logits_padded, "num_logits_padded must be <= ", name, ".numel() = ",
                      numel_of<Int>(*out), ", got ", num_logits_padded);
  }
  const at::Tensor* next = next_prefill_tokens.has_value() ? &*next_prefill_tokens : nullptr;
  const at::Tensor* tokens = all_token_ids.has_value() ? &*all_token_ids : nullptr;
  check_outputs_alias_nothing(
      {{&input_ids, {"input_ids"}}, {next, {"next_prefill_tokens"}}, {&logits_indices, {"logits_indices"}},
       {&expanded_idx_mapping, {"expanded_idx_mapping"}}, {&expanded_local_pos, {"expanded_local_pos"}}},
      {{&idx_mapping, {"idx_mapping"}}, {&query_start_loc, {"query_start_loc"}},
       {&num_computed_tokens, {"num_computed_tokens"}}, {&prefill_len, {"prefill_len"}},
       {&last_sampled_tokens, {"last_sampled_tokens"}}, {&draft_tokens, {"draft_tokens"}},
       {&cu_num_logits, {"cu_num_logits"}}, {tokens, {"all_token_ids"}}});
}

void prepare_input_ids(const at::Tensor& input_ids, const at::Tensor& idx_mapping, const at::Tensor& query_start_loc,
                       const at::Tensor& num_computed_tokens, const at::Tensor& prefill_len,
                       const at::Tensor& last_sampled_tokens, const at::Tensor& draft_tokens,
                       const at::Tensor& cu_num_logits, int64_t num_new_sampled_tokens,
                       const std::optional<at::Tensor>& all_token_ids,
                       const std::optional<at::Tensor>& next_prefill_tokens, const at::Tensor& logits_indices,
                       const at::Tensor& expanded_idx_mapping, const at::Tensor& expanded_local_pos,
                       int64_t num_logits_padded, int64_t num_tokens_padded) {
  check_prepare_input_ids<int64_t>(input_ids, idx_mapping, query_start_loc, num_computed_tokens, prefill_len,
                                   last_sampled_tokens, draft_tokens, cu_num_logits, num_new_sampled_tokens,
                                   all_token_ids, next_prefill_tokens, logits_indices, expanded_idx_mapping,
                                   expanded_local_pos, num_logits_padded, num_tokens_padded);
  const int64_t num_reqs = idx_mapping.numel();
  int64_t num_rows = std::min({num_computed_tokens.numel(), prefill_len.numel(), last_sampled_tokens.size(0),
                               draft_tokens.size(0)});
  if (all_token_ids.has_value()) {
    num_rows = std::min({num_rows, all_token_ids->size(0), next_prefill_tokens->size(1)});
  }
  const at::Tensor* next = next_prefill_tokens.has_value() ? &*next_prefill_tokens : nullptr;
  const at::Tensor* tokens = all_token_ids.has_value() ? &*all_token_ids : nullptr;

  // Values.
  const int64_t num_tokens = check_offsets(query_start_loc, "query_start_loc", num_reqs);
  const int64_t num_logits = check_offsets(cu_num_logits, "cu_num_logits", num_reqs);
  TORCH_CHECK_VALUE(num_tokens <= input_ids.numel(), "input_ids must have at least T = query_start_loc[R] = ",
                    num_tokens, " entries, got ", input_ids.numel());
  TORCH_CHECK_VALUE(num_tokens_padded < 0 || num_tokens_padded >= num_tokens,
                    "num_tokens_padded must be >= T = query_start_loc[R] = ", num_tokens, ", got ", num_tokens_padded);
  for (const auto& [out, name] : {std::pair{&logits_indices, "logits_indices"},
                                  std::pair{&expanded_idx_mapping, "expanded_idx_mapping"},
                                  std::pair{&expanded_local_pos, "expanded_local_pos"}}) {
    TORCH_CHECK_VALUE(out->numel() >= num_logits, name, " must have at least cu_num_logits[R] = ", num_logits,
                      " entries, got ", out->numel());
  }
  TORCH_CHECK_VALUE(num_logits_padded < 0 || num_logits_padded >= num_logits,
                    "num_logits_padded must be >= cu_num_logits[R] = ", num_logits, ", got ", num_logits_padded);
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* cu = cu_num_logits.data_ptr<int32_t>();
  const int32_t* nc = num_computed_tokens.data_ptr<int32_t>();
  const int32_t* pl = prefill_len.data_ptr<int32_t>();
  const int64_t width = tokens != nullptr ? tokens->size(1) : 0;
  with_index_type(idx_mapping, [&](auto* idx) {
    check_request_rows(idx, num_reqs, num_rows, "the request-indexed tensors");
    for (int64_t r = 0; r < num_reqs; ++r) {
      const int64_t qlen = qsl[r + 1] - qsl[r], n_log = static_cast<int64_t>(cu[r + 1]) - cu[r];
      const int64_t n_draft = n_log - num_new_sampled_tokens;
      TORCH_CHECK_VALUE(n_log <= qlen, "cu_num_logits gives request ", r, " ", n_log,
                        " logits, more than its query_start_loc query length ", qlen);
      TORCH_CHECK_VALUE(n_draft <= draft_tokens.size(1), "cu_num_logits gives request ", r, " ", n_draft,
                        " drafts, past the draft_tokens width ", draft_tokens.size(1));
      const int64_t row = static_cast<int64_t>(idx[r]);
      if (row < 0) continue;
      const int64_t seq_len = static_cast<int64_t>(nc[row]) + qlen;
      TORCH_CHECK_VALUE(seq_len <= pl[row] || n_draft >= 0, "cu_num_logits gives request ", r,
                        " no logit for its sampled token (num_new_sampled_tokens = 1), but it has generated tokens");
      if (tokens != nullptr && nc[row] < pl[row]) {
        TORCH_CHECK_VALUE(nc[row] >= 0, "num_computed_tokens[", row, "] = ", nc[row], " must be >= 0");
        TORCH_CHECK_VALUE(seq_len <= width && pl[row] <= width, "request ", r, " (row ", row,
                          ") reads prompt tokens up to ", std::max<int64_t>(seq_len, pl[row]),
                          " (num_computed_tokens + query length, prefill_len), past the all_token_ids width ", width);
      }
    }
    using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    kernels::InputIdsShape s;
    s.num_reqs = num_reqs;
    s.num_rows = num_rows;
    s.num_new_sampled_tokens = num_new_sampled_tokens;
    s.last_stride = last_sampled_tokens.stride(0);
    s.draft_cols = draft_tokens.size(1);
    s.draft_stride = draft_tokens.stride(0);
    s.has_prefill = tokens != nullptr;
    s.token_cols = width;
    s.token_stride = tokens != nullptr ? tokens->stride(0) : 0;
    s.num_lookahead = next != nullptr ? next->size(0) : 0;
    s.lookahead_stride = next != nullptr ? next->stride(0) : 0;
    s.input_ids_numel = input_ids.numel();
    s.tokens_padded = num_tokens_padded;
    s.logits_end = num_logits_padded < 0 ? logits_indices.numel() : num_logits_padded;
    s.expanded_idx_end = num_logits_padded < 0 ? expanded_idx_mapping.numel() : num_logits_padded;
    s.local_pos_end = num_logits_padded < 0 ? expanded_local_pos.numel() : num_logits_padded;
    AT_DISPATCH_INDEX_TYPES(last_sampled_tokens.scalar_type(), "prepare_input_ids", [&] {
      using LastT = index_t;
      AT_DISPATCH_INDEX_TYPES(draft_tokens.scalar_type(), "prepare_input_ids", [&] {
        kernels::prepare_input_ids<IdxT, LastT, index_t>(
            input_ids.data_ptr<int32_t>(), idx, qsl, nc, pl, last_sampled_tokens.data_ptr<LastT>(),
            draft_tokens.data_ptr<index_t>(), cu, tokens != nullptr ? tokens->data_ptr<int32_t>() : nullptr,
            next != nullptr ? next->data_ptr<int32_t>() : nullptr, logits_indices.data_ptr<int64_t>(),
            expanded_idx_mapping.data_ptr<IdxT>(), expanded_local_pos.data_ptr<int32_t>(), s);
      });
    });
  });
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
