// dspark_swa_indices (docs/context_parallel.md): its metadata checks (the Meta kernel, and every
// backend's first step), then the CPU op: the checks, the values, the kernel body.
#include <torch/library.h>

#include "cpu/checks.h"
#include "kernels/cp_token_split.h"
#include "kernels/dspark_swa_indices.h"

namespace specops::cpu {
namespace {

// The int arguments (the Python wrapper sizes its outputs from them).
void check_sizes(int64_t window, int64_t num_speculative_tokens, int64_t block_size, int64_t num_tokens, int64_t width,
                 int64_t cp_size, int64_t cp_rank) {
  // Positions are int32: so are the window, the draft block and the block size, and their sums
  // below fit int64.
  check_int32_range(window, "window", 0);
  check_int32_range(num_speculative_tokens, "num_speculative_tokens", 0);
  check_int32_range(block_size, "block_size", 1);
  TORCH_CHECK_VALUE(width >= 1 && width >= window + num_speculative_tokens,
                    "width must be >= max(1, window + num_speculative_tokens = ", window + num_speculative_tokens,
                    "), got ", width);
  check_cp_rank(cp_size, cp_rank, "cp_size");  // first: the bound below subtracts cp_size
  check_token_count(num_tokens, "num_tokens", cp_size);
}

template <typename Int>
void check_dspark_swa_indices(const at::Tensor& block_table, const at::Tensor& query_start_loc,
                              const at::Tensor& seq_lens, int64_t window, int64_t num_speculative_tokens,
                              int64_t block_size, int64_t num_tokens, int64_t width, int64_t cp_size, int64_t cp_rank,
                              const at::Tensor& out, const at::Tensor& out_lens) {
  check_tensor(out, "out", {c10::kInt}, 3);
  check_rows_disjoint(out, "out");
  const Anchor anchor = anchor_of(out, "out");
  const Int num_reqs = check_query_start_loc_meta<Int>(query_start_loc, &anchor);
  check_tensor(block_table, "block_table", {c10::kInt}, 2, anchor);
  TORCH_CHECK_VALUE(size_of<Int>(block_table, 0) >= num_reqs,
                    "block_table must have at least R = query_start_loc.numel() - 1 = ", num_reqs, " rows, got ",
                    size_of<Int>(block_table, 0));
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(seq_lens) == num_reqs, "seq_lens must have R = query_start_loc.numel() - 1 = ",
                    num_reqs, " entries, got ", numel_of<Int>(seq_lens));
  check_sizes(window, num_speculative_tokens, block_size, num_tokens, width, cp_size, cp_rank);
  const int64_t rows = kernels::cp_token_split(num_tokens, cp_size, cp_rank).tokens_per_rank;
  TORCH_CHECK_VALUE(size_of<Int>(out, 0) >= rows && size_of<Int>(out, 1) == 1 && size_of<Int>(out, 2) == width,
                    "out must have shape [>= ", rows, ", 1, width = ", width, "], got ", out.sym_sizes());
  check_tensor(out_lens, "out_lens", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(out_lens) >= rows, "out_lens must have at least ", rows, " entries, got ",
                    numel_of<Int>(out_lens));
  check_outputs_alias_nothing({{&out, {"out"}}, {&out_lens, {"out_lens"}}},
                              {{&block_table, {"block_table"}}, {&query_start_loc, {"query_start_loc"}},
                               {&seq_lens, {"seq_lens"}}});
}

void dspark_swa_indices(const at::Tensor& block_table, const at::Tensor& query_start_loc, const at::Tensor& seq_lens,
                        int64_t window, int64_t num_speculative_tokens, int64_t block_size, int64_t num_tokens,
                        int64_t width, int64_t cp_size, int64_t cp_rank, const at::Tensor& out,
                        const at::Tensor& out_lens) {
  check_dspark_swa_indices<int64_t>(block_table, query_start_loc, seq_lens, window, num_speculative_tokens, block_size,
                                    num_tokens, width, cp_size, cp_rank, out, out_lens);
  const int64_t num_real_tokens = check_query_start_loc_offsets(query_start_loc);
  const int64_t num_reqs = query_start_loc.numel() - 1;
  TORCH_CHECK_VALUE(num_tokens >= num_real_tokens, "num_tokens must be >= query_start_loc[R] = ", num_real_tokens,
                    ", got ", num_tokens);
  const kernels::CPTokenSplit split = kernels::cp_token_split(num_tokens, cp_size, cp_rank);

  kernels::DSparkShape shape;
  shape.num_reqs = num_reqs;
  shape.rows_begin = split.local_start;
  shape.num_rows = split.tokens_per_rank;
  shape.width = width;
  shape.window = window;
  shape.block_size = block_size;
  shape.table_rows = block_table.size(0);
  shape.table_cols = block_table.size(1);
  shape.table_stride = block_table.stride(0);
  shape.out_stride = out.stride(0);
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  const int32_t* table = block_table.data_ptr<int32_t>();
  const int64_t covered = block_table.size(1) * block_size;
  for (int64_t r = 0; r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(lens[r] >= 0, "seq_lens must be >= 0, but seq_lens[", r, "] = ", lens[r]);
    const int64_t query_len = qsl[r + 1] - qsl[r];
    if (query_len == 0) continue;  // a request without tokens has no row to fill
    TORCH_CHECK_VALUE(lens[r] <= covered, "seq_lens[", r, "] = ", lens[r], " is beyond block_table (",
                      block_table.size(1), " blocks of ", block_size, " tokens per row)");
    const int64_t visible = lens[r] - std::max<int64_t>(lens[r] - query_len - window, 0);
    TORCH_CHECK_VALUE(visible <= width, "width = ", width, " is too small for request ", r, ", which sees ", visible,
                      " tokens (its query of ", query_len, " plus the window of ", window, ")");
    const int64_t past = kernels::find_position_past_int32(table, r, kernels::visible_range(query_len, lens[r], shape),
                                                           shape);
    TORCH_CHECK_VALUE(past < 0, "out is int32, but position ", past, " of request ", r,
                      " has a slot past 2^31 - 1 (its block id in block_table times block_size = ", block_size, ")");
  }

  kernels::dspark_swa_indices(table, qsl, lens, out.data_ptr<int32_t>(),
                              out_lens.data_ptr<int32_t>(), shape);
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "dspark_swa_indices(Tensor block_table, Tensor query_start_loc, Tensor seq_lens, int window, "
      "int num_speculative_tokens, int block_size, int num_tokens, int width, int cp_size, int cp_rank, "
      "Tensor(a!) out, Tensor(b!) out_lens) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("dspark_swa_indices", &dspark_swa_indices); }
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("dspark_swa_indices", &check_dspark_swa_indices<c10::SymInt>); }

}  // namespace specops::cpu
