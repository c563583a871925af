// pcp_local_inputs: its metadata checks (the Meta kernel, and every backend's first step), then the
// CPU op: the checks, the values, the kernel body.
#include <torch/library.h>

#include <tuple>

#include "cpu/checks.h"
#include "kernels/pcp_local_inputs.h"

namespace specops::cpu {
namespace {

template <typename IdT, typename PosT, typename OutPosT>
void run(const at::Tensor& global_input_ids, const at::Tensor& global_positions, const at::Tensor& local_gather_idx,
         const at::Tensor& local_query_start_loc, const at::Tensor& input_ids, const at::Tensor& positions,
         const at::Tensor& seq_lens, const kernels::PcpLocalInputsShape& shape) {
  kernels::pcp_local_inputs<IdT, PosT, OutPosT>(
      global_input_ids.data_ptr<IdT>(), global_positions.data_ptr<PosT>(), local_gather_idx.data_ptr<int64_t>(),
      local_query_start_loc.data_ptr<int32_t>(), input_ids.data_ptr<IdT>(), positions.data_ptr<OutPosT>(),
      seq_lens.data_ptr<int32_t>(), shape);
}

template <typename Int>
void check_pcp_local_inputs(const at::Tensor& global_input_ids, const at::Tensor& global_positions,
                            const at::Tensor& local_gather_idx, const at::Tensor& local_query_start_loc,
                            int64_t num_local_tokens, const at::Tensor& input_ids, const at::Tensor& positions,
                            const at::Tensor& seq_lens, int64_t num_reqs_padded) {
  check_tensor(input_ids, "input_ids", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(input_ids, "input_ids");
  check_tensor(global_input_ids, "global_input_ids", {c10::kInt, c10::kLong}, 1, anchor);
  check_tensor(global_positions, "global_positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_tensor(local_gather_idx, "local_gather_idx", {c10::kLong}, 1, anchor);
  check_tensor(local_query_start_loc, "local_query_start_loc", {c10::kInt}, 1, anchor);
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1, anchor);
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(input_ids.scalar_type() == global_input_ids.scalar_type(),
                    "input_ids must have the dtype of global_input_ids (", dtype_name(global_input_ids.scalar_type()),
                    "), got ", dtype_name(input_ids.scalar_type()));
  const Int L = numel_of<Int>(local_gather_idx);
  TORCH_CHECK_VALUE(numel_of<Int>(local_query_start_loc) >= 1,
                    "local_query_start_loc must have n + 1 >= 1 entries, got 0");
  const Int n = numel_of<Int>(local_query_start_loc) - 1;
  TORCH_CHECK_VALUE(num_local_tokens >= 0 && L >= num_local_tokens,
                    "num_local_tokens must be in [0, L = local_gather_idx.numel() = ", L, "], got ", num_local_tokens);
  check_entries(input_ids, "input_ids", L, "L = local_gather_idx.numel()");
  check_entries(positions, "positions", L, "L = local_gather_idx.numel()");
  check_entries(seq_lens, "seq_lens", n, "n = local_query_start_loc.numel() - 1");
  TORCH_CHECK_VALUE(num_reqs_padded >= n && numel_of<Int>(seq_lens) >= num_reqs_padded,
                    "num_reqs_padded must be in [n = local_query_start_loc.numel() - 1 = ", n,
                    ", seq_lens.numel() = ", numel_of<Int>(seq_lens), "], got ", num_reqs_padded);
  check_outputs_alias_nothing({{&input_ids, {"input_ids"}}, {&positions, {"positions"}}, {&seq_lens, {"seq_lens"}}},
                              {{&global_input_ids, {"global_input_ids"}}, {&global_positions, {"global_positions"}},
                               {&local_gather_idx, {"local_gather_idx"}},
                               {&local_query_start_loc, {"local_query_start_loc"}}});
}

void pcp_local_inputs(const at::Tensor& global_input_ids, const at::Tensor& global_positions,
                      const at::Tensor& local_gather_idx, const at::Tensor& local_query_start_loc,
                      int64_t num_local_tokens, const at::Tensor& input_ids, const at::Tensor& positions,
                      const at::Tensor& seq_lens, int64_t num_reqs_padded) {
  check_pcp_local_inputs<int64_t>(global_input_ids, global_positions, local_gather_idx, local_query_start_loc,
                                  num_local_tokens, input_ids, positions, seq_lens, num_reqs_padded);
  const int64_t n = local_query_start_loc.numel() - 1;
  // Values: the local query layout ends at N, and every real token's gather index is inside
  // both global tensors.
  const int32_t* lqsl = local_query_start_loc.data_ptr<int32_t>();
  TORCH_CHECK_VALUE(lqsl[0] == 0, "local_query_start_loc[0] must be 0, got ", lqsl[0]);
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK_VALUE(lqsl[i + 1] >= lqsl[i], "local_query_start_loc must be non-decreasing, but local_query_start_loc[",
                      i + 1, "] = ", lqsl[i + 1], " < local_query_start_loc[", i, "] = ", lqsl[i]);
  }
  TORCH_CHECK_VALUE(lqsl[n] == num_local_tokens, "local_query_start_loc[n] must equal num_local_tokens = ",
                    num_local_tokens, ", got ", lqsl[n]);
  const int64_t* gather = local_gather_idx.data_ptr<int64_t>();
  for (int64_t o = 0; o < num_local_tokens; ++o) {
    TORCH_CHECK_VALUE(gather[o] >= 0, "local_gather_idx[", o, "] = ", gather[o], " must be >= 0");
    TORCH_CHECK_VALUE(gather[o] < global_input_ids.numel(), "local_gather_idx[", o, "] = ", gather[o],
                      " is past global_input_ids (", global_input_ids.numel(), " entries)");
    TORCH_CHECK_VALUE(gather[o] < global_positions.numel(), "local_gather_idx[", o, "] = ", gather[o],
                      " is past global_positions (", global_positions.numel(), " entries)");
  }

  kernels::PcpLocalInputsShape shape;
  shape.num_global_ids = global_input_ids.numel();
  shape.num_global_positions = global_positions.numel();
  shape.num_local_tokens = num_local_tokens;
  shape.num_reqs = n;
  shape.num_ids_out = input_ids.numel();
  shape.num_positions_out = positions.numel();
  shape.num_reqs_padded = num_reqs_padded;
  const bool ids32 = input_ids.scalar_type() == c10::kInt;
  const bool in32 = global_positions.scalar_type() == c10::kInt;
  const bool out32 = positions.scalar_type() == c10::kInt;
  auto with_ids = [&](auto id) {
    using IdT = decltype(id);
    const auto args = std::tie(global_input_ids, global_positions, local_gather_idx, local_query_start_loc, input_ids,
                               positions, seq_lens);
    auto call = [&](auto in, auto out) {
      std::apply(run<IdT, decltype(in), decltype(out)>, std::tuple_cat(args, std::tie(shape)));
    };
    if (in32 && out32) {
      call(int32_t{}, int32_t{});
    } else if (in32) {
      call(int32_t{}, int64_t{});
    } else if (out32) {
      call(int64_t{}, int32_t{});
    } else {
      call(int64_t{}, int64_t{});
    }
  };
  if (ids32) {
    with_ids(int32_t{});
  } else {
    with_ids(int64_t{});
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "pcp_local_inputs(Tensor global_input_ids, Tensor global_positions, Tensor local_gather_idx, "
      "Tensor local_query_start_loc, int num_local_tokens, Tensor(a!) input_ids, Tensor(b!) positions, "
      "Tensor(c!) seq_lens, int num_reqs_padded) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("pcp_local_inputs", &pcp_local_inputs); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("pcp_local_inputs", &check_pcp_local_inputs<c10::SymInt>); }

}  // namespace specops::cpu
