// compute_slot_mapping: its metadata checks (the Meta kernel, and every backend's first step), then
// the CPU op: the checks, the value checks, the kernel body; and check_slot_mapping_positions,
// its value checks for several tables (host-only).
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <algorithm>

#include "cpu/scratch.h"
#include "cpu/slot_mapping_checks.h"
#include "kernels/compute_slot_mapping.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_compute_slot_mapping(const at::Tensor& query_start_loc, const at::Tensor& positions,
                                const at::Tensor& block_table, int64_t block_size, const at::Tensor& out,
                                int64_t blocks_per_kv_block, int64_t cp_world_size, int64_t cp_rank,
                                int64_t cp_interleave, const std::optional<at::Tensor>& idx_mapping,
                                int64_t num_tokens_padded, const std::optional<at::Tensor>& num_blocks) {
  check_tensor(out, "out", {c10::kLong, c10::kInt}, 1);
  const Anchor anchor = anchor_of(out, "out");
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1, anchor);
  const Int num_reqs = check_query_start_loc_meta<Int>(query_start_loc, &anchor);
  check_slot_mapping_args<Int>(block_table, block_size, out, blocks_per_kv_block, cp_world_size, cp_rank,
                               cp_interleave, numel_of<Int>(positions), Int(num_tokens_padded), &anchor);
  check_idx_mapping(idx_mapping, num_reqs, &anchor);
  if (num_blocks.has_value()) check_num_blocks<Int>(*num_blocks, "num_blocks", block_table, "block_table", &anchor);
  // Every kernel reads query_start_loc, positions, the table and idx_mapping while it stores.
  check_outputs_alias_nothing({{&out, {"out"}}}, {{&query_start_loc, {"query_start_loc"}},
                                                  {&positions, {"positions"}},
                                                  {&block_table, {"block_table"}},
                                                  {idx_mapping.has_value() ? &*idx_mapping : nullptr, {"idx_mapping"}},
                                                  {num_blocks.has_value() ? &*num_blocks : nullptr, {"num_blocks"}}});
}

void compute_slot_mapping(const at::Tensor& query_start_loc, const at::Tensor& positions,
                          const at::Tensor& block_table, int64_t block_size, const at::Tensor& out,
                          int64_t blocks_per_kv_block, int64_t cp_world_size, int64_t cp_rank, int64_t cp_interleave,
                          const std::optional<at::Tensor>& idx_mapping, int64_t num_tokens_padded,
                          const std::optional<at::Tensor>& num_blocks) {
  check_compute_slot_mapping<int64_t>(query_start_loc, positions, block_table, block_size, out, blocks_per_kv_block,
                                      cp_world_size, cp_rank, cp_interleave, idx_mapping, num_tokens_padded,
                                      num_blocks);
  check_query_start_loc(query_start_loc, positions.numel(), "positions");
  const int64_t num_reqs = query_start_loc.numel() - 1;
  kernels::SlotMappingShape shape =
      slot_mapping_shape(block_table, block_size, blocks_per_kv_block, cp_world_size, cp_rank, cp_interleave, num_reqs,
                         positions.numel(), num_tokens_padded);
  if (num_blocks.has_value()) shape.num_blocks = num_blocks->data_ptr<int32_t>();

  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  const int32_t* table = block_table.data_ptr<int32_t>();
  AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "compute_slot_mapping", [&] {
    using PosT = index_t;
    const PosT* pos = positions.data_ptr<PosT>();
    with_idx_mapping(idx_mapping, [&](auto* idx) {
      check_rows_inside_table(idx, num_reqs, shape.block_table_rows, "block_table");
      // The check places a token only past its row's covered positions, so it keeps the general
      // divisors; the write pass is compiled per divisor kind.
      const kernels::SlotMappingDivisors checked(shape);
      const kernels::SlotMappingCheck found = kernels::check_slot_mapping_batch(qsl, pos, idx, shape, checked);
      if (found.bad_token >= 0) {
        const int64_t bad = found.bad_token;
        const int64_t request = request_of_token(qsl, num_reqs, bad);
        const int64_t row = idx ? static_cast<int64_t>(idx[request]) : request;
        TORCH_CHECK_VALUE(false, "positions[", bad, "]: ",
                          position_outside_message(pos[bad], request, row, shape, checked, "block_table", "num_blocks"));
      }
      kernels::with_slot_divisors(shape, [&](const auto& divisors) {
        if (out.scalar_type() == c10::kLong) {
          kernels::compute_slot_mapping(qsl, pos, table, idx, out.data_ptr<int64_t>(), shape, divisors, &found);
          return;
        }
        // An int32 out: the slots go to scratch first, and only if the largest fits are they
        // copied out (a slot past 2^31 - 1 would wrap to another request's slot).
        int32_t* narrow = int32_scratch(num_tokens_padded);
        const int64_t largest = kernels::compute_slot_mapping(qsl, pos, table, idx, narrow, shape, divisors, &found);
        if (largest > INT32_MAX) {
          int64_t* wide = int64_scratch(num_tokens_padded);
          kernels::compute_slot_mapping(qsl, pos, table, idx, wide, shape, divisors, &found);
          const int64_t past = std::max<int64_t>(kernels::find_slot_past_int32(wide, num_tokens_padded), 0);
          TORCH_CHECK_VALUE(false, "out is int32, but the slot of positions[", past, "] = ",
                            static_cast<int64_t>(pos[past]), " is ", wide[past],
                            " (its block id in block_table times block_size = ", block_size,
                            "), past 2^31 - 1; pass an int64 out");
        }
        std::copy(narrow, narrow + num_tokens_padded, out.data_ptr<int32_t>());
      });
    });
  });
}

