// move_kv_cache_entries: its metadata checks (the Meta kernel, and every backend's first step),
// then the CPU op: the checks, then the body. No slot value is rejected (a slot outside a cache is
// skipped, as PAD is), so the checks are all metadata and every backend rejects the same calls.
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>

#include "cpu/checks.h"
#include "kernels/move_kv_cache_entries.h"

namespace specops::cpu {
namespace {

// Elements of one slot's entry (the sizes past the first two; 1 for a 2-D cache).
template <typename Int>
Int entry_elements(const at::Tensor& cache) {
  Int entry = 1;
  for (int64_t d = 2; d < cache.dim(); ++d) entry = entry * size_of<Int>(cache, d);
  return entry;
}

// [num_blocks, block_size, *entry] with the entry contiguous and the slots of a block one entry
// apart (the slot-major layout every body indexes as block * stride(0) + offset * entry), and
// blocks that do not overlap. A dimension of size 1 may have any stride (it is never stepped).
template <typename Int>
void check_cache_layout(const at::Tensor& cache, int64_t c) {
  const ArgName name{"kv_caches", c};
  Int expected = 1;
  for (int64_t d = cache.dim() - 1; d >= 1; --d) {
    TORCH_CHECK_VALUE(size_of<Int>(cache, d) <= 1 || stride_of<Int>(cache, d) == expected, name,
                      " must be contiguous past its first dimension ([num_blocks, block_size, *entry], the entry "
                      "contiguous), got shape ",
                      cache.sym_sizes(), " and strides ", cache.sym_strides());
    expected = expected * size_of<Int>(cache, d);
  }
  check_rows_disjoint(cache, name);
}

// Whether two caches that a byte span test finds meeting interleave without sharing a byte: the
// halves kv[:, 0] and kv[:, 1] of a [num_blocks, 2, block_size, ...] buffer. Both step blocks by
// the same S bytes and hold `bytes` of entries a block (< S); b's blocks start d = (b - a) mod S
// bytes into a's, so they miss a's when [d, d + b.bytes) lies in [a.bytes, S). Sizes of a fake
// tensor that may be symbolic are not compared (the conservative answer: they may meet).
struct BlockLayout {
  int64_t first;        // byte offset of block 0 (an address, or a place in the storage)
  int64_t block_bytes;  // bytes of a block's entries
  int64_t stride;       // bytes between blocks (0: one block, no stride to interleave with)
};

std::optional<BlockLayout> block_layout(const at::Tensor& cache) {
  if (symbolic(cache) || cache.size(0) < 2) return std::nullopt;
  const auto size = static_cast<int64_t>(cache.element_size());
  const int64_t first = cache.device().is_meta() ? cache.storage_offset() * size
                                                 : static_cast<int64_t>(reinterpret_cast<uintptr_t>(cache.data_ptr()));
  return BlockLayout{first, cache.size(1) * entry_elements<int64_t>(cache) * size, cache.stride(0) * size};
}

bool interleave_disjoint(const at::Tensor& a, const at::Tensor& b) {
  const std::optional<BlockLayout> x = block_layout(a);
  const std::optional<BlockLayout> y = block_layout(b);
  if (!x || !y || x->stride != y->stride) return false;
  const int64_t stride = x->stride;
  const int64_t d = ((y->first - x->first) % stride + stride) % stride;
  return d >= x->block_bytes && d + y->block_bytes <= stride;
}

// No two caches may share memory (a move in one would change the other, and the device programs
// of two caches run at once), nor may a cache share memory with the pairs. For real tensors the
// caches' byte spans are swept in order of their first byte, each compared with the spans still
// open (a step passes hundreds of caches, and only the halves of one buffer meet); the pairwise
// check names the two that share memory.
void check_caches_alias_nothing(const at::Tensor& src_slots, const at::Tensor& dst_slots, at::TensorList kv_caches) {
  const int64_t num_caches = static_cast<int64_t>(kv_caches.size());
  for (int64_t c = 0; c < num_caches; ++c) {
    check_no_overlap(kv_caches[c], ArgName{"kv_caches", c}, src_slots, "src_slots");
    check_no_overlap(kv_caches[c], ArgName{"kv_caches", c}, dst_slots, "dst_slots");
  }
  if (num_caches < 2) return;
  const auto reject = [&](int64_t a, int64_t b) {
    if (a < b) std::swap(a, b);
    if (interleave_disjoint(kv_caches[a], kv_caches[b])) return;
    check_no_overlap(kv_caches[a], ArgName{"kv_caches", a}, kv_caches[b], ArgName{"kv_caches", b});
  };
  if (kv_caches[0].device().is_meta()) {
    // Fake tensors have no addresses: views of one storage are compared by their places in it.
    for (int64_t c = 1; c < num_caches; ++c) {
      for (int64_t other = 0; other < c; ++other) {
        if (kv_caches[c].device().is_meta() && storage_spans_meet(kv_caches[c], kv_caches[other])) reject(c, other);
      }
    }
    return;
  }
  c10::SmallVector<std::pair<ByteSpan, int64_t>, 16> spans;
  for (int64_t c = 0; c < num_caches; ++c) {
    if (kv_caches[c].numel() > 0) spans.push_back({byte_span_once(kv_caches[c]), c});
  }
  std::sort(spans.begin(), spans.end(), [](const auto& x, const auto& y) { return x.first.first < y.first.first; });
  c10::SmallVector<std::pair<ByteSpan, int64_t>, 4> open;
  for (const auto& span : spans) {
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](const auto& earlier) { return earlier.first.last < span.first.first; }),
               open.end());
    for (const auto& earlier : open) reject(span.second, earlier.second);
    open.push_back(span);
  }
}

