// prepare_next_token_ids: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks, the values (the draft counts against each query), then the next
// tokens and counts.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/step_checks.h"
#include "kernels/prepare_next_token_ids.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_prepare_next_token_ids(const at::Tensor& sampled_token_ids, int64_t vocab_size,
                                  const OptTensor& discard_request_mask, const OptTensor& backup_next_token_ids,
                                  const OptTensor& token_ids, const OptTensor& num_tokens_no_spec,
                                  const OptTensor& cu_num_draft_tokens, const OptTensor& query_start_loc,
                                  const at::Tensor& next_token_ids, const at::Tensor& valid_sampled_token_count,
                                  const OptTensor& num_rejected_tokens, const OptTensor& token_indices_to_sample,
                                  int64_t num_reqs_padded) {
  check_tensor(sampled_token_ids, "sampled_token_ids", {c10::kInt, c10::kLong}, 2);
  const Anchor anchor = anchor_of(sampled_token_ids, "sampled_token_ids");
  const Int num_reqs = size_of<Int>(sampled_token_ids, 0);
  check_positive(vocab_size, "vocab_size");
  if (discard_request_mask.has_value()) {
    check_tensor(*discard_request_mask, "discard_request_mask", {c10::kBool}, 1, anchor);
    check_entries(*discard_request_mask, "discard_request_mask", num_reqs, "R = sampled_token_ids.size(0)");
  }
  TORCH_CHECK_VALUE(token_ids.has_value() == num_tokens_no_spec.has_value(),
                    "token_ids and num_tokens_no_spec must be given together");
  TORCH_CHECK_VALUE(backup_next_token_ids.has_value() != token_ids.has_value(),
                    "exactly one backup source must be given: backup_next_token_ids, or token_ids with "
                    "num_tokens_no_spec");
  if (backup_next_token_ids.has_value()) {
    check_tensor(*backup_next_token_ids, "backup_next_token_ids", {c10::kInt}, 1, anchor);
    check_entries(*backup_next_token_ids, "backup_next_token_ids", num_reqs, "R = sampled_token_ids.size(0)");
  } else {
    check_tensor(*token_ids, "token_ids", {c10::kInt}, 2, anchor);
    TORCH_CHECK_VALUE(size_of<Int>(*token_ids, 0) >= num_reqs, "token_ids must have at least R = ", num_reqs,
                      " rows, got ", size_of<Int>(*token_ids, 0));
    check_tensor(*num_tokens_no_spec, "num_tokens_no_spec", {c10::kInt}, 1, anchor);
    check_entries(*num_tokens_no_spec, "num_tokens_no_spec", num_reqs, "R = sampled_token_ids.size(0)");
  }
  TORCH_CHECK_VALUE(cu_num_draft_tokens.has_value() == query_start_loc.has_value(),
                    "cu_num_draft_tokens and query_start_loc must be given together");
  const bool padded_path = cu_num_draft_tokens.has_value();
  TORCH_CHECK_VALUE(num_rejected_tokens.has_value() == padded_path && token_indices_to_sample.has_value() == padded_path,
                    "num_rejected_tokens and token_indices_to_sample are computed with cu_num_draft_tokens and "
                    "query_start_loc, and only then");
  if (padded_path) {
    check_tensor(*cu_num_draft_tokens, "cu_num_draft_tokens", {c10::kInt}, 1, anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(*cu_num_draft_tokens) == num_reqs, "cu_num_draft_tokens must have R = ", num_reqs,
                      " entries (R = sampled_token_ids.size(0)), got ", numel_of<Int>(*cu_num_draft_tokens));
    check_tensor(*query_start_loc, "query_start_loc", {c10::kInt}, 1, anchor);
    check_entries(*query_start_loc, "query_start_loc", num_reqs + 1, "R + 1 (R = sampled_token_ids.size(0))");
  }
  const std::initializer_list<std::pair<const at::Tensor*, const char*>> outputs = {
      {&next_token_ids, "next_token_ids"},
      {&valid_sampled_token_count, "valid_sampled_token_count"},
      {ptr(num_rejected_tokens), "num_rejected_tokens"},
      {ptr(token_indices_to_sample), "token_indices_to_sample"}};
  for (const auto& [out, name] : outputs) {
    if (out != nullptr) {
      check_tensor(*out, name, {c10::kInt}, 1, anchor);
      check_entries(*out, name, num_reqs, "R = sampled_token_ids.size(0)");
      padded_end(*out, name, num_reqs_padded, "num_reqs_padded", num_reqs, "R");
    }
  }
  check_outputs_alias_nothing(
      {{&next_token_ids, {"next_token_ids"}}, {&valid_sampled_token_count, {"valid_sampled_token_count"}},
       {ptr(num_rejected_tokens), {"num_rejected_tokens"}}, {ptr(token_indices_to_sample), {"token_indices_to_sample"}}},
      {{&sampled_token_ids, {"sampled_token_ids"}}, {ptr(discard_request_mask), {"discard_request_mask"}},
       {ptr(backup_next_token_ids), {"backup_next_token_ids"}}, {ptr(token_ids), {"token_ids"}},
       {ptr(num_tokens_no_spec), {"num_tokens_no_spec"}}, {ptr(cu_num_draft_tokens), {"cu_num_draft_tokens"}},
       {ptr(query_start_loc), {"query_start_loc"}}});
}

