#pragma once
// Moves KV-cache entries slot to slot, in every cache of a list (every layer, K and V apart, every
// KV-cache group), after tree verification: each accepted token's KV goes from its tree-order
// slot to the slot of its final position.
//
// A cache is slot-major: [num_blocks, block_size, *entry], the entry contiguous and the slots of
// a block contiguous, blocks `block_stride` bytes apart (>= block_size * entry; a view such as
// kv[:, 0] of [num_blocks, 2, block_size, ...] has a wider stride). Slot s is at block s / B,
// offset s % B. Cache c belongs to group g = groups[c], whose pairs are row g of src / dst:
// (src[g][p], dst[g][p]) copies the entry at slot src to slot dst.
//
// The pairs of a row are applied in row order, each completely before the next: a pair sees the
// writes of the pairs before it. (A tree path [0, 2, 3] gives (2 -> 1), (3 -> 2): the second
// writes the slot the first reads, after it has read it.) A pair with either slot outside
// [0, num_blocks * B) (PAD = -1 among them) is skipped: nothing is read or written for it. The
// move is a byte copy, so one body serves every dtype.
#include <cstdint>
#include <cstring>

namespace specops::kernels {

struct KvCacheView {
  uint8_t* base = nullptr;
  int64_t block_stride = 0;  // bytes between blocks
  int64_t entry_bytes = 0;   // bytes of one slot's entry (entries of a block are this far apart)
  int64_t block_size = 1;
  int64_t num_slots = 0;  // num_blocks * block_size
  int64_t group = 0;      // the row of src / dst this cache takes its pairs from
};

struct MoveKvShape {
  int64_t num_pairs = 0;       // pairs per row
  int64_t src_row_stride = 0;  // elements between rows of src
  int64_t dst_row_stride = 0;  // elements between rows of dst
};

inline uint8_t* kv_entry(const KvCacheView& cache, int64_t slot) {
  return cache.base + slot / cache.block_size * cache.block_stride + slot % cache.block_size * cache.entry_bytes;
}

// SlotT: int32 or int64, src and dst alike.
template <typename SlotT>
void move_kv_cache_entries(const SlotT* src, const SlotT* dst, const KvCacheView* caches, int64_t num_caches,
                           const MoveKvShape& s) {
  for (int64_t c = 0; c < num_caches; ++c) {
    const KvCacheView& cache = caches[c];
    const SlotT* from = src + cache.group * s.src_row_stride;
    const SlotT* to = dst + cache.group * s.dst_row_stride;
    for (int64_t p = 0; p < s.num_pairs; ++p) {
      const int64_t a = static_cast<int64_t>(from[p]);
      const int64_t b = static_cast<int64_t>(to[p]);
      if (a < 0 || a >= cache.num_slots || b < 0 || b >= cache.num_slots || a == b) continue;
      // Two slots of one cache never overlap (checked strides), so memcpy is enough.
      std::memcpy(kv_entry(cache, b), kv_entry(cache, a), static_cast<size_t>(cache.entry_bytes));
    }
  }
}

}  // namespace specops::kernels
