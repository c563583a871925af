#pragma once
// dspark_swa_indices for every DSpark group of a step in one call. The groups share the batch
// (query_start_loc, seq_lens), the token count and the CP split; each has its own block table,
// window, block size, row width and outputs. One call, so a draft step builds the indices of all
// its DSpark groups with one launch.
#include <cstdint>

#include "kernels/dspark_swa_indices.h"

namespace specops::kernels {

struct DSparkGroup {
  const int32_t* block_table = nullptr;
  int32_t* out = nullptr;
  int32_t* out_lens = nullptr;
  DSparkShape shape;  // num_reqs, rows_begin and num_rows are the call's; the rest the group's
};

inline void dspark_swa_indices_multi(const int32_t* query_start_loc, const int32_t* seq_lens,
                                     const DSparkGroup* groups, int64_t num_groups) {
  for (int64_t g = 0; g < num_groups; ++g) {
    dspark_swa_indices(groups[g].block_table, query_start_loc, seq_lens, groups[g].out, groups[g].out_lens,
                       groups[g].shape);
  }
}

}  // namespace specops::kernels
