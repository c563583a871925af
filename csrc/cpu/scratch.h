#pragma once
// Host scratch for the ops that gather every old value before any write. These ops run every
// step; a per-thread buffer that only grows keeps the steady state free of heap allocations.
#include <cstdint>
#include <vector>

namespace specops::cpu {

// A buffer of at least `size` int32 values, valid until the next call on this thread.
inline int32_t* int32_scratch(int64_t size) {
  thread_local std::vector<int32_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

// The same for int64 values (slots computed wide before an int32 output takes them;
// sas_metadata's per-batch cost table).
inline int64_t* int64_scratch(int64_t size) {
  thread_local std::vector<int64_t> buffer;
  if (static_cast<int64_t>(buffer.size()) < size) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

}  // namespace specops::cpu
