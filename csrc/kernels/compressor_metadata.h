#pragma once
// The compressor's per-row metadata (vllm-ascend `compressor_metadata`,
// docs/dsa_metadata_family.md): one row per compression group a request completes in this step,
// packed in request order; each row's compressed-cache slot and the RoPE rows of the group's
// first position. Rows that cannot be placed (past the block table, a negative block id, past
// the RoPE table, a flat slot past int32) and rows past the valid ones get cos 1, sin 0 and the
// invalid slot.
//
// Plain C++ over raw pointers, no torch.
#include <cstdint>
#include <cstring>

namespace specops::kernels::compressor {

constexpr int64_t kFormatFlat = 1;         // slot = block id * block size + offset (A5)
constexpr int64_t kFormatBlockOffset = 2;  // (block id, offset) pairs (A2/A3)
constexpr int64_t kInt32Max = 2147483647;

// Rows request r completes: (start + len) / ratio - start / ratio, 0 when start < 0 or len <= 0.
inline int64_t rows_of(int64_t start, int64_t len, int64_t ratio) {
  if (start < 0 || len <= 0) return 0;
  return (start + len) / ratio - start / ratio;
}

struct Inputs {
  const int32_t* cu_seqlens;
  const int32_t* start_pos;
  const int32_t* block_table;
  int64_t table_stride;  // elements between rows of the block table
  int64_t table_width;
  int64_t block_size;
  int64_t ratio;
  int64_t num_reqs;
  int64_t rope_rows;
  int64_t format;
};

// Where row `row` of request r (its i-th row) goes: its RoPE row, or -1 when invalid, and its slot.
struct Row {
  int64_t rope_row = -1;
  int32_t block_id = -1;
  int32_t offset = 0;
};

inline Row place(const Inputs& in, int64_t r, int64_t i) {
  Row row;
  const int64_t position = in.start_pos[r] / in.ratio + i;
  const int64_t block_index = position / in.block_size;
  const int64_t rope_row = position * in.ratio;
  if (block_index >= in.table_width || rope_row >= in.rope_rows) return row;
  const int64_t block_id = in.block_table[r * in.table_stride + block_index];
  if (block_id < 0) return row;
  const int64_t offset = position % in.block_size;
  if (in.format == kFormatFlat && block_id * in.block_size + offset > kInt32Max) return row;
  row.rope_row = rope_row;
  row.block_id = static_cast<int32_t>(block_id);
  row.offset = static_cast<int32_t>(offset);
  return row;
}

// Writes all num_rows rows. rope_cos / rope_sin: rope_rows rows of row_bytes, rope_stride bytes
// apart; cos_one / sin_zero: one row of the value 1 and of 0 in the same dtype.
inline void compressor_metadata(const Inputs& in, const unsigned char* rope_cos, const unsigned char* rope_sin,
                                int64_t rope_stride, int64_t row_bytes, const unsigned char* cos_one,
                                const unsigned char* sin_zero,
                                int64_t num_rows, unsigned char* out_cos, unsigned char* out_sin, int32_t* slots) {
  int64_t row = 0;
  for (int64_t r = 0; r < in.num_reqs && row < num_rows; ++r) {
    const int64_t count = rows_of(in.start_pos[r], int64_t{in.cu_seqlens[r + 1]} - in.cu_seqlens[r], in.ratio);
    for (int64_t i = 0; i < count && row < num_rows; ++i, ++row) {
      const Row placed = place(in, r, i);
      const bool valid = placed.rope_row >= 0;
      std::memcpy(out_cos + row * row_bytes, valid ? rope_cos + placed.rope_row * rope_stride : cos_one, row_bytes);
      std::memcpy(out_sin + row * row_bytes, valid ? rope_sin + placed.rope_row * rope_stride : sin_zero, row_bytes);
      if (in.format == kFormatFlat) {
        slots[row] = valid ? static_cast<int32_t>(placed.block_id * in.block_size + placed.offset) : -1;
      } else {
        slots[2 * row] = placed.block_id;
        slots[2 * row + 1] = valid ? placed.offset : static_cast<int32_t>(in.block_size - 1);
      }
    }
  }
  for (; row < num_rows; ++row) {
    std::memcpy(out_cos + row * row_bytes, cos_one, row_bytes);
    std::memcpy(out_sin + row * row_bytes, sin_zero, row_bytes);
    if (in.format == kFormatFlat) {
      slots[row] = -1;
    } else {
      slots[2 * row] = -1;
      slots[2 * row + 1] = static_cast<int32_t>(in.block_size - 1);
    }
  }
}

}  // namespace specops::kernels::compressor
