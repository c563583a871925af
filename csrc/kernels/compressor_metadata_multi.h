#pragma once
// compressor_metadata for every compressed group of a draft-loop step and every draft pass in one
// call (docs/ops.md, compressor_metadata_multi): group g, step s is compressor_metadata on row s
// of cu_seqlens / start_pos into step s of the group's outputs. One call, so a device launches
// once for all of them; the host loops the single op's body.
//
// Plain C++ over raw pointers, no torch.
#include <cstdint>

#include "kernels/compressor_metadata.h"

namespace specops::kernels::compressor {

// One group: its table and sizes (Inputs' cu_seqlens / start_pos are set per step), its RoPE
// tables and fill rows, and its outputs, [S, N, ...] contiguous.
struct Group {
  Inputs in;
  const unsigned char* rope_cos;
  const unsigned char* rope_sin;
  int64_t rope_stride;  // bytes between RoPE rows
  int64_t row_bytes;
  const unsigned char* cos_one;
  const unsigned char* sin_zero;
  int64_t num_rows;  // N
  unsigned char* out_cos;
  unsigned char* out_sin;
  int32_t* slots;
};

// cu_seqlens / start_pos: num_steps rows, cu_stride / start_stride elements apart.
inline void compressor_metadata_multi(const Group* groups, int64_t num_groups, const int32_t* cu_seqlens,
                                      int64_t cu_stride, const int32_t* start_pos, int64_t start_stride,
                                      int64_t num_steps) {
  for (int64_t g = 0; g < num_groups; ++g) {
    const Group& group = groups[g];
    const int64_t slot_width = group.in.format == kFormatFlat ? 1 : 2;
    for (int64_t s = 0; s < num_steps; ++s) {
      Inputs in = group.in;
      in.cu_seqlens = cu_seqlens + s * cu_stride;
      in.start_pos = start_pos + s * start_stride;
      const int64_t step_bytes = s * group.num_rows * group.row_bytes;
      compressor_metadata(in, group.rope_cos, group.rope_sin, group.rope_stride, group.row_bytes, group.cos_one,
                          group.sin_zero, group.num_rows, group.out_cos + step_bytes, group.out_sin + step_bytes,
                          group.slots + s * group.num_rows * slot_width);
    }
  }
}

}  // namespace specops::kernels::compressor