void prepare_next_token_ids(const at::Tensor& sampled_token_ids, int64_t vocab_size,
                            const OptTensor& discard_request_mask, const OptTensor& backup_next_token_ids,
                            const OptTensor& token_ids, const OptTensor& num_tokens_no_spec,
                            const OptTensor& cu_num_draft_tokens, const OptTensor& query_start_loc,
                            const at::Tensor& next_token_ids, const at::Tensor& valid_sampled_token_count,
                            const OptTensor& num_rejected_tokens, const OptTensor& token_indices_to_sample,
                            int64_t num_reqs_padded) {
  check_prepare_next_token_ids<int64_t>(sampled_token_ids, vocab_size, discard_request_mask, backup_next_token_ids,
                                        token_ids, num_tokens_no_spec, cu_num_draft_tokens, query_start_loc,
                                        next_token_ids, valid_sampled_token_count, num_rejected_tokens,
                                        token_indices_to_sample, num_reqs_padded);
  const int64_t num_reqs = sampled_token_ids.size(0);
  const bool padded_path = cu_num_draft_tokens.has_value();
  int64_t ends[4];
  int64_t k = 0;
  for (const at::Tensor* out : {&next_token_ids, &valid_sampled_token_count, ptr(num_rejected_tokens),
                                ptr(token_indices_to_sample)}) {
    ends[k++] = out == nullptr ? 0 : padded_end(*out, "", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  }
  if (padded_path) {
    const int32_t* cu = cu_num_draft_tokens->data_ptr<int32_t>();
    const int32_t* qsl = query_start_loc->data_ptr<int32_t>();
    for (int64_t r = 0; r < num_reqs; ++r) {
      const int64_t before = r > 0 ? cu[r - 1] : 0;
      TORCH_CHECK_VALUE(cu[r] >= before, "cu_num_draft_tokens must be non-decreasing from 0, but entry ", r, " = ",
                        cu[r], " < ", before);
      const int64_t drafts = cu[r] - before, query_len = static_cast<int64_t>(qsl[r + 1]) - qsl[r];
      TORCH_CHECK_VALUE(drafts + 1 <= query_len, "cu_num_draft_tokens gives request ", r, " ", drafts,
                        " drafts, but its query_start_loc query of ", query_len,
                        " tokens holds at most query length - 1");
    }
  }
  kernels::NextTokensShape s;
  s.num_reqs = num_reqs;
  s.sampled_cols = sampled_token_ids.size(1);
  s.sampled_stride = sampled_token_ids.stride(0);
  s.vocab_size = vocab_size;
  s.token_cols = token_ids.has_value() ? token_ids->size(1) : 0;
  s.token_stride = token_ids.has_value() ? token_ids->stride(0) : 0;
  s.has_backup = backup_next_token_ids.has_value();
  s.padded_path = padded_path;
  s.next_end = ends[0];
  s.count_end = ends[1];
  s.rejected_end = ends[2];
  s.index_end = ends[3];
  AT_DISPATCH_INDEX_TYPES(sampled_token_ids.scalar_type(), "prepare_next_token_ids", [&] {
    kernels::prepare_next_token_ids<index_t>(
        sampled_token_ids.data_ptr<index_t>(),
        discard_request_mask.has_value() ? discard_request_mask->data_ptr<bool>() : nullptr,
        backup_next_token_ids.has_value() ? backup_next_token_ids->data_ptr<int32_t>() : nullptr,
        token_ids.has_value() ? token_ids->data_ptr<int32_t>() : nullptr,
        num_tokens_no_spec.has_value() ? num_tokens_no_spec->data_ptr<int32_t>() : nullptr,
        padded_path ? cu_num_draft_tokens->data_ptr<int32_t>() : nullptr,
        padded_path ? query_start_loc->data_ptr<int32_t>() : nullptr, next_token_ids.data_ptr<int32_t>(),
        valid_sampled_token_count.data_ptr<int32_t>(),
        padded_path ? num_rejected_tokens->data_ptr<int32_t>() : nullptr,
        padded_path ? token_indices_to_sample->data_ptr<int32_t>() : nullptr, s);
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "prepare_next_token_ids(Tensor sampled_token_ids, int vocab_size, Tensor? discard_request_mask, "
      "Tensor? backup_next_token_ids, Tensor? token_ids, Tensor? num_tokens_no_spec, Tensor? cu_num_draft_tokens, "
      "Tensor? query_start_loc, Tensor(a!) next_token_ids, Tensor(b!) valid_sampled_token_count, "
      "Tensor(c!)? num_rejected_tokens, Tensor(d!)? token_indices_to_sample, int num_reqs_padded) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("prepare_next_token_ids", &prepare_next_token_ids); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("prepare_next_token_ids", &check_prepare_next_token_ids<c10::SymInt>); }

}  // namespace specops::cpu
