// query_start_loc_tokens: query_start_loc[R] read on the host after query_start_loc's own checks
// (int32 [R + 1], from 0, never decreasing), for a wrapper that sizes an output from the token
// count (ops/prepare_positions_and_seq_lens.py): the one home of those checks serves it too.
#include <torch/library.h>

#include "cpu/checks.h"

namespace specops::cpu {
namespace {

int64_t query_start_loc_tokens(const at::Tensor& query_start_loc) {
  return check_query_start_loc_values(query_start_loc);
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // Host-only: query_start_loc[R] after query_start_loc's checks (the token count a wrapper sizes
  // an output from).
  m.def("query_start_loc_tokens(Tensor query_start_loc) -> int");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("query_start_loc_tokens", &query_start_loc_tokens); }

}  // namespace specops::cpu
