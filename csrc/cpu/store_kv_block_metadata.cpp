// store_kv_block_metadata: its metadata checks (the AI-CPU kernel's; the Meta kernel, and every
// backend's first step), then the CPU op: the checks, the slots' values, a capacity check the kernel
// lacks (it writes past outputs too small for the runs), then the groups; nothing is written
// before every check passed.
#include <torch/library.h>

#include "cpu/checks.h"
#include "kernels/store_kv_block_metadata.h"

namespace specops::cpu {
namespace {

namespace skb = kernels::store_kv_block;

constexpr int64_t kInt32Max = 2147483647;

template <typename T>
void check_and_write(const T* slots, int64_t num_slots, int64_t block_size, const at::Tensor& group_len,
                     const at::Tensor& group_key_idx, const at::Tensor& group_key_cache_idx) {
  for (int64_t i = 0; i < num_slots; ++i) {
    // The kernel reads int32 slots and compares slot + 1: INT32_MAX overflows there.
    TORCH_CHECK_VALUE(static_cast<int64_t>(slots[i]) < kInt32Max && static_cast<int64_t>(slots[i]) >= -kInt32Max - 1,
                      "slot_mapping[", i, "] must be below 2^31 - 1 (the kernel's slot + 1 overflows int32), got ",
                      static_cast<int64_t>(slots[i]));
  }
  const int64_t capacity = group_len.numel();
  const int64_t runs = skb::count_runs(slots, num_slots, block_size);
  TORCH_CHECK_VALUE(runs <= capacity, "group_len, group_key_idx and group_key_cache_idx hold ", capacity,
                    " groups, but slot_mapping has ", runs,
                    " runs (a request whose tokens cross a block makes two); size them for the worst case, "
                    "slot_mapping's length");
  skb::write_groups(slots, num_slots, block_size, capacity, group_len.data_ptr<int32_t>(),
                    group_key_idx.data_ptr<int32_t>(), group_key_cache_idx.data_ptr<int32_t>());
}

template <typename Int>
void check_store_kv_block_metadata(const at::Tensor& slot_mapping, const at::Tensor& group_len,
                                   const at::Tensor& group_key_idx, const at::Tensor& group_key_cache_idx,
                                   int64_t block_size) {
  check_tensor(slot_mapping, "slot_mapping", {c10::kInt, c10::kLong}, 1);
  const Anchor anchor = anchor_of(slot_mapping, "slot_mapping");
  check_tensor(group_len, "group_len", {c10::kInt}, 1, anchor);
  check_tensor(group_key_idx, "group_key_idx", {c10::kInt}, 1, anchor);
  check_tensor(group_key_cache_idx, "group_key_cache_idx", {c10::kInt}, 1, anchor);
  // The kernel casts block_size to int32 and refuses what is not positive then; a value outside
  // int32 is refused here rather than read modulo 2^32.
  TORCH_CHECK_VALUE(block_size > 0 && block_size <= kInt32Max, "block_size must be positive (and fit int32), got ",
                    block_size);
  const Int capacity = numel_of<Int>(group_len);
  TORCH_CHECK_VALUE(numel_of<Int>(slot_mapping) > 0, "slot_mapping is empty");
  TORCH_CHECK_VALUE(capacity > 0 && numel_of<Int>(group_key_idx) > 0 && numel_of<Int>(group_key_cache_idx) > 0,
                    "group_len, group_key_idx and group_key_cache_idx must not be empty");
  TORCH_CHECK_VALUE(numel_of<Int>(group_key_idx) == capacity && numel_of<Int>(group_key_cache_idx) == capacity,
                    "group_key_idx and group_key_cache_idx must have group_len's ", capacity, " entries, got ",
                    numel_of<Int>(group_key_idx), " and ", numel_of<Int>(group_key_cache_idx));
  TORCH_CHECK_VALUE(numel_of<Int>(slot_mapping) <= kInt32Max, "slot_mapping has more than 2^31 - 1 slots");
  check_outputs_alias_nothing({{&group_len, {"group_len"}},
                               {&group_key_idx, {"group_key_idx"}},
                               {&group_key_cache_idx, {"group_key_cache_idx"}}},
                              {{&slot_mapping, {"slot_mapping"}}});
}

void store_kv_block_metadata(const at::Tensor& slot_mapping, const at::Tensor& group_len,
                             const at::Tensor& group_key_idx, const at::Tensor& group_key_cache_idx,
                             int64_t block_size) {
  check_store_kv_block_metadata<int64_t>(slot_mapping, group_len, group_key_idx, group_key_cache_idx, block_size);
  if (slot_mapping.scalar_type() == c10::kInt) {
    check_and_write(slot_mapping.data_ptr<int32_t>(), slot_mapping.numel(), block_size, group_len, group_key_idx,
                    group_key_cache_idx);
  } else {
    check_and_write(slot_mapping.data_ptr<int64_t>(), slot_mapping.numel(), block_size, group_len, group_key_idx,
                    group_key_cache_idx);
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def(
      "store_kv_block_metadata(Tensor slot_mapping, Tensor(a!) group_len, Tensor(b!) group_key_idx, "
      "Tensor(c!) group_key_cache_idx, int block_size) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("store_kv_block_metadata", &store_kv_block_metadata); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("store_kv_block_metadata", &check_store_kv_block_metadata<c10::SymInt>);
}

}  // namespace specops::cpu
