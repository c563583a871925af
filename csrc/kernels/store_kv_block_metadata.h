#pragma once
// The groups of vllm-ascend's store_kv_block (docs/dsa_metadata_family.md): the slot mapping
// cut into runs of consecutive slots inside one block, negative slots skipped; per run its
// length, its first token and its first slot, then zeros up to the capacity.
//
// Plain C++ over raw pointers, no torch, so the body compiles for an AI CPU as well as the host.
#include <cstdint>

namespace specops::kernels::store_kv_block {

// The number of runs, for slots that passed the op's checks (each in [0, 2^31 - 1) or negative).
template <typename T>
inline int64_t count_runs(const T* slots, int64_t num_slots, int64_t block_size) {
  int64_t runs = 0;
  for (int64_t i = 0; i < num_slots; ++i) {
    const int64_t slot = slots[i];
    if (slot < 0) continue;
    const bool continues = i > 0 && static_cast<int64_t>(slots[i - 1]) == slot - 1 && slot % block_size != 0;
    if (!continues) ++runs;
  }
  return runs;
}

// Writes the runs and the zeros after them; capacity >= count_runs.
template <typename T>
inline void write_groups(const T* slots, int64_t num_slots, int64_t block_size, int64_t capacity, int32_t* group_len,
                         int32_t* group_key_idx, int32_t* group_key_cache_idx) {
  int64_t group = -1;
  for (int64_t i = 0; i < num_slots; ++i) {
    const int64_t slot = slots[i];
    if (slot < 0) continue;
    // A slot continues the run of the one before it when it is the next slot of the same block
    // (the previous slot is then >= 0, so it belongs to the current run).
    const bool continues = i > 0 && static_cast<int64_t>(slots[i - 1]) == slot - 1 && slot % block_size != 0;
    if (continues) {
      ++group_len[group];
      continue;
    }
    ++group;
    group_len[group] = 1;
    group_key_idx[group] = static_cast<int32_t>(i);
    group_key_cache_idx[group] = static_cast<int32_t>(slot);
  }
  for (int64_t g = group + 1; g < capacity; ++g) group_len[g] = group_key_idx[g] = group_key_cache_idx[g] = 0;
}

}  // namespace specops::kernels::store_kv_block
