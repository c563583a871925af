#pragma once
// Batch-indexed block table gathered from the request-indexed one (docs/persistent_buffers.md).
//
// A captured graph reads the batch-indexed table at a fixed address; every step rewrites the
// whole padded extent, so a row never shows ids of the request that held it last step.
//
// Sliding-window masking: a group whose attention reads at most `reach` tokens below a
// request's first scheduled position (first_pos = num_computed_tokens[row]) gets NULL for the
// entries wholly below that window, j < max(first_pos - reach, 0) / block_size. The window's
// manager may already have freed those blocks and handed them to another request, and an
// attention kernel can still load them in a tile that straddles the window start.
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
  // Masking is on when num_computed_tokens is given (not null) and reach > 0.
  int64_t sliding_window_reach = 0;
  int64_t block_size = 1;
};

// Leading entries of a row that no query of this step can attend. A negative count (invalid;
// the host op rejects it) masks nothing, as on the device.
inline int64_t masked_leading_blocks(int64_t first_pos, const GatherBlockTablesShape& s) {
  return std::max<int64_t>(first_pos - s.sliding_window_reach, 0) / s.block_size;
}

// Block ids of source row `row` that a batch row receives: num_blocks[row], clamped to what
// both tables hold, so the body never reads or writes out of bounds even without the host check.
inline int64_t blocks_to_copy(int32_t num_blocks, const GatherBlockTablesShape& s) {
  const int64_t most = std::min(s.src_cols, s.out_cols);
  return std::clamp<int64_t>(num_blocks, 0, most);
}

// Writes out rows [0, num_reqs_padded): batch row r gets the first num_blocks[row] ids of
// source row row = idx_mapping[r] and NULL after them; rows with row < 0 (or past the source
// table) and rows [num_reqs, num_reqs_padded) are all NULL. With num_computed_tokens (request-
// indexed like src, null when absent) and a reach > 0, the masked leading entries are NULL too.
template <typename IdxT>
void gather_block_tables(const int32_t* src, const int32_t* num_blocks, const IdxT* idx_mapping,
                         const int32_t* num_computed_tokens, int32_t* out, const GatherBlockTablesShape& s) {
  const bool mask_window = num_computed_tokens != nullptr && s.sliding_window_reach > 0;
  for (int64_t r = 0; r < s.num_reqs_padded; ++r) {
    int32_t* out_row = out + r * s.out_stride;
    int64_t count = 0;
    if (r < s.num_reqs) {
      const int64_t row = static_cast<int64_t>(idx_mapping[r]);
      if (row >= 0 && row < s.src_rows) {
        count = blocks_to_copy(num_blocks[row], s);
        const int64_t masked =
            mask_window ? std::min(masked_leading_blocks(num_computed_tokens[row], s), count) : int64_t{0};
        std::fill(out_row, out_row + masked, kNullBlockId);
        if (count > masked) {
          std::memcpy(out_row + masked, src + row * s.src_stride + masked,
                      static_cast<size_t>(count - masked) * sizeof(int32_t));
        }
      }
    }
    std::fill(out_row + count, out_row + s.out_cols, kNullBlockId);
  }
}

}  // namespace specops::kernels
