#pragma once
// Checks of one slot mapping's block table, output and sizes, shared by compute_slot_mapping and
// every op that computes slot mappings of KV-cache groups (named block_tables[g] etc. there).
#include <ATen/core/List.h>

#include <optional>
#include <sstream>
#include <string>

#include "cpu/checks.h"
#include "kernels/slot_math.h"

namespace specops::cpu {

struct SlotMappingArgNames {
  ArgName block_table{"block_table"};
  ArgName out{"out"};
  ArgName block_size{"block_size"};
  ArgName blocks_per_kv_block{"blocks_per_kv_block"};

  // The names of group g's arguments in ops that take one list per argument.
  static SlotMappingArgNames of_group(int64_t g) {
    return {{"block_tables", g}, {"slot_mappings", g}, {"block_sizes", g}, {"blocks_per_kv_block", g}};
  }
};

// One slot mapping's table on the anchor's device, the block size and CP layout, and
// num_tokens <= num_tokens_padded <= out_entries, the entries of its output.
template <typename Int>
void check_slot_mapping_layout(const at::Tensor& block_table, int64_t block_size, int64_t blocks_per_kv_block,
                               int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave, const Int& num_tokens,
                               const Int& num_tokens_padded, const Int& out_entries, const Anchor* anchor,
                               const SlotMappingArgNames& names) {
  check_tensor(block_table, names.block_table, {c10::kInt}, 2, anchor);
  check_positive(block_size, names.block_size);
  check_positive(blocks_per_kv_block, names.blocks_per_kv_block);
  check_context_parallel(cp_world_size, cp_rank, cp_interleave);
  // Divided, not multiplied: the product of three int64 arguments can overflow.
  TORCH_CHECK_VALUE(block_size <= INT32_MAX / blocks_per_kv_block / cp_world_size, names.block_size, " * ",
                    names.blocks_per_kv_block, " * cp_world_size must be < 2^31, got ", block_size, " * ",
                    blocks_per_kv_block, " * ", cp_world_size);
  const int64_t kv_block = block_size * blocks_per_kv_block;
  TORCH_CHECK_VALUE(kv_block % cp_interleave == 0, "cp_interleave must divide ", names.block_size, " * ",
                    names.blocks_per_kv_block, " = ", kv_block, ", got ", cp_interleave);
  TORCH_CHECK_VALUE(num_tokens_padded >= num_tokens && out_entries >= num_tokens_padded,
                    "num_tokens_padded must be in [num_tokens = ", num_tokens, ", ", names.out, ".numel() = ",
                    out_entries, "], got ", num_tokens_padded);
}

// One slot mapping's metadata: its output and table on the anchor's device, the block size and
// CP layout, and num_tokens <= num_tokens_padded <= out.numel().
template <typename Int>
void check_slot_mapping_args(const at::Tensor& block_table, int64_t block_size, const at::Tensor& out,
                             int64_t blocks_per_kv_block, int64_t cp_world_size, int64_t cp_rank,
                             int64_t cp_interleave, const Int& num_tokens, const Int& num_tokens_padded,
                             const Anchor* anchor, const SlotMappingArgNames& names = {}) {
  check_tensor(out, names.out, {c10::kLong, c10::kInt}, 1, anchor);
  check_slot_mapping_layout<Int>(block_table, block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave,
                                 num_tokens, num_tokens_padded, numel_of<Int>(out), anchor, names);
}

// One slot mapping's shape (its arguments checked).
inline kernels::SlotMappingShape slot_mapping_shape(const at::Tensor& block_table, int64_t block_size,
                                                    int64_t blocks_per_kv_block, int64_t cp_world_size,
                                                    int64_t cp_rank, int64_t cp_interleave, int64_t num_reqs,
                                                    int64_t num_tokens, int64_t num_tokens_padded) {
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
  return shape;
}

// The two above, on the host.
inline kernels::SlotMappingShape checked_slot_mapping_shape(const at::Tensor& block_table, int64_t block_size,
                                                            const at::Tensor& out, int64_t blocks_per_kv_block,
                                                            int64_t cp_world_size, int64_t cp_rank,
                                                            int64_t cp_interleave, int64_t num_reqs,
                                                            int64_t num_tokens, int64_t num_tokens_padded,
                                                            const SlotMappingArgNames& names = {}) {
  check_slot_mapping_args<int64_t>(block_table, block_size, out, blocks_per_kv_block, cp_world_size, cp_rank,
                                   cp_interleave, num_tokens, num_tokens_padded, nullptr, names);
  return slot_mapping_shape(block_table, block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave,
                            num_reqs, num_tokens, num_tokens_padded);
}

// The per-group arguments of the ops that map the slots of several KV-cache groups
// (prepare_spec_decode_inputs, advance_draft_step, advance_draft_steps,
// expand_parallel_draft_inputs, check_slot_mapping_positions), each a list of one entry per block
// table, and the op's CP layout, which a CP-sharded group uses.
struct GroupSettings {
  c10::IntArrayRef block_sizes;
  c10::IntArrayRef blocks_per_kv_block;
  const c10::List<bool>& cp_sharded;
  const c10::List<bool>& slot_mapping_enabled;  // empty for check_slot_mapping_positions, which maps every group
  int64_t cp_world_size, cp_rank, cp_interleave;

