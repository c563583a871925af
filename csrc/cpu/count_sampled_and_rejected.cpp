// count_sampled_and_rejected: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks, the kept counts' value checks, the count.
#include <torch/library.h>

#include "cpu/step_checks.h"
#include "kernels/count_sampled_and_rejected.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_count_sampled_and_rejected(const at::Tensor& num_sampled, const at::Tensor& seq_lens,
                                      const at::Tensor& cu_num_logits, const at::Tensor& idx_mapping,
                                      const at::Tensor& prefill_len, const at::Tensor& num_rejected,
                                      int64_t num_reqs_padded) {
  check_tensor(idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(idx_mapping, "idx_mapping");
  const Int num_reqs = numel_of<Int>(idx_mapping);
  check_tensor(num_sampled, "num_sampled", {c10::kInt}, 1, anchor);
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  check_tensor(cu_num_logits, "cu_num_logits", {c10::kInt}, 1, anchor);
  check_tensor(prefill_len, "prefill_len", {c10::kInt}, 1, anchor);
  check_tensor(num_rejected, "num_rejected", {c10::kInt}, 1, anchor);
  check_entries(num_sampled, "num_sampled", num_reqs, "R = idx_mapping.numel()");
  check_entries(seq_lens, "seq_lens", num_reqs, "R = idx_mapping.numel()");
  check_entries(num_rejected, "num_rejected", num_reqs, "R = idx_mapping.numel()");
  TORCH_CHECK_VALUE(numel_of<Int>(cu_num_logits) == num_reqs + 1, "cu_num_logits must have R + 1 = ", num_reqs + 1,
                    " entries (R = idx_mapping.numel()), got ", numel_of<Int>(cu_num_logits));
  if (num_reqs_padded >= 0) {
    padded_end(num_sampled, "num_sampled", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
    padded_end(num_rejected, "num_rejected", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  }
  check_outputs_alias_nothing({{&num_sampled, {"num_sampled"}}, {&num_rejected, {"num_rejected"}}},
                              {{&seq_lens, {"seq_lens"}}, {&cu_num_logits, {"cu_num_logits"}},
                               {&idx_mapping, {"idx_mapping"}}, {&prefill_len, {"prefill_len"}}});
}

void count_sampled_and_rejected(const at::Tensor& num_sampled, const at::Tensor& seq_lens,
                                const at::Tensor& cu_num_logits, const at::Tensor& idx_mapping,
                                const at::Tensor& prefill_len, const at::Tensor& num_rejected, int64_t num_reqs_padded) {
  check_count_sampled_and_rejected<int64_t>(num_sampled, seq_lens, cu_num_logits, idx_mapping, prefill_len,
                                            num_rejected, num_reqs_padded);
  const int64_t num_reqs = idx_mapping.numel();
  kernels::CountSampledShape shape;
  shape.num_reqs = num_reqs;
  shape.num_rows = prefill_len.numel();
  shape.sampled_end = padded_end(num_sampled, "num_sampled", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  shape.rejected_end = padded_end(num_rejected, "num_rejected", num_reqs_padded, "num_reqs_padded", num_reqs, "R");
  int32_t* sampled = num_sampled.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* cu = cu_num_logits.data_ptr<int32_t>();
  const int32_t* prefill = prefill_len.data_ptr<int32_t>();
  with_index_type(idx_mapping, [&](auto* idx) {
    check_request_rows(idx, num_reqs, shape.num_rows, "prefill_len");
    for (int64_t r = 0; r < num_reqs; ++r) {
      if (kernels::is_chunked(lens, idx, prefill, r, shape.num_rows)) continue;
      const int64_t num_logits = static_cast<int64_t>(cu[r + 1]) - cu[r];
      TORCH_CHECK_VALUE(sampled[r] >= 0 && sampled[r] <= num_logits, "num_sampled[", r, "] = ", sampled[r],
                        " must be in [0, cu_num_logits[", r + 1, "] - cu_num_logits[", r, "] = ", num_logits, "]");
    }
    kernels::count_sampled_and_rejected(sampled, lens, cu, idx, prefill, num_rejected.data_ptr<int32_t>(), shape);
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/step_bookkeeping.md: the spec-decode step's own bookkeeping (input ids, sampled and
  // rejected counts, request state, next tokens, later draft steps). A *_padded of -1: each
  // output padded to its own end.
  m.def(
      "count_sampled_and_rejected(Tensor(a!) num_sampled, Tensor seq_lens, Tensor cu_num_logits, "
      "Tensor idx_mapping, Tensor prefill_len, Tensor(b!) num_rejected, int num_reqs_padded) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("count_sampled_and_rejected", &count_sampled_and_rejected); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("count_sampled_and_rejected", &check_count_sampled_and_rejected<c10::SymInt>);
}

}  // namespace specops::cpu
