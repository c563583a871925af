#pragma once
// KV slots each DSpark draft-block token may attend to (docs/context_parallel.md): the last `window` tokens
// before the block plus the whole block, no causal mask. Every token of a request gets the same
// row, so the body computes a request's row once and copies it to the request's other tokens.
// Under DSA-CP only this rank's slice [rows_begin, rows_begin + num_rows) of the padded token
// stream is produced, written straight into out.
#include <algorithm>
#include <cstdint>

namespace specops::kernels {

constexpr int32_t kNoSlot = -1;

struct DSparkShape {
  int64_t num_reqs = 0;
  int64_t rows_begin = 0;  // global token index of out's first row (local_start)
  int64_t num_rows = 0;    // rows to write (tokens_per_rank)
  int64_t width = 0;
  int64_t window = 0;
  int64_t block_size = 1;
  int64_t table_rows = 0;
  int64_t table_cols = 0;
  int64_t table_stride = 0;  // elements between block-table rows
  int64_t out_stride = 0;    // elements between rows of out
};

struct VisibleRange {
  int64_t start;    // first visible position
  int64_t visible;  // entries of the row that hold a slot, in [0, width]
};

inline VisibleRange visible_range(int64_t query_len, int64_t seq_len, const DSparkShape& s) {
  const int64_t start = std::max<int64_t>(seq_len - query_len - s.window, 0);
  return VisibleRange{start, std::clamp<int64_t>(seq_len - start, 0, s.width)};
}

// Row `request` of the block table gives the slots of positions [start, start + visible);
// the rest of the row is kNoSlot. Positions outside the table, negative block ids and slots that
// do not fit int32 are kNoSlot too. One division per kernel block, not per entry.
inline void fill_visible_row(const int32_t* block_table, int64_t request, const VisibleRange& range,
                             int32_t* row, const DSparkShape& s) {
  int64_t j = 0;
  if (request < s.table_rows) {
    const int32_t* block_row = block_table + request * s.table_stride;
    int64_t position = range.start;
    while (j < range.visible) {
      const int64_t column = position / s.block_size;
      const int64_t offset = position - column * s.block_size;
      const int64_t run = std::min(s.block_size - offset, range.visible - j);
      const int64_t block_id = column < s.table_cols ? block_row[column] : -1;
      const int64_t base = block_id * s.block_size + offset;
      if (block_id < 0 || base + run - 1 > INT32_MAX) {
        for (int64_t k = 0; k < run; ++k) {
          const int64_t slot = base + k;
          row[j + k] = block_id >= 0 && slot <= INT32_MAX ? static_cast<int32_t>(slot) : kNoSlot;
        }
      } else {
        for (int64_t k = 0; k < run; ++k) row[j + k] = static_cast<int32_t>(base + k);
      }
      j += run;
      position += run;
    }
  }
  std::fill(row + j, row + s.width, kNoSlot);
}

// The first visible position of `request` whose slot does not fit the int32 output, or -1. The
// host op rejects such a request (device kernels write kNoSlot there, never a wrapped slot).
inline int64_t find_position_past_int32(const int32_t* block_table, int64_t request, const VisibleRange& range,
                                        const DSparkShape& s) {
  if (request >= s.table_rows || range.visible == 0) return -1;
  const int32_t* block_row = block_table + request * s.table_stride;
  const int64_t last = range.start + range.visible - 1;
  for (int64_t column = range.start / s.block_size; column <= last / s.block_size && column < s.table_cols; ++column) {
    const int64_t block_id = block_row[column];
    const int64_t block_start = column * s.block_size;
    const int64_t last_in_block = std::min(last, block_start + s.block_size - 1);
    if (block_id < 0 || block_id * s.block_size + (last_in_block - block_start) <= INT32_MAX) continue;
    // Offsets up to INT32_MAX - block_id * block_size fit (none when that is negative).
    return std::max({range.start, block_start, block_start + INT32_MAX - block_id * s.block_size + 1});
  }
  return -1;
}

inline void dspark_swa_indices(const int32_t* block_table, const int32_t* query_start_loc, const int32_t* seq_lens,
                               int32_t* out, int32_t* out_lens, const DSparkShape& s) {
  const int64_t rows_end = s.rows_begin + s.num_rows;
  const int64_t num_tokens = query_start_loc[s.num_reqs];
  // The first request that ends after rows_begin.
  int64_t request = std::upper_bound(query_start_loc + 1, query_start_loc + s.num_reqs + 1,
                                     static_cast<int32_t>(std::min<int64_t>(s.rows_begin, INT32_MAX))) -
                    (query_start_loc + 1);
  for (; request < s.num_reqs && query_start_loc[request] < rows_end; ++request) {
    const int64_t begin = std::max<int64_t>(query_start_loc[request], s.rows_begin);
    const int64_t end = std::min<int64_t>(query_start_loc[request + 1], rows_end);
    if (begin >= end) continue;
    const int64_t query_len = query_start_loc[request + 1] - query_start_loc[request];
    const VisibleRange range = visible_range(query_len, seq_lens[request], s);
    int32_t* first_row = out + (begin - s.rows_begin) * s.out_stride;
    fill_visible_row(block_table, request, range, first_row, s);
    out_lens[begin - s.rows_begin] = static_cast<int32_t>(range.visible);
    for (int64_t t = begin + 1; t < end; ++t) {
      std::copy(first_row, first_row + s.width, out + (t - s.rows_begin) * s.out_stride);
      out_lens[t - s.rows_begin] = static_cast<int32_t>(range.visible);
    }
  }
  for (int64_t t = std::max(num_tokens, s.rows_begin); t < rows_end; ++t) {
    int32_t* row = out + (t - s.rows_begin) * s.out_stride;
    std::fill(row, row + s.width, kNoSlot);
    out_lens[t - s.rows_begin] = 0;
  }
}

}  // namespace specops::kernels
