// format_slot_mapping_blocks_multi: its metadata checks (the Meta kernel, and every backend's first
// step), then the CPU op: the checks of every group, then every group formatted.
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <optional>

#include "cpu/checks.h"
#include "kernels/format_slot_mapping_blocks_multi.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_format_slot_mapping_blocks_multi(at::TensorList slot_mappings, c10::IntArrayRef block_sizes,
                                            int64_t num_slots, at::TensorList out) {
  const size_t num_groups = slot_mappings.size();
  TORCH_CHECK_VALUE(block_sizes.size() == num_groups,
                    "block_sizes must have one entry per slot mapping (len(slot_mappings) = ", num_groups, "), got ",
                    block_sizes.size());
  TORCH_CHECK_VALUE(out.size() == num_groups, "out must have one tensor per slot mapping (len(slot_mappings) = ",
                    num_groups, "), got ", out.size());
  check_non_negative(num_slots, "num_slots");
  std::optional<Anchor> anchor;
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t index = static_cast<int64_t>(g);
    const at::Tensor& slots = slot_mappings[g];
    const at::Tensor& target = out[g];
    check_tensor(target, ArgName{"out", index}, {c10::kLong, c10::kInt}, 2, anchor ? &*anchor : nullptr);
    if (!anchor) anchor = anchor_of(target, "out[0]");
    check_rows_disjoint(target, ArgName{"out", index});
    check_tensor(slots, ArgName{"slot_mappings", index}, {c10::kLong, c10::kInt}, 1, &*anchor);
    TORCH_CHECK_VALUE(numel_of<Int>(slots) >= num_slots, "slot_mappings[", g, "] must have at least num_slots = ",
                      num_slots, " entries, got ", numel_of<Int>(slots));
    check_int32_range(block_sizes[g], ArgName{"block_sizes", index}, 1);
    TORCH_CHECK_VALUE(size_of<Int>(target, 1) == 2 && size_of<Int>(target, 0) >= num_slots, "out[", g,
                      "] must have shape [>= num_slots = ", num_slots, ", 2], got ", target.sym_sizes());
    // Each output is written once, by its own programs on a device.
    for (size_t earlier = 0; earlier < g; ++earlier) {
      check_no_overlap(target, ArgName{"out", index}, out[earlier], ArgName{"out", static_cast<int64_t>(earlier)});
    }
  }
  // Every slot mapping is read while outputs are written.
  for (size_t g = 0; g < num_groups; ++g) {
    for (size_t input = 0; input < num_groups; ++input) {
      check_no_overlap(out[g], ArgName{"out", static_cast<int64_t>(g)}, slot_mappings[input],
                       ArgName{"slot_mappings", static_cast<int64_t>(input)});
    }
  }
}

void format_slot_mapping_blocks_multi(at::TensorList slot_mappings, c10::IntArrayRef block_sizes, int64_t num_slots,
                                      at::TensorList out) {
  check_format_slot_mapping_blocks_multi<int64_t>(slot_mappings, block_sizes, num_slots, out);
  const size_t num_groups = slot_mappings.size();
  // Up to 8 groups without a heap allocation.
  c10::SmallVector<kernels::FormatSlotGroup, 8> groups(num_groups);
  for (size_t g = 0; g < num_groups; ++g) {
    const at::Tensor& slots = slot_mappings[g];
    const at::Tensor& target = out[g];
    kernels::FormatSlotGroup& group = groups[g];
    if (slots.scalar_type() == c10::kLong) {
      group.slots64 = slots.data_ptr<int64_t>();
    } else {
      group.slots32 = slots.data_ptr<int32_t>();
    }
    if (target.scalar_type() == c10::kLong) {
      group.out64 = target.data_ptr<int64_t>();
    } else {
      group.out32 = target.data_ptr<int32_t>();
    }
    group.shape.num_slots = num_slots;
    group.shape.num_rows = target.size(0);
    group.shape.row_stride = target.stride(0);
    group.shape.block_size = block_sizes[g];
  }
  kernels::format_slot_mapping_blocks_multi(groups.data(), static_cast<int64_t>(num_groups));
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  // The two per-group ops of a draft step for every group at once (one launch each):
  // slot_mappings[g][:num_slots] formatted with block_sizes[g] into out[g]; and the DSpark
  // indices of group g (block_tables[g], windows[g], block_sizes[g], widths[g]) into out[g],
  // out_lens[g], every group sharing the batch, the token count and the CP split.
  m.def(
      "format_slot_mapping_blocks_multi(Tensor[] slot_mappings, int[] block_sizes, int num_slots, "
      "Tensor(a!)[] out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("format_slot_mapping_blocks_multi", &format_slot_mapping_blocks_multi); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("format_slot_mapping_blocks_multi", &check_format_slot_mapping_blocks_multi<c10::SymInt>);
}

}  // namespace specops::cpu