  struct Cp {
    int64_t world_size, rank, interleave;
  };
  // Group g's CP layout: the op's, or a single rank where the group is not CP-sharded.
  Cp cp(size_t g) const {
    if (cp_sharded.get(g)) return {cp_world_size, cp_rank, cp_interleave};
    return {1, 0, 1};
  }
  bool enabled(size_t g) const { return slot_mapping_enabled.get(g); }

  // Every list holds one entry per block table; has_enabled false: the op takes no
  // slot_mapping_enabled.
  void check(size_t num_groups, bool has_enabled = true) const {
    auto one_per_table = [num_groups](size_t size, const char* name) {
      TORCH_CHECK_VALUE(size == num_groups, name, " must have one entry per block table (len(block_tables) = ",
                        num_groups, "), got ", size);
    };
    one_per_table(block_sizes.size(), "block_sizes");
    one_per_table(blocks_per_kv_block.size(), "blocks_per_kv_block");
    one_per_table(cp_sharded.size(), "cp_sharded");
    if (has_enabled) one_per_table(slot_mapping_enabled.size(), "slot_mapping_enabled");
  }
};

// Calls run(idx) with idx_mapping's entries as `const int32_t*` or `const int64_t*`, or with a
// null `const int32_t*` when there is none (request r then reads row r).
template <typename Run>
void with_idx_mapping(const std::optional<at::Tensor>& idx_mapping, Run&& run) {
  if (!idx_mapping.has_value()) {
    run(static_cast<const int32_t*>(nullptr));
  } else if (idx_mapping->scalar_type() == c10::kLong) {
    run(static_cast<const int64_t*>(idx_mapping->data_ptr<int64_t>()));
  } else {
    run(static_cast<const int32_t*>(idx_mapping->data_ptr<int32_t>()));
  }
}

// Rejects a mapped row past the table (rows < 0 are unmapped requests: PAD, not an error).
template <typename IdxT, typename Name>
void check_rows_inside_table(const IdxT* idx_mapping, int64_t num_reqs, int64_t table_rows, const Name& table_name) {
  for (int64_t r = 0; idx_mapping != nullptr && r < num_reqs; ++r) {
    TORCH_CHECK_VALUE(idx_mapping[r] < table_rows, "idx_mapping[", r, "] = ", static_cast<int64_t>(idx_mapping[r]),
                      " is past ", table_name, ", which has ", table_rows, " rows");
  }
}

// An optional num_blocks' metadata (the blocks allocated to each row of `table`): int32 on the
// anchor's device, one entry per table row at least.
template <typename Int, typename Name, typename TableName>
void check_num_blocks(const at::Tensor& num_blocks, const Name& name, const at::Tensor& table,
                      const TableName& table_name, const Anchor* anchor) {
  check_tensor(num_blocks, name, {c10::kInt}, 1, anchor);
  TORCH_CHECK_VALUE(numel_of<Int>(num_blocks) >= size_of<Int>(table, 0), name, " must have one entry per row of ",
                    table_name, " (", size_of<Int>(table, 0), "), got ", numel_of<Int>(num_blocks));
}

// Checks an optional num_blocks and points the shape at it.
template <typename Name, typename TableName>
void use_num_blocks(const std::optional<at::Tensor>& num_blocks, const Name& name, const at::Tensor& table,
                    const TableName& table_name, kernels::SlotMappingShape& shape) {
  if (!num_blocks.has_value()) return;
  check_num_blocks<int64_t>(*num_blocks, name, table, table_name, nullptr);
  shape.num_blocks = num_blocks->data_ptr<int32_t>();
}

// Why `position` of `request` (reading `row` of the table) cannot be mapped: past its row's
// allocated blocks, or past the table, or not a position. Only called on a rejected position.
template <typename TableName>
std::string position_outside_message(int64_t position, int64_t request, int64_t row, const kernels::SlotMappingShape& s,
                                     const kernels::SlotMappingDivisors& d, const TableName& table_name,
                                     const std::string& num_blocks_name) {
  std::ostringstream message;
  if (position >= 0 && position <= INT32_MAX && s.num_blocks != nullptr) {
    const kernels::TokenPlacement p =
        kernels::place_token<kernels::CpLayout::kInterleaved>(static_cast<uint32_t>(position), d);
    if (p.column < s.block_table_cols) {
      message << "position " << position << " of request " << request << " is past its allocated blocks: it needs "
              << "block " << p.column << " of row " << row << " of " << table_name << ", which holds "
              << num_blocks_name << "[" << row << "] = " << s.num_blocks[row]
              << " blocks (a runner allocates the blocks of a step's lookahead positions, its draft tokens "
                 "included, before the step)";
      return message.str();
    }
  }
  message << "position " << position << " of request " << request << " is beyond " << table_name << " ("
          << s.block_table_cols << " blocks of " << s.block_size << " tokens per row) or negative";
  return message.str();
}

// The request of token t (query_start_loc is checked, non-decreasing).
inline int64_t request_of_token(const int32_t* query_start_loc, int64_t num_reqs, int64_t t) {
  int64_t r = 0;
  while (r + 1 < num_reqs && query_start_loc[r + 1] <= t) ++r;
  return r;
}

}  // namespace specops::cpu
