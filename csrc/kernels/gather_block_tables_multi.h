#pragma once
// gather_block_tables for every KV-cache group of a step in one call. The groups share the batch
// (idx_mapping, num_reqs_padded) and the request-indexed first positions (num_computed_tokens);
// each has its own source table, block counts, output, sliding-window reach and block size. One
// call, so a runner gathers every group's batch table with one launch, as vLLM's model runner
// V2 does (BlockTables.gather_block_tables).
#include <cstdint>

#include "kernels/gather_block_tables.h"

namespace specops::kernels {

struct GatherBlockTablesGroup {
  const int32_t* src = nullptr;
  const int32_t* num_blocks = nullptr;
  // The group's masking positions: num_computed_tokens when its reach > 0, else null (no mask).
  const int32_t* num_computed_tokens = nullptr;
  int32_t* out = nullptr;
  GatherBlockTablesShape shape;  // num_reqs and num_reqs_padded are the call's; the rest the group's
};

template <typename IdxT>
void gather_block_tables_multi(const IdxT* idx_mapping, const GatherBlockTablesGroup* groups, int64_t num_groups) {
  for (int64_t g = 0; g < num_groups; ++g) {
    gather_block_tables<IdxT>(groups[g].src, groups[g].num_blocks, idx_mapping, groups[g].num_computed_tokens,
                              groups[g].out, groups[g].shape);
  }
}

}  // namespace specops::kernels
