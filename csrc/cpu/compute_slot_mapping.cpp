// CPU op for compute_slot_mapping: validates, then runs the kernel body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/checks.h"
#include "kernels/compute_slot_mapping.h"

namespace specops::cpu {
namespace {

void compute_slot_mapping(const at::Tensor& query_start_loc, const at::Tensor& positions,
                          const at::Tensor& block_table, int64_t block_size, const at::Tensor& out,
                          int64_t blocks_per_kv_block, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
                          const std::optional<at::Tensor>& idx_mapping, int64_t num_tokens_padded) {
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1);
  check_query_start_loc(query_start_loc, positions.numel(), "positions");
  check_tensor(block_table, "block_table", {c10::kInt}, 2);
  check_tensor(out, "out", {c10::kLong, c10::kInt}, 1);
  check_positive(block_size, "block_size");
  check_positive(blocks_per_kv_block, "blocks_per_kv_block");
  check_cp_rank(cp_world_size, cp_rank, "cp_world_size");
  check_positive(cp_interleave, "cp_interleave");
  // Divided, not multiplied: the product of three int64 arguments can overflow.
  TORCH_CHECK_VALUE(block_size <= INT32_MAX / blocks_per_kv_block / cp_world_size,
                    "block_size * blocks_per_kv_block * cp_world_size must be < 2^31, got ", block_size, " * ",
                    blocks_per_kv_block, " * ", cp_world_size);
  const int64_t kv_block = block_size * blocks_per_kv_block;
  TORCH_CHECK_VALUE(kv_block % cp_interleave == 0, "cp_interleave must divide block_size * blocks_per_kv_block = ",
                    kv_block, ", got ", cp_interleave);
  const int64_t num_reqs = query_start_loc.numel() - 1;
  const int64_t num_tokens = positions.numel();
  TORCH_CHECK_VALUE(num_tokens_padded >= num_tokens && num_tokens_padded <= out.numel(),
                    "num_tokens_padded must be in [num_tokens = ", num_tokens, ", out.numel() = ", out.numel(),
                    "], got ", num_tokens_padded);
  if (idx_mapping.has_value()) {
    check_tensor(*idx_mapping, "idx_mapping", {c10::kInt, c10::kLong}, 1);
    TORCH_CHECK_VALUE(idx_mapping->numel() == num_reqs, "idx_mapping must have R = query_start_loc.numel() - 1 = ", num_reqs,
                      " entries, got ", idx_mapping->numel());
  }

  kernels::SlotMappingShape shape;
  shape.num_reqs = num_reqs;
  shape.num_tokens = num_tokens;
  shape.num_tokens_padded = num_tokens_padded;
  shape.block_table_rows = block_table.size(0);
  shape.block_table_cols = block_table.size(1);
  shape.block_table_stride = block_table.stride(0);
  shape.block_size = block_size;
  shape.blocks_per_kv_block = blocks_per_kv_block;
  shape.cp_world_size = cp_world_size;
  shape.cp_rank = cp_rank;
  shape.cp_interleave = cp_interleave;

  const kernels::SlotMappingDivisors divisors(shape);
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* table = block_table.data_ptr<int32_t>();
  AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "compute_slot_mapping", [&] {
    using PosT = index_t;
    const PosT* pos = positions.data_ptr<PosT>();
    auto run = [&](auto* idx) {
      using IdxT = std::remove_const_t<std::remove_pointer_t<decltype(idx)>>;
      for (int64_t r = 0; idx != nullptr && r < num_reqs; ++r) {
        TORCH_CHECK_VALUE(idx[r] < shape.block_table_rows, "idx_mapping[", r, "] = ", static_cast<int64_t>(idx[r]),
                          " is past block_table, which has ", shape.block_table_rows, " rows");
      }
      const int64_t bad = kernels::find_position_beyond_block_table<PosT, IdxT>(qsl, pos, idx, shape, divisors);
      TORCH_CHECK_VALUE(bad < 0, "positions[", bad, "] = ", static_cast<int64_t>(pos[bad < 0 ? 0 : bad]),
                        " is beyond block_table (", shape.block_table_cols, " blocks of ", block_size,
                        " tokens per row) or negative");
      if (out.scalar_type() == c10::kLong) {
        kernels::compute_slot_mapping<PosT, IdxT, int64_t>(qsl, pos, table, idx, out.data_ptr<int64_t>(), shape, divisors);
      } else {
        kernels::compute_slot_mapping<PosT, IdxT, int32_t>(qsl, pos, table, idx, out.data_ptr<int32_t>(), shape, divisors);
      }
    };
    if (!idx_mapping.has_value()) {
      run(static_cast<const int32_t*>(nullptr));
    } else if (idx_mapping->scalar_type() == c10::kLong) {
      run(static_cast<const int64_t*>(idx_mapping->data_ptr<int64_t>()));
    } else {
      run(static_cast<const int32_t*>(idx_mapping->data_ptr<int32_t>()));
    }
  });
}

}  // namespace

TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("compute_slot_mapping", &compute_slot_mapping); }

}  // namespace specops::cpu