// The value checks of compute_slot_mapping for several tables at once, writing nothing: a caller
// that maps one batch through several tables (PersistentMappings.refresh) rejects a batch before
// it rewrites the first group. Table g maps with block_sizes[g] and blocks_per_kv_block[g], under
// the CP layout where cp_sharded[g] (else as a single rank). slot_mappings (empty, or one per
// table): the outputs the slots will go to, read for their dtype only: an int32 one must hold
// every slot, which is computed wide into scratch and checked here, as compute_slot_mapping
// checks its int32 out.
void check_slot_mapping_positions(const at::Tensor& query_start_loc, const at::Tensor& positions,
                                  at::TensorList block_tables, const std::optional<at::Tensor>& idx_mapping,
                                  c10::IntArrayRef block_sizes, c10::IntArrayRef blocks_per_kv_block,
                                  const c10::List<bool>& cp_sharded, int64_t cp_world_size, int64_t cp_rank,
                                  int64_t cp_interleave, at::TensorList num_blocks, at::TensorList slot_mappings) {
  const c10::List<bool> no_enabled;  // every table maps its slots
  const GroupSettings settings{block_sizes,   blocks_per_kv_block, cp_sharded,   no_enabled,
                               cp_world_size, cp_rank,             cp_interleave};
  settings.check(block_tables.size(), /*has_enabled=*/false);
  check_tensor(positions, "positions", {c10::kLong, c10::kInt}, 1);
  check_query_start_loc(query_start_loc, positions.numel(), "positions");
  const int64_t num_reqs = query_start_loc.numel() - 1;
  check_idx_mapping(idx_mapping, num_reqs);
  TORCH_CHECK_VALUE(num_blocks.empty() || num_blocks.size() == block_tables.size(),
                    "num_blocks must be empty or hold one tensor per block table (", block_tables.size(), "), got ",
                    num_blocks.size());
  TORCH_CHECK_VALUE(slot_mappings.empty() || slot_mappings.size() == block_tables.size(),
                    "slot_mappings must be empty or hold one tensor per block table (", block_tables.size(),
                    "), got ", slot_mappings.size());
  for (size_t g = 0; g < slot_mappings.size(); ++g) {
    check_tensor(slot_mappings[g], ArgName{"slot_mappings", static_cast<int64_t>(g)}, {c10::kLong, c10::kInt}, 1);
  }
  const int32_t* qsl = query_start_loc.data_ptr<int32_t>();
  for (size_t g = 0; g < block_tables.size(); ++g) {
    const ArgName table_name{"block_tables", static_cast<int64_t>(g)};
    const SlotMappingArgNames names = SlotMappingArgNames::of_group(static_cast<int64_t>(g));
    const GroupSettings::Cp cp = settings.cp(g);
    check_tensor(block_tables[g], table_name, {c10::kInt}, 2);
    check_positive(block_sizes[g], names.block_size);
    check_positive(blocks_per_kv_block[g], names.blocks_per_kv_block);
    check_cp_rank(cp.world_size, cp.rank, "cp_world_size");
    check_positive(cp.interleave, "cp_interleave");
    TORCH_CHECK_VALUE(block_sizes[g] <= INT32_MAX / blocks_per_kv_block[g] / cp.world_size, names.block_size, " * ",
                      names.blocks_per_kv_block, " * cp_world_size must be < 2^31, got ", block_sizes[g], " * ",
                      blocks_per_kv_block[g], " * ", cp.world_size);
    const int64_t kv_block = block_sizes[g] * blocks_per_kv_block[g];
    TORCH_CHECK_VALUE(kv_block % cp.interleave == 0, "cp_interleave must divide ", names.block_size, " * ",
                      names.blocks_per_kv_block, " = ", kv_block, ", got ", cp.interleave);
    kernels::SlotMappingShape shape;
    shape.num_reqs = num_reqs;
    shape.num_tokens = positions.numel();
    shape.num_tokens_padded = positions.numel();
    shape.block_table_rows = block_tables[g].size(0);
    shape.block_table_cols = block_tables[g].size(1);
    shape.block_table_stride = block_tables[g].stride(0);
    shape.block_size = block_sizes[g];
    shape.blocks_per_kv_block = blocks_per_kv_block[g];
    shape.cp_world_size = cp.world_size;
    shape.cp_rank = cp.rank;
    shape.cp_interleave = cp.interleave;
    if (!num_blocks.empty()) {
      use_num_blocks(std::optional<at::Tensor>(num_blocks[g]), ArgName{"num_blocks", static_cast<int64_t>(g)},
                     block_tables[g], table_name, shape);
    }
    AT_DISPATCH_INDEX_TYPES(positions.scalar_type(), "check_slot_mapping_positions", [&] {
      using PosT = index_t;
      const PosT* pos = positions.data_ptr<PosT>();
      with_idx_mapping(idx_mapping, [&](auto* idx) {
        check_rows_inside_table(idx, num_reqs, shape.block_table_rows, table_name);
        const kernels::SlotMappingDivisors divisors(shape);
        const kernels::SlotMappingCheck found = kernels::check_slot_mapping_batch(qsl, pos, idx, shape, divisors);
        const int64_t bad = found.bad_token;
        if (bad >= 0) {
          const int64_t request = request_of_token(qsl, num_reqs, bad);
          const int64_t row = idx ? static_cast<int64_t>(idx[request]) : request;
          std::ostringstream counts_name;
          counts_name << ArgName{"num_blocks", static_cast<int64_t>(g)};
          TORCH_CHECK_VALUE(false, "positions[", bad, "]: ",
                            position_outside_message(pos[bad], request, row, shape, divisors, table_name,
                                                     counts_name.str()));
        }
        if (slot_mappings.empty() || slot_mappings[g].scalar_type() != c10::kInt) return;
        // Every slot, wide, into scratch (an int64 output tracks no largest slot: scanned), the
        // first past int32 named.
        int64_t* wide = int64_scratch(shape.num_tokens_padded);
        kernels::compute_slot_mapping(qsl, pos, block_tables[g].data_ptr<int32_t>(), idx, wide, shape, divisors, &found);
        const int64_t past = kernels::find_slot_past_int32(wide, shape.num_tokens_padded);
        if (past < 0) return;
        TORCH_CHECK_VALUE(false, "slot_mappings[", g, "] is int32, but the slot of positions[", past, "] = ",
                          static_cast<int64_t>(pos[past]), " is ", wide[past], " (its block id in ", table_name,
                          " times block_size = ", shape.block_size, "), past 2^31 - 1; pass an int64 slot mapping");
      });
    });
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // docs/slot_mapping.md
  m.def(
      "compute_slot_mapping(Tensor query_start_loc, Tensor positions, Tensor block_table, int block_size, "
      "Tensor(a!) out, int blocks_per_kv_block, int cp_world_size, int cp_rank, int cp_interleave, "
      "Tensor? idx_mapping, int num_tokens_padded, Tensor? num_blocks=None) -> ()");
  // Host-only: compute_slot_mapping's value checks for several tables, writing nothing (so that
  // PersistentMappings.refresh rejects a batch before it rewrites any group). block_sizes,
  // blocks_per_kv_block, cp_sharded: one entry per table (a table not CP-sharded maps as a single
  // rank); num_blocks: empty, or the blocks allocated to each row, one tensor per table;
  // slot_mappings: empty, or the output each table's slots go to, one per table (never written:
  // an int32 one has its slots checked to fit, as compute_slot_mapping checks its int32 out).
  m.def(
      "check_slot_mapping_positions(Tensor query_start_loc, Tensor positions, Tensor[] block_tables, "
      "Tensor? idx_mapping, int[] block_sizes, int[] blocks_per_kv_block, bool[] cp_sharded, int cp_world_size, "
      "int cp_rank, int cp_interleave, Tensor[] num_blocks, Tensor[] slot_mappings) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) {
  m.impl("compute_slot_mapping", &compute_slot_mapping);
  m.impl("check_slot_mapping_positions", &check_slot_mapping_positions);
}
TORCH_LIBRARY_IMPL(specops, Meta, m) { m.impl("compute_slot_mapping", &check_compute_slot_mapping<c10::SymInt>); }

}  // namespace specops::cpu