template <typename Int>
void check_move_kv_cache_entries(const at::Tensor& src_slots, const at::Tensor& dst_slots, at::TensorList kv_caches,
                                 c10::IntArrayRef cache_groups) {
  check_tensor(src_slots, "src_slots", {c10::kInt, c10::kLong}, 2);
  const Anchor anchor = anchor_of(src_slots, "src_slots");
  check_tensor(dst_slots, "dst_slots", {c10::kInt, c10::kLong}, 2, anchor);
  TORCH_CHECK_VALUE(dst_slots.scalar_type() == src_slots.scalar_type(), "dst_slots must have the dtype of src_slots (",
                    dtype_name(src_slots.scalar_type()), "), got ", dtype_name(dst_slots.scalar_type()));
  TORCH_CHECK_VALUE(size_of<Int>(dst_slots, 0) == size_of<Int>(src_slots, 0) &&
                        size_of<Int>(dst_slots, 1) == size_of<Int>(src_slots, 1),
                    "dst_slots must have the shape of src_slots ([num_groups, num_pairs] = ", src_slots.sym_sizes(),
                    "), got ", dst_slots.sym_sizes());
  const int64_t num_caches = static_cast<int64_t>(kv_caches.size());
  TORCH_CHECK_VALUE(static_cast<int64_t>(cache_groups.size()) == num_caches,
                    "cache_groups must have one entry per cache (len(kv_caches) = ", num_caches, "), got ",
                    cache_groups.size());
  const Int num_groups = size_of<Int>(src_slots, 0);
  for (int64_t c = 0; c < num_caches; ++c) {
    TORCH_CHECK_VALUE(cache_groups[c] >= 0 && num_groups > cache_groups[c], "cache_groups[", c,
                      "] must be in [0, src_slots.size(0) = ", num_groups, "), got ", cache_groups[c]);
    const at::Tensor& cache = kv_caches[c];
    const ArgName name{"kv_caches", c};
    TORCH_CHECK_VALUE(cache.defined(), name, " must be a tensor, got None");
    TORCH_CHECK_VALUE(cache.layout() == c10::kStrided, name, " must be a strided (dense) tensor, got ",
                      cache.layout());
    TORCH_CHECK_VALUE(cache.dim() >= 2, name, " must be [num_blocks, block_size, *entry] (at least 2-D), got shape ",
                      cache.sym_sizes());
    TORCH_CHECK_VALUE(cache.device() == anchor.device, name, " must be on ", anchor.device, " like ", anchor.name,
                      ", got ", cache.device());
    if (C10_UNLIKELY(symbolic(cache))) {
      check_cache_layout<c10::SymInt>(cache, c);
    } else {
      check_cache_layout<int64_t>(cache, c);
    }
  }
  check_caches_alias_nothing(src_slots, dst_slots, kv_caches);
}

template <typename SlotT>
void run(const at::Tensor& src_slots, const at::Tensor& dst_slots, const kernels::KvCacheView* caches,
         int64_t num_caches) {
  kernels::MoveKvShape shape;
  shape.num_pairs = src_slots.size(1);
  shape.src_row_stride = src_slots.stride(0);
  shape.dst_row_stride = dst_slots.stride(0);
  kernels::move_kv_cache_entries<SlotT>(src_slots.data_ptr<SlotT>(), dst_slots.data_ptr<SlotT>(), caches, num_caches, shape);
}

void move_kv_cache_entries(const at::Tensor& src_slots, const at::Tensor& dst_slots, at::TensorList kv_caches,
                           c10::IntArrayRef cache_groups) {
  check_move_kv_cache_entries<int64_t>(src_slots, dst_slots, kv_caches, cache_groups);
  const int64_t num_caches = static_cast<int64_t>(kv_caches.size());
  if (src_slots.size(1) == 0) return;
  c10::SmallVector<kernels::KvCacheView, 16> caches;
  for (int64_t c = 0; c < num_caches; ++c) {
    const at::Tensor& cache = kv_caches[c];
    if (cache.numel() == 0) continue;  // no slot: every pair is skipped
    kernels::KvCacheView view;
    view.base = static_cast<uint8_t*>(cache.data_ptr());
    view.block_size = cache.size(1);
    view.num_slots = cache.size(0) * cache.size(1);
    view.entry_bytes = entry_elements<int64_t>(cache) * static_cast<int64_t>(cache.element_size());
    view.block_stride = cache.stride(0) * static_cast<int64_t>(cache.element_size());
    view.group = cache_groups[c];
    caches.push_back(view);
  }
  const int64_t used = static_cast<int64_t>(caches.size());
  if (src_slots.scalar_type() == c10::kInt) {
    run<int32_t>(src_slots, dst_slots, caches.data(), used);
  } else {
    run<int64_t>(src_slots, dst_slots, caches.data(), used);
  }
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // Moves KV-cache entries between slots in every cache of a list in one call (one launch on a
  // device): cache c takes the pairs of row cache_groups[c] of src_slots / dst_slots
  // ([num_groups, num_pairs], int32 or int64), applied in row order; PAD (-1) and slots outside a
  // cache are skipped (the tree's accepted-path compaction, docs/tree_kv_move.md).
  m.def("move_kv_cache_entries(Tensor src_slots, Tensor dst_slots, Tensor(a!)[] kv_caches, int[] cache_groups) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("move_kv_cache_entries", &move_kv_cache_entries); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("move_kv_cache_entries", &check_move_kv_cache_entries<c10::SymInt>);
}

}  // namespace specops::cpu
