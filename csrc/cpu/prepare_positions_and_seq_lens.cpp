// prepare_positions_and_seq_lens: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks, the value checks, the body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <optional>
#include <type_traits>

#include "cpu/accounting_checks.h"
#include "cpu/slot_mapping_checks.h"
#include "kernels/prepare_positions_and_seq_lens.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_prepare_positions_and_seq_lens(const at::Tensor& num_computed_tokens, const at::Tensor& query_start_loc,
                                          const at::Tensor& positions, const at::Tensor& seq_lens,
                                          int64_t num_tokens_padded, int64_t num_reqs_padded,
                                          const std::optional<at::Tensor>& idx_mapping) {
  check_tensor(num_computed_tokens, "num_computed_tokens", {c10::kInt}, 1);
  check_positions_and_seq_lens<Int>(num_computed_tokens, query_start_loc, positions, seq_lens, Int(num_tokens_padded),
                                    Int(num_reqs_padded), idx_mapping.has_value());
  if (idx_mapping.has_value()) {
    const Anchor anchor = anchor_of(num_computed_tokens, "num_computed_tokens");
    check_idx_mapping(idx_mapping, numel_of<Int>(query_start_loc) - 1, &anchor);
    check_outputs_alias_nothing({{&positions, {"positions"}}, {&seq_lens, {"seq_lens"}}},
                                {{&*idx_mapping, {"idx_mapping"}}});
  }
}

void prepare_positions_and_seq_lens(const at::Tensor& num_computed_tokens, const at::Tensor& query_start_loc,
                                    const at::Tensor& positions, const at::Tensor& seq_lens, int64_t num_tokens_padded,
                                    int64_t num_reqs_padded, const std::optional<at::Tensor>& idx_mapping) {
  check_prepare_positions_and_seq_lens<int64_t>(num_computed_tokens, query_start_loc, positions, seq_lens,
                                                num_tokens_padded, num_reqs_padded, idx_mapping);
  check_token_padding(query_start_loc, positions, num_tokens_padded);
  kernels::PositionsShape shape;
  shape.num_reqs = query_start_loc.numel() - 1;
  shape.num_tokens_padded = num_tokens_padded;
  shape.num_reqs_padded = num_reqs_padded;
  const int32_t* counts = num_computed_tokens.data_ptr<int32_t>();
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  with_idx_mapping(idx_mapping, [&](auto* idx) {
    using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
    check_rows_inside_table(idx, shape.num_reqs, num_computed_tokens.numel(), "num_computed_tokens");
    AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "prepare_positions_and_seq_lens", [&] {
      if (idx == nullptr) {
        kernels::prepare_positions_and_seq_lens<index_t>(counts, qsl, positions.data_ptr<index_t>(),
                                                         seq_lens.data_ptr<int32_t>(), shape);
      } else {
        kernels::prepare_positions_and_seq_lens<index_t, IdxT>(counts, num_computed_tokens.numel(), idx, qsl,
                                                               positions.data_ptr<index_t>(),
                                                               seq_lens.data_ptr<int32_t>(), shape);
      }
    });
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "prepare_positions_and_seq_lens(Tensor num_computed_tokens, Tensor query_start_loc, Tensor(a!) positions, "
      "Tensor(b!) seq_lens, int num_tokens_padded, int num_reqs_padded, Tensor? idx_mapping) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("prepare_positions_and_seq_lens", &prepare_positions_and_seq_lens); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("prepare_positions_and_seq_lens", &check_prepare_positions_and_seq_lens<c10::SymInt>);
}

}  // namespace specops::cpu
