#pragma once
// Slot ids as (block, offset) pairs for a KV-cache group's storage block size (docs/context_parallel.md), with
// floor semantics: PAD_SLOT_ID = -1 becomes (-1, block_size - 1), so a consumer that skips
// negative blocks skips padding, and block * block_size + offset gives the slot back.
#include <cstdint>

#include "kernels/fast_divmod.h"

namespace specops::kernels {

struct FormatSlotShape {
  int64_t num_slots = 0;
  int64_t num_rows = 0;    // rows of out, >= num_slots; rows past num_slots get the pair of PAD
  int64_t row_stride = 2;  // elements between rows of out
  int64_t block_size = 1;
};

// Power-of-two block sizes (the usual case) take an arithmetic shift and a mask, which are
// floor division and floor modulo for negative slots too. Otherwise slots in [0, 2^31) (all
// real slots in practice) divide through a precomputed reciprocal, since a hardware 64-bit
// divide per slot costs several times more; other slots, PAD among them, take the divide.
struct SlotDivider {
  int64_t block_size;
  int shift = 0;
  bool fast = false;
  FastDivmod divmod;

  explicit SlotDivider(int64_t block_size_) : block_size(block_size_) {
    while (shift < 62 && (int64_t{1} << shift) < block_size) ++shift;
    fast = block_size <= INT32_MAX;
    if (fast) divmod = FastDivmod(static_cast<uint32_t>(block_size));
  }
};

template <bool kPowerOfTwo>
inline void split_slot(int64_t slot, const SlotDivider& d, int64_t& block, int64_t& offset) {
  if constexpr (kPowerOfTwo) {
    // Arithmetic right shift (guaranteed since C++20, and what every supported compiler does).
    block = slot >> d.shift;
    offset = slot & (d.block_size - 1);
  } else if (d.fast && slot >= 0 && slot <= INT32_MAX) {
    block = d.divmod.div(static_cast<uint32_t>(slot));
    offset = slot - block * d.block_size;
  } else {
    block = slot / d.block_size;
    offset = slot - block * d.block_size;
    if (offset < 0) {  // C++ division truncates toward zero; floor is one block lower
      block -= 1;
      offset += d.block_size;
    }
  }
}

template <bool kPowerOfTwo, typename SlotT, typename OutT>
void format_slot_mapping_blocks_impl(const SlotT* slot_mapping, OutT* out, const FormatSlotShape& s) {
  const SlotDivider divider(s.block_size);
  int64_t block;
  int64_t offset;
  for (int64_t i = 0; i < s.num_slots; ++i) {
    split_slot<kPowerOfTwo>(static_cast<int64_t>(slot_mapping[i]), divider, block, offset);
    out[i * s.row_stride] = static_cast<OutT>(block);
    out[i * s.row_stride + 1] = static_cast<OutT>(offset);
  }
  split_slot<kPowerOfTwo>(-1, divider, block, offset);
  for (int64_t i = s.num_slots; i < s.num_rows; ++i) {
    out[i * s.row_stride] = static_cast<OutT>(block);
    out[i * s.row_stride + 1] = static_cast<OutT>(offset);
  }
}

template <typename SlotT, typename OutT>
void format_slot_mapping_blocks(const SlotT* slot_mapping, OutT* out, const FormatSlotShape& s) {
  if ((s.block_size & (s.block_size - 1)) == 0) {
    format_slot_mapping_blocks_impl<true>(slot_mapping, out, s);
  } else {
    format_slot_mapping_blocks_impl<false>(slot_mapping, out, s);
  }
}

}  // namespace specops::kernels
