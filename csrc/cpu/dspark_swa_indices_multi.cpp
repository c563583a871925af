// dspark_swa_indices_multi: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks, the values of the shared batch once and of every group, then every
// group's indices.
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>

#include "cpu/checks.h"
#include "kernels/cp_token_split.h"
#include "kernels/dspark_swa_indices_multi.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_dspark_swa_indices_multi(at::TensorList block_tables, const at::Tensor& query_start_loc,
                                    const at::Tensor& seq_lens, c10::IntArrayRef windows,
                                    int64_t num_speculative_tokens, c10::IntArrayRef block_sizes, int64_t num_tokens,
                                    c10::IntArrayRef widths, int64_t cp_size, int64_t cp_rank, at::TensorList out,
                                    at::TensorList out_lens) {
  const size_t num_groups = block_tables.size();
  for (const auto& [values, name] : {std::pair{windows.size(), "windows"}, std::pair{block_sizes.size(), "block_sizes"},
                                     std::pair{widths.size(), "widths"}, std::pair{out.size(), "out"},
                                     std::pair{out_lens.size(), "out_lens"}}) {
    TORCH_CHECK_VALUE(values == num_groups, name, " must have one entry per block table (len(block_tables) = ",
                      num_groups, "), got ", values);
  }
  const Int num_reqs = check_query_start_loc_meta<Int>(query_start_loc);
  const Anchor anchor = anchor_of(query_start_loc, "query_start_loc");
  check_tensor(seq_lens, "seq_lens", {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(seq_lens) == num_reqs, "seq_lens must have R = query_start_loc.numel() - 1 = ",
                    num_reqs, " entries, got ", numel_of<Int>(seq_lens));
  check_int32_range(num_speculative_tokens, "num_speculative_tokens", 0);
  check_cp_rank(cp_size, cp_rank, "cp_size");  // first: the bound below subtracts cp_size
  check_token_count(num_tokens, "num_tokens", cp_size);
  const int64_t rows = kernels::cp_token_split(num_tokens, cp_size, cp_rank).tokens_per_rank;
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t index = static_cast<int64_t>(g);
    const at::Tensor& table = block_tables[g];
    check_tensor(table, ArgName{"block_tables", index}, {c10::kInt}, 2, anchor);
    TORCH_CHECK_VALUE(size_of<Int>(table, 0) >= num_reqs, "block_tables[", g,
                      "] must have at least R = query_start_loc.numel() - 1 = ", num_reqs, " rows, got ",
                      size_of<Int>(table, 0));
    // Positions are int32: so are the window, the draft block and the block size, and their sums
    // below fit int64.
    check_int32_range(windows[g], ArgName{"windows", index}, 0);
    check_int32_range(block_sizes[g], ArgName{"block_sizes", index}, 1);
    const int64_t least = std::max<int64_t>(1, windows[g] + num_speculative_tokens);
    TORCH_CHECK_VALUE(widths[g] >= least, "widths[", g, "] must be >= max(1, windows[", g,
                      "] + num_speculative_tokens = ", windows[g] + num_speculative_tokens, "), got ", widths[g]);
    const at::Tensor& target = out[g];
    check_tensor(target, ArgName{"out", index}, {c10::kInt}, 3, anchor);
    check_rows_disjoint(target, ArgName{"out", index});
    TORCH_CHECK_VALUE(size_of<Int>(target, 0) >= rows && size_of<Int>(target, 1) == 1 &&
                          size_of<Int>(target, 2) == widths[g],
                      "out[", g, "] must have shape [>= ", rows, ", 1, widths[", g, "] = ", widths[g], "], got ",
                      target.sym_sizes());
    const at::Tensor& target_lens = out_lens[g];
    check_tensor(target_lens, ArgName{"out_lens", index}, {c10::kInt}, 1, anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(target_lens) >= rows, "out_lens[", g, "] must have at least ", rows,
                      " entries, got ", numel_of<Int>(target_lens));
  }
  // Every output is written once, and every input is read while outputs are written: an output
  // may share memory with nothing else.
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t index = static_cast<int64_t>(g);
    check_no_overlap(out_lens[g], ArgName{"out_lens", index}, out[g], ArgName{"out", index});
    for (size_t earlier = 0; earlier < g; ++earlier) {
      const int64_t other = static_cast<int64_t>(earlier);
      check_no_overlap(out[g], ArgName{"out", index}, out[earlier], ArgName{"out", other});
      check_no_overlap(out[g], ArgName{"out", index}, out_lens[earlier], ArgName{"out_lens", other});
      check_no_overlap(out_lens[g], ArgName{"out_lens", index}, out[earlier], ArgName{"out", other});
      check_no_overlap(out_lens[g], ArgName{"out_lens", index}, out_lens[earlier], ArgName{"out_lens", other});
    }
    for (const at::Tensor* output : {&out[g], &out_lens[g]}) {
      const ArgName name{output == &out[g] ? "out" : "out_lens", index};
      check_no_overlap(*output, name, query_start_loc, "query_start_loc");
      check_no_overlap(*output, name, seq_lens, "seq_lens");
      for (size_t table = 0; table < num_groups; ++table) {
        check_no_overlap(*output, name, block_tables[table], ArgName{"block_tables", static_cast<int64_t>(table)});
      }
    }
  }
}

