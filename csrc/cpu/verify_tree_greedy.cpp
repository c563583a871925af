// verify_tree_greedy: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the value checks (flat indices inside the batch, links inside the
// request's row), the walk.
#include <torch/library.h>

#include "cpu/tree_checks.h"
#include "kernels/verify_tree_greedy.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_verify_tree_greedy(const at::Tensor& predicts, const at::Tensor& accept_index,
                              const at::Tensor& accept_token_num, const at::Tensor& candidates,
                              const at::Tensor& retrive_index, const at::Tensor& retrive_next_token,
                              const at::Tensor& retrive_next_sibling, const at::Tensor& target_predict) {
  check_tensor(candidates, "candidates", {c10::kLong}, 2);
  const Anchor anchor = anchor_of(candidates, "candidates");
  const Int batch = size_of<Int>(candidates, 0);
  const Int n = size_of<Int>(candidates, 1);
  TORCH_CHECK_VALUE(n >= 1, "candidates must have at least one column (the root), got shape ", candidates.sym_sizes());
  check_tree_matrix<Int>(candidates, "candidates", batch, n, "B", "n");
  check_tensor(retrive_index, "retrive_index", {c10::kLong}, 2, anchor);
  check_tensor(retrive_next_token, "retrive_next_token", {c10::kLong}, 2, anchor);
  check_tensor(retrive_next_sibling, "retrive_next_sibling", {c10::kLong}, 2, anchor);
  check_tensor(target_predict, "target_predict", {c10::kLong}, 2, anchor);
  check_tensor(predicts, "predicts", {c10::kInt}, 1, anchor);
  check_tensor(accept_index, "accept_index", {c10::kInt}, 2, anchor);
  check_tensor(accept_token_num, "accept_token_num", {c10::kInt}, 1, anchor);
  const char* rows = "B = candidates.size(0)";
  const char* columns = "n = candidates.size(1)";
  check_tree_matrix<Int>(retrive_index, "retrive_index", batch, n, rows, columns);
  check_tree_matrix<Int>(retrive_next_token, "retrive_next_token", batch, n, rows, columns);
  check_tree_matrix<Int>(retrive_next_sibling, "retrive_next_sibling", batch, n, rows, columns);
  check_tree_matrix<Int>(target_predict, "target_predict", batch, n, rows, columns);
  const Int num_spec = size_of<Int>(accept_index, 1);
  TORCH_CHECK_VALUE(num_spec >= 1, "accept_index must have at least one column (the root), got shape ",
                    accept_index.sym_sizes());
  check_tree_matrix<Int>(accept_index, "accept_index", batch, num_spec, rows, "S");
  TORCH_CHECK_VALUE(numel_of<Int>(accept_token_num) == batch, "accept_token_num must have B = ", batch,
                    " entries (B = candidates.size(0)), got ", numel_of<Int>(accept_token_num));
  TORCH_CHECK_VALUE(numel_of<Int>(predicts) == batch * n, "predicts must have B * n = ", batch * n,
                    " entries (candidates' shape), got ", numel_of<Int>(predicts));
  check_outputs_alias_nothing({{&predicts, {"predicts"}}, {&accept_index, {"accept_index"}},
                               {&accept_token_num, {"accept_token_num"}}},
                              {{&candidates, {"candidates"}}, {&retrive_index, {"retrive_index"}},
                               {&retrive_next_token, {"retrive_next_token"}},
                               {&retrive_next_sibling, {"retrive_next_sibling"}},
                               {&target_predict, {"target_predict"}}});
}

void check_links(const at::Tensor& links, const char* name, int64_t lowest, int64_t end) {
  const int64_t* values = links.data_ptr<int64_t>();
  const int64_t n = links.size(1);
  for (int64_t e = 0; e < links.numel(); ++e) {
    TORCH_CHECK_VALUE(values[e] >= lowest && values[e] < end, name, "[", e / n, ", ", e % n, "] = ", values[e],
                      " must be in [", lowest, ", ", end, ")");
  }
}

void verify_tree_greedy(const at::Tensor& predicts, const at::Tensor& accept_index, const at::Tensor& accept_token_num,
                        const at::Tensor& candidates, const at::Tensor& retrive_index,
                        const at::Tensor& retrive_next_token, const at::Tensor& retrive_next_sibling,
                        const at::Tensor& target_predict) {
  check_verify_tree_greedy<int64_t>(predicts, accept_index, accept_token_num, candidates, retrive_index,
                                    retrive_next_token, retrive_next_sibling, target_predict);
  kernels::VerifyTreeShape s;
  s.batch = candidates.size(0);
  s.num_draft = candidates.size(1);
  s.num_spec = accept_index.size(1);
  TORCH_CHECK_VALUE(s.batch * s.num_draft <= INT32_MAX, "B * n = ", s.batch * s.num_draft,
                    " flat indices must fit accept_index's int32");
  check_links(retrive_index, "retrive_index", 0, s.batch * s.num_draft);
  check_links(retrive_next_token, "retrive_next_token", -1, s.num_draft);
  check_links(retrive_next_sibling, "retrive_next_sibling", -1, s.num_draft);
  kernels::verify_tree_greedy(predicts.data_ptr<int32_t>(), accept_index.data_ptr<int32_t>(),
                              accept_token_num.data_ptr<int32_t>(), candidates.data_ptr<int64_t>(),
                              retrive_index.data_ptr<int64_t>(), retrive_next_token.data_ptr<int64_t>(),
                              retrive_next_sibling.data_ptr<int64_t>(), target_predict.data_ptr<int64_t>(), s);
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/tree_speculation.md: SGLang's verify_tree_greedy (its argument names), outputs in place.
  m.def(
      "verify_tree_greedy(Tensor(a!) predicts, Tensor(b!) accept_index, Tensor(c!) accept_token_num, "
      "Tensor candidates, Tensor retrive_index, Tensor retrive_next_token, Tensor retrive_next_sibling, "
      "Tensor target_predict) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("verify_tree_greedy", &verify_tree_greedy); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("verify_tree_greedy", &check_verify_tree_greedy<c10::SymInt>); }

}  // namespace specops::cpu
