#pragma once
// Batch-indexed block table gathered from the request-indexed one. SPEC 3.3.
//
// A captured graph reads the batch-indexed table at a fixed address; every step rewrites the
// whole padded extent, so a row never shows ids of the request that held it last step.
#include <algorithm>
#include <cstdint>
#include <cstring>

namespace specops::kernels {

constexpr int32_t kNullBlockId = 0;

struct GatherBlockTablesShape {
  int64_t num_reqs = 0;
  int64_t num_reqs_padded = 0;
  int64_t src_rows = 0;
  int64_t src_cols = 0;
  int64_t src_stride = 0;  // elements between rows
  int64_t out_cols = 0;
  int64_t out_stride = 0;
};

// Block ids of source row `row` that a batch row receives: num_blocks[row], clamped to what
// both tables hold, so the body never reads or writes out of bounds even without the host check.
inline int64_t blocks_to_copy(int32_t num_blocks, const GatherBlockTablesShape& s) {
  const int64_t most = std::min(s.src_cols, s.out_cols);
  return std::clamp<int64_t>(num_blocks, 0, most);
}

// Writes out rows [0, num_reqs_padded): batch row r gets the first num_blocks[row] ids of
// source row row = idx_mapping[r] and NULL after them; rows with row < 0 (or past the source
// table) and rows [num_reqs, num_reqs_padded) are all NULL.
template <typename IdxT>
void gather_block_tables(const int32_t* src, const int32_t* num_blocks, const IdxT* idx_mapping, int32_t* out,
                         const GatherBlockTablesShape& s) {
  for (int64_t r = 0; r < s.num_reqs_padded; ++r) {
    int32_t* out_row = out + r * s.out_stride;
    int64_t count = 0;
    if (r < s.num_reqs) {
      const int64_t row = static_cast<int64_t>(idx_mapping[r]);
      if (row >= 0 && row < s.src_rows) {
        count = blocks_to_copy(num_blocks[row], s);
        if (count > 0) std::memcpy(out_row, src + row * s.src_stride, static_cast<size_t>(count) * sizeof(int32_t));
      }
    }
    std::fill(out_row + count, out_row + s.out_cols, kNullBlockId);
  }
}

}  // namespace specops::kernels
