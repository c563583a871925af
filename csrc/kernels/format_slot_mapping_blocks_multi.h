#pragma once
// format_slot_mapping_blocks for every KV-cache group of a step in one call: group g's slot ids
// slot_mappings[g][:num_slots] become (block, offset) pairs for its own block size, and the rows
// of its output past num_slots get the pair of PAD. One call, so a draft step formats all its
// groups with one launch however many groups it has.
#include <cstdint>

#include "kernels/format_slot_mapping_blocks.h"

namespace specops::kernels {

// One group's input and output. Exactly one of slots64 / slots32 and one of out64 / out32 is set
// (the dtypes of that group's tensors).
struct FormatSlotGroup {
  const int64_t* slots64 = nullptr;
  const int32_t* slots32 = nullptr;
  int64_t* out64 = nullptr;
  int32_t* out32 = nullptr;
  FormatSlotShape shape;  // num_slots is the call's; num_rows, row_stride and block_size the group's
};

template <typename SlotT>
inline void format_group(const SlotT* slots, const FormatSlotGroup& group) {
  if (group.out64 != nullptr) {
    format_slot_mapping_blocks(slots, group.out64, group.shape);
  } else {
    format_slot_mapping_blocks(slots, group.out32, group.shape);
  }
}

inline void format_slot_mapping_blocks_multi(const FormatSlotGroup* groups, int64_t num_groups) {
  for (int64_t g = 0; g < num_groups; ++g) {
    if (groups[g].slots64 != nullptr) {
      format_group(groups[g].slots64, groups[g]);
    } else {
      format_group(groups[g].slots32, groups[g]);
    }
  }
}

}  // namespace specops::kernels
