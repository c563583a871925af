// format_slot_mapping_blocks (docs/context_parallel.md): its metadata checks (the Meta kernel, and
// every backend's first step), then the CPU op: the checks, the kernel body.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include "cpu/checks.h"
#include "kernels/format_slot_mapping_blocks.h"

namespace specops::cpu {
namespace {

template <typename Int>
void check_format_slot_mapping_blocks(const at::Tensor& slot_mapping, int64_t block_size, const at::Tensor& out) {
  check_tensor(out, "out", {c10::kLong, c10::kInt}, 2);
  check_rows_disjoint(out, "out");
  const Anchor anchor = anchor_of(out, "out");
  check_tensor(slot_mapping, "slot_mapping", {c10::kLong, c10::kInt}, 1, anchor);
  check_int32_range(block_size, "block_size", 1);
  TORCH_CHECK_VALUE(size_of<Int>(out, 1) == 2 && size_of<Int>(out, 0) >= numel_of<Int>(slot_mapping),
                    "out must have shape [>= ", numel_of<Int>(slot_mapping), ", 2], got ", out.sym_sizes());
  check_outputs_alias_nothing({{&out, {"out"}}}, {{&slot_mapping, {"slot_mapping"}}});
}

void format_slot_mapping_blocks(const at::Tensor& slot_mapping, int64_t block_size, const at::Tensor& out) {
  check_format_slot_mapping_blocks<int64_t>(slot_mapping, block_size, out);

  kernels::FormatSlotShape shape;
  shape.num_slots = slot_mapping.numel();
  shape.num_rows = out.size(0);
  shape.row_stride = out.stride(0);
  shape.block_size = block_size;
  AT_DISPATCH_INDEX_TYPES(slot_mapping.scalar_type(), "format_slot_mapping_blocks", [&] {
    const index_t* slots = slot_mapping.data_ptr<index_t>();
    if (out.scalar_type() == c10::kLong) {
      kernels::format_slot_mapping_blocks(slots, out.data_ptr<int64_t>(), shape);
    } else {
      kernels::format_slot_mapping_blocks(slots, out.data_ptr<int32_t>(), shape);
    }
  });
}

}  // namespace

// The schema (the op's contract with its checks above; csrc/registration.cpp names the library).
TORCH_LIBRARY_FRAGMENT(specops, m) {
  m.def("format_slot_mapping_blocks(Tensor slot_mapping, int block_size, Tensor(a!) out) -> ()");
}
TORCH_LIBRARY_IMPL(specops, CPU, m) { m.impl("format_slot_mapping_blocks", &format_slot_mapping_blocks); }
TORCH_LIBRARY_IMPL(specops, Meta, m) {
  m.impl("format_slot_mapping_blocks", &check_format_slot_mapping_blocks<c10::SymInt>);
}

}  // namespace specops::cpu
