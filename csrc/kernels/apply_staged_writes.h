#pragma once
// Sparse row writes into a block table: the new block ids of many requests in one call (docs/persistent_buffers.md).
//
// Write k copies values[cu_lens[k], cu_lens[k+1]) to table[rows[k], starts[k] : starts[k] + len_k].
#include <cstdint>
#include <cstring>

namespace specops::kernels {

struct StagedWritesShape {
  int64_t num_writes = 0;
  int64_t num_values = 0;
  int64_t table_rows = 0;
  int64_t table_cols = 0;
  int64_t table_stride = 0;  // elements between rows
};

// Whether write k lies inside the table and its values inside `values`. A write that does not
// fit is dropped whole (never clipped); the device kernels apply the same rule.
inline bool staged_write_fits(int64_t row, int64_t start, int64_t begin, int64_t end, const StagedWritesShape& s) {
  return row >= 0 && row < s.table_rows && start >= 0 && begin >= 0 && end >= begin && end <= s.num_values &&
         end - begin <= s.table_cols - start;
}

// Writes in order k = 0, 1, ...: where two writes overlap the later one wins (the device
// kernels write in parallel and make no such promise).
template <typename RowT>
void apply_staged_writes(int32_t* table, const RowT* rows, const int32_t* starts, const int32_t* cu_lens,
                         const int32_t* values, const StagedWritesShape& s) {
  for (int64_t k = 0; k < s.num_writes; ++k) {
    const int64_t row = static_cast<int64_t>(rows[k]);
    const int64_t start = starts[k];
    const int64_t begin = cu_lens[k];
    const int64_t end = cu_lens[k + 1];
    // An empty write may come with an empty (null) `values`: memcpy must not see it.
    if (end == begin || !staged_write_fits(row, start, begin, end, s)) continue;
    std::memcpy(table + row * s.table_stride + start, values + begin, static_cast<size_t>(end - begin) * sizeof(int32_t));
  }
}

}  // namespace specops::kernels