void dspark_swa_indices_multi(at::TensorList block_tables, const at::Tensor& query_start_loc,
                              const at::Tensor& seq_lens, c10::IntArrayRef windows, int64_t num_speculative_tokens,
                              c10::IntArrayRef block_sizes, int64_t num_tokens, c10::IntArrayRef widths,
                              int64_t cp_size, int64_t cp_rank, at::TensorList out, at::TensorList out_lens) {
  check_dspark_swa_indices_multi<int64_t>(block_tables, query_start_loc, seq_lens, windows, num_speculative_tokens,
                                          block_sizes, num_tokens, widths, cp_size, cp_rank, out, out_lens);
  const size_t num_groups = block_tables.size();
  const int64_t num_real_tokens = check_query_start_loc_offsets(query_start_loc);
  const int64_t num_reqs = query_start_loc.numel() - 1;
  TORCH_CHECK_VALUE(num_tokens >= num_real_tokens, "num_tokens must be >= query_start_loc[R] = ", num_real_tokens,
                    ", got ", num_tokens);
  const kernels::CPTokenSplit split = kernels::cp_token_split(num_tokens, cp_size, cp_rank);
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* lens = seq_lens.data_ptr<int32_t>();
  for (int64_t r = 0; r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(lens[r] >= 0, "seq_lens must be >= 0, but seq_lens[", r, "] = ", lens[r]);
  }

  c10::SmallVector<kernels::DSparkGroup, 4> groups(num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    const at::Tensor& table = block_tables[g];
    const at::Tensor& target = out[g];
    const at::Tensor& target_lens = out_lens[g];
    kernels::DSparkGroup& group = groups[g];
    group.block_table = table.data_ptr<int32_t>();
    group.out = target.data_ptr<int32_t>();
    group.out_lens = target_lens.data_ptr<int32_t>();
    kernels::DSparkShape& shape = group.shape;
    shape.num_reqs = num_reqs;
    shape.rows_begin = split.local_start;
    shape.num_rows = split.tokens_per_rank;
    shape.width = widths[g];
    shape.window = windows[g];
    shape.block_size = block_sizes[g];
    shape.table_rows = table.size(0);
    shape.table_cols = table.size(1);
    shape.table_stride = table.stride(0);
    shape.out_stride = target.stride(0);

    // What dspark_swa_indices rejects for this group's call alone, in its order.
    const int64_t covered = table.size(1) * block_sizes[g];
    for (int64_t r = 0; r < num_reqs; ++r) {
      const int64_t query_len = qsl[r + 1] - qsl[r];
      if (query_len == 0) continue;  // a request without tokens has no row to fill
      TORCH_CHECK_VALUE(lens[r] <= covered, "seq_lens[", r, "] = ", lens[r], " is beyond block_tables[", g, "] (",
                        table.size(1), " blocks of ", block_sizes[g], " tokens per row)");
      const int64_t visible = lens[r] - std::max<int64_t>(lens[r] - query_len - windows[g], 0);
      TORCH_CHECK_VALUE(visible <= widths[g], "widths[", g, "] = ", widths[g], " is too small for request ", r,
                        ", which sees ", visible, " tokens (its query of ", query_len, " plus windows[", g, "] = ",
                        windows[g], ")");
      const int64_t past = kernels::find_position_past_int32(group.block_table, r,
                                                             kernels::visible_range(query_len, lens[r], shape), shape);
      TORCH_CHECK_VALUE(past < 0, "out[", g, "] is int32, but position ", past, " of request ", r,
                        " has a slot past 2^31 - 1 (its block id in block_tables[", g, "] times block_sizes[", g,
                        "] = ", block_sizes[g], ")");
    }
  }
  kernels::dspark_swa_indices_multi(qsl, lens, groups.data(), static_cast<int64_t>(num_groups));
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "dspark_swa_indices_multi(Tensor[] block_tables, Tensor query_start_loc, Tensor seq_lens, int[] windows, "
      "int num_speculative_tokens, int[] block_sizes, int num_tokens, int[] widths, int cp_size, int cp_rank, "
      "Tensor(a!)[] out, Tensor(b!)[] out_lens) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("dspark_swa_indices_multi", &dspark_swa_indices_multi); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("dspark_swa_indices_multi", &check_dspark_swa_indices_multi<c10::SymInt>);
}

}  // namespace specops::cpu
